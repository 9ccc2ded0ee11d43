"""The pipeline builder: records the operator chain and options, nothing else.

Each builder call appends one operator and returns the same ``Pipeline`` (fluent). Nothing runs
until iteration; then the pipeline hands ``zephon.engine`` a frozen ``PipelineSpec`` (``_spec``),
which it compiles and runs; the engine reads nothing else of the pipeline and writes nothing
back. The builder methods live in ``zephon.record_builders`` and ``zephon.token_builders``; this
module holds the pipeline's state, its options and inspection, and running, checkpointing and
restoring it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from zephon.ops.base import Operator
from zephon.options import RuntimeOptions
from zephon.record_builders import RecordBuilders
from zephon.token_builders import TokenBuilders

if TYPE_CHECKING:
    from zephon.engine.spec import PipelineSpec
    from zephon.validation import ValidationReport


class Pipeline(RecordBuilders, TokenBuilders):
    """A lazily built chain of operators over a WorkSource. Iterate it to get batches.

    Each builder method appends one operator and returns the same pipeline, so calls chain.
    Nothing runs until iteration; execution settings (``options``) change speed, never the data.

    Args:
        work_source: Where the sample pointers come from: a ``StaticMixtureWorkSource``, or a
            user ``WorkSource`` with ``next_chunk()``, ``clone_for_lane()`` and
            ``datasets_by_id``.

    Raises:
        TypeError: ``work_source`` is not a work source.
    """

    def __init__(self, work_source: Any) -> None:
        from zephon.engine.lanes.chunk_source import speaks_clone_protocol
        from zephon.errors import ConfigTypeError

        if not hasattr(work_source, "lane_chunk") and not speaks_clone_protocol(work_source):
            raise ConfigTypeError("Pipeline needs a WorkSource such as StaticMixtureWorkSource (or "
                            "one with next_chunk(), clone_for_lane() and datasets_by_id)")
        self.work_source = work_source
        self._ops: list[Operator] = []
        self._fetch_kw: dict[str, Any] = {}
        self._prefetch: dict[str, Any] | None = None
        self._options = RuntimeOptions()
        self._observability: dict[str, Any] | None = None
        self._pending_restore: dict | None = None
        self._validated = False  # add_op operators are probed on the first iteration
        self._runtime = None  # live engine session; never pickled
        # the work source as the last run primed it (a copy of ``work_source`` with its token
        # ratios), reused until the operator chain changes; None until then
        self._primed: Any = None
        self._checkpoint_round = 0  # collective checkpoints taken (they are gathered in rounds)

    # -- pickling: drop the live runtime, keep graph, options, pending restore -------------------

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_runtime"] = None
        return state

    def validate(self, *, strict: bool = False) -> ValidationReport:
        """Probe the ``add_op`` operators with synthetic records (determinism, identity,
        accumulator contracts).

        Args:
            strict: Raise ``ValidationError`` when the report has errors.

        Returns:
            The ``ValidationReport`` (``ok``, ``errors``, ``warnings``, ``format()``).
        """
        from zephon.validation import validate_pipeline

        return validate_pipeline(self._spec(), strict=strict)

    # -- options and inspection ----------------------------------------------------------------

    def options(self, **kw: Any) -> Pipeline:
        """Set execution options; each wins over its ``ZEPHON_*`` environment variable.

        None of them changes the data except the topology ones, which say which lanes a rank owns.
        ``explain()`` shows every value and where it came from.

        Args:
            **kw: Among others: ``num_workers``, ``runner`` ("process", "threads", "inline"),
                ``prefetch_batches``, ``micro_batch_size``, ``shm_slot_bytes``, ``shm_slots``,
                ``start_method``, ``log_level``, ``progress``; ``io_options`` (a ``StoreOptions``
                or dict); ``canonical_replicas``, ``dp_degree``, ``dp_group_id`` (lanes and
                ranks); ``aggregate_dir`` / ``aggregate_store`` (how ranks' checkpoints are
                gathered); ``auto_validation`` ("strict", "warn", "off"); ``mixture_config`` (a
                ``MixtureReadConfig``). Unknown names are ignored with a warning.

        Returns:
            This pipeline.

        Raises:
            ValueError: A value that cannot be used (checked here, not at the first batch).
        """
        self._options.update(**kw)
        self._validated = False  # auto_validation may have changed
        self._changed()
        return self

    def enable_observability(self, tracking: str = "nodes", *, sink: Any = None) -> Pipeline:
        """Collect per-operator and per-shard timing while the pipeline runs.

        Args:
            tracking: ``"nodes"`` (every operator and shard read), ``"stages"`` (totals) or
                ``"off"``.
            sink: Where periodic metric snapshots go: a ``zephon.observability.MetricsSinkConfig``
                or a dict of its fields (log lines or statsd gauges); ``None`` for none.

        Returns:
            This pipeline.

        Raises:
            ValueError: An unknown ``tracking`` mode.
        """
        if tracking not in ("off", "stages", "nodes"):
            raise ValueError(f"tracking must be off|stages|nodes, got {tracking!r}")
        self._observability = {"tracking": tracking, "sink": sink}
        self._changed()
        return self

    def explain(self) -> str:
        """The compiled plan as text: operators, runners, workers, every option with where its
        value came from, and where token-estimation figures will come from."""
        from zephon.engine.explain import explain

        return explain(self._spec(), self._runtime)

    # -- running -------------------------------------------------------------------------------

    def _spec(self) -> PipelineSpec:
        """This pipeline frozen for the engine (``zephon.engine.spec``): what it runs now."""
        from zephon.engine.spec import PipelineSpec, datasets_of
        from zephon.ops.fetch import FetchOp

        source = self._primed if self._primed is not None else self.work_source
        datasets = datasets_of(source)
        io = self._options.explicit.get("io_options")
        if io is not None:  # storage settings travel with the (pickled) datasets
            datasets = [ds.with_store_options(io) if hasattr(ds, "with_store_options") else ds
                        for ds in datasets]
        seen = self._observability or {}
        tracking = seen.get("tracking", "off")
        fetch = FetchOp(datasets, **self._fetch_kw, timing=tracking == "nodes")
        return PipelineSpec(
            work_source=source, ops=tuple(self._ops), fetch=fetch,
            options=RuntimeOptions(dict(self._options.explicit)),
            prefetch=dict(self._prefetch) if self._prefetch else None,
            pending_restore=self._pending_restore, tracking=tracking, sink=seen.get("sink"),
            fetch_max_batch=self._fetch_kw.get("max_batch"))

    def _restore_consumed(self) -> None:
        """The engine has started from the pending checkpoint: later ones come from the run."""
        self._pending_restore = None

    def __iter__(self) -> Iterator[Any]:
        from zephon.engine.session import Session

        if self._runtime is not None and self._runtime.active:
            from zephon.errors import EngineError

            raise EngineError("this pipeline is already being iterated; only one iterator may be active")
        if self._runtime is not None:
            self._runtime.close()
        spec = self._spec()
        if not self._validated:
            from zephon.validation import auto_validate

            auto_validate(spec)  # options(auto_validation=...): strict raises, warn warns
            self._validated = True
        self._runtime = Session(spec, on_started=self._restore_consumed)
        self._primed = self._runtime.spec.work_source
        if self._primed is not self.work_source:  # the user's source answers as primed too
            from zephon.work.token_estimation import adopt_token_ratios

            adopt_token_ratios(self.work_source, getattr(self._primed, "token_ratios", None))
        return iter(self._runtime)

    def checkpoint(self) -> dict:
        """A small JSON-serializable description of the delivered position: per lane, where the
        curriculum stands and which records the buffers hold, as cursors (never the data).

        With several data-parallel ranks it is collective: every rank calls it and receives the
        same merged dict.

        Returns:
            The checkpoint, for ``restore``.
        """
        from zephon.engine.session import checkpoint_of

        if self._pending_restore is not None:
            return self._pending_restore
        self._checkpoint_round += 1
        doc, self._primed = checkpoint_of(self._spec(), self._runtime, self._checkpoint_round)
        return doc

    def restore(self, state: Mapping[str, Any]) -> Pipeline:
        """Resume from a checkpoint on the next iteration: the stream goes on exactly where the
        checkpoint was taken, also with other execution settings, another micro-batch size or
        another number of ranks. The checkpoint is checked whole here (schema, ranges, this
        pipeline's operators, digests).

        Args:
            state: A dict from ``checkpoint()`` (or from ``merge_checkpoints``), taken with the same
                datasets, seed, operators and ``canonical_replicas``.

        Returns:
            This pipeline.

        Raises:
            CheckpointError: Malformed, altered, or taken by a different pipeline (the message
                names the field or the difference).
        """
        from zephon.engine.plan.checkpoint_view import view_of
        from zephon.state.checkpoint import validate_checkpoint

        doc = validate_checkpoint(state, view_of(self._spec()))
        self._changed()
        self._pending_restore = doc
        return self

    def close(self) -> None:
        """Stop the running engine and release its processes and shared memory. The pipeline can
        be iterated again afterwards (from the start, or from a pending ``restore``)."""
        self._changed()

    def metrics_snapshot(self) -> dict | None:
        """Per operator records/bytes/busy time, per dataset delivery against the target,
        buffers, shared memory and memory in use, and ``"losses"``: every record dropped or cut,
        by operator and reason.

        Returns:
            The metrics as a dict; ``None`` before the first iteration.
        """
        return None if self._runtime is None else self._runtime.metrics_snapshot()

    def fetch_timing_snapshot(self) -> Any:
        """Per-shard read timing (``zephon.timing_stats.FetchTimingSummary``) of the current
        or last run; None before iterating, after a change, or unless
        ``enable_observability("nodes")`` (``"stages"`` gives a summary without stages)."""
        return None if self._runtime is None else self._runtime.timing_snapshot("fetch")

    def prefetch_timing_snapshot(self) -> Any:
        """``prefetch()`` look-ahead counters (``PrefetchTimingSummary``); None as for
        ``fetch_timing_snapshot``."""
        return None if self._runtime is None else self._runtime.timing_snapshot("prefetch")

    def to_torch_dataset(self, stateful: bool = True) -> Any:
        """A ``torch.utils.data.IterableDataset`` over this pipeline, for frameworks that insist on
        a ``DataLoader`` (best: ``batch_size=None, num_workers=0``, since the pipeline batches and
        runs its own workers; with ``num_workers=n`` each DataLoader worker reads its share of the
        lanes). It does no work until iterated.

        Args:
            stateful: Give the dataset ``state_dict()`` / ``load_state_dict()`` (the pipeline's
                checkpoint), for ``torchdata``'s ``StatefulDataLoader``.

        Returns:
            The dataset.
        """
        from zephon.torch import PipelineIterableDataset

        return PipelineIterableDataset(self, stateful=stateful,
                                       as_loader_worker=self._as_loader_worker)

    def _as_loader_worker(self, worker: int, workers: int) -> None:
        """Make this pipeline DataLoader worker ``worker``'s share: its lanes, run in this
        process (``zephon.torch``; a DataLoader worker is daemonic: it may not start
        processes, so the process runner becomes inline; the threads runner is kept)."""
        from zephon.engine.factory import engine_kind
        from zephon.engine.plan.topology import LOADER_SHARE, resolve_topology

        if workers > 1:
            self._options.explicit[LOADER_SHARE] = (worker, workers)
        if engine_kind(self._options)[0] == "process":
            self.options(runner="inline")
        if workers > 1 and not resolve_topology(self._options).owned_lanes:
            rank = RuntimeOptions({k: v for k, v in self._options.explicit.items()
                                   if k != LOADER_SHARE})
            lanes = resolve_topology(rank).owned_lanes
            warnings.warn(f"zephon: DataLoader worker {worker} of {workers} has no lanes to "
                          f"read: this rank has {len(lanes)} (canonical_replicas); a lane count "
                          "that is a multiple of num_workers uses every worker", RuntimeWarning,
                          stacklevel=3)

    def to_indexable_torch_dataset(self) -> Any:
        """Not available: a mixture work source has no map-style access.

        Raises:
            RuntimeError: Always; use ``to_torch_dataset()``.
        """
        from zephon.errors import EngineError

        raise EngineError(
            "this pipeline is not indexable: a StaticMixtureWorkSource has no map-style access; "
            "use to_torch_dataset()")

    @property
    def ws(self) -> Any:
        """The pipeline's work source (the reference's name for ``work_source``)."""
        return self.work_source

    @property
    def is_indexable(self) -> bool:
        """Always ``False``: pipelines are iterable, not map-style."""
        return False

    def __repr__(self) -> str:
        names = ["fetch", *(o.op_name for o in self._ops)]
        return f"Pipeline({' -> '.join(names)})"
