"""``Pipeline``'s record builders: fetch and prefetch, the record operators, the stateful ones
(shuffle, ensure_mixture, batch) and user operators.

A part of the ``Pipeline`` class (``zephon.pipeline``), kept in its own module so each stays
readable: every method appends one operator (``zephon.ops``), whose constructor checks the
arguments, and returns the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from zephon.compat_notes import compat_keywords
from zephon.ops.base import Operator
from zephon.ops.batch import BatchOp
from zephon.ops.decode_text import DecodeTextOp
from zephon.ops.map_transform import FilterOp, MapBatchOp, MapTransformOp
from zephon.pipeline_base import PipelineBase

if TYPE_CHECKING:
    from typing_extensions import Self


class RecordBuilders(PipelineBase):
    """The builder methods over records (see ``Pipeline``)."""

    # -- builder: fetch side -------------------------------------------------------------------

    @compat_keywords("parallelism")
    def fetch(self, parallelism: int | None = None, max_batch: int | None = None) -> Self:
        """Tune the implicit fetch operator (worker count, micro-batch size).

        Args:
            parallelism: Shown in ``explain()``; every worker fetches (``options(num_workers=)``
                sets how many there are).
            max_batch: Pointers the fetch reads at a time (default 1024).

        Returns:
            This pipeline.
        """
        from zephon.ops.fetch import FetchOp

        FetchOp([], parallelism, max_batch)  # validates
        self._fetch_kw = {"parallelism": parallelism, "max_batch": max_batch}
        self._changed()
        return self

    fetch_parallelism = fetch

    @compat_keywords("placement")
    def prefetch(self, buffer_size: int = 1024, parallelism: int | None = None, *,
                 placement: str = "local") -> Self:
        """Download the shards that the next pointers need before the fetch reads them.

        Worth it for remote datasets. At most once per pipeline.

        Args:
            buffer_size: Pointers looked ahead.
            parallelism: Concurrent downloads (default 4).
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once):
                prefetching runs on this node.

        Returns:
            This pipeline.

        Raises:
            RuntimeError: ``prefetch`` was already called.
            ValueError: ``buffer_size`` is below 1.
        """
        if self._prefetch is not None:
            raise RuntimeError("prefetch() may be called at most once per pipeline")
        if buffer_size < 1:
            raise ValueError(f"prefetch buffer_size must be >= 1, got {buffer_size}")
        self._prefetch = {"buffer_size": int(buffer_size), "parallelism": parallelism or 4}
        self._changed()
        return self

    # -- builder: record operators -------------------------------------------------------------

    @compat_keywords("parallelism")
    def decode_text(self, parallelism: int | None = None, **kw: Any) -> Self:
        """Decode bytes fields into text.

        Args:
            parallelism: Shown in ``explain()``; every worker runs the stateless operators.
            **kw: ``fields`` (names to decode, default ``("text",)``), ``encoding`` (``"utf-8"``),
                ``errors`` (``"strict"``, as in ``bytes.decode``), ``normalize_newlines`` (``True``:
                CRLF and CR line ends become LF), ``lowercase`` (``False``).

        Returns:
            This pipeline.
        """
        return self._append(DecodeTextOp(parallelism=parallelism, **kw))

    @compat_keywords("placement", "parallelism")
    def map_transform(self, fn: Callable[[Any], Any], *, drop_none: bool = True,
                      placement: str = "auto", parallelism: int | None = None) -> Self:
        """Apply ``fn`` to every record's payload; ``None`` drops the record.

        ``fn`` runs where the stateless operators run (in worker processes it travels by value with
        cloudpickle) and must be deterministic: the same payload gives the same result.

        Args:
            fn: ``fn(payload) -> payload | None``; a dict record's payload is a plain dict.
            drop_none: Drop the records for which ``fn`` returns ``None``.
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once):
                the engine places stateless operators itself.
            parallelism: Shown in ``explain()``; every worker runs the stateless operators.

        Returns:
            This pipeline.
        """
        return self._append(MapTransformOp(fn, drop_none=drop_none, parallelism=parallelism))

    def filter(self, predicate: Callable[[Any], Any], *,
               parallelism: int | None = None) -> Self:
        """Keep the records for which ``predicate(payload)`` is true.

        What it removes is counted, by dataset, in ``metrics_snapshot()["losses"]`` under
        ``"filtered"`` and said once; the options ``filter_warn_ratio`` (default 0.9) and
        ``filter_raise_ratio`` (default none) warn or raise when filters remove more than that
        share of the records drawn.

        Args:
            predicate: ``predicate(payload) -> bool``; runs where the stateless operators run
                and must be deterministic.
            parallelism: Shown in ``explain()``.

        Returns:
            This pipeline.
        """
        return self._append(FilterOp(predicate, parallelism=parallelism))

    @compat_keywords("placement", "parallelism")
    def map_batch(self, fn: Callable[[Any], Any], *, drop_none: bool = True,
                  placement: str = "auto", parallelism: int | None = None) -> Self:
        """Apply ``fn`` to every ``SampleBatch`` after ``batch``; ``None`` drops the batch.

        Args:
            fn: ``fn(batch) -> batch | None``.
            drop_none: Drop the batches for which ``fn`` returns ``None``.
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once).
            parallelism: Shown in ``explain()``.

        Returns:
            This pipeline.

        Raises:
            ValueError: The pipeline has no ``batch`` yet.
        """
        if not any(isinstance(o, BatchOp) for o in self._ops):
            raise ValueError("map_batch must come after batch()")
        return self._append(MapBatchOp(fn, drop_none=drop_none, parallelism=parallelism))

    @compat_keywords("placement")
    def batch(self, microbatch_size: int, *, drop_last: bool = False,
              placement: str = "auto") -> Self:
        """Group records into ``SampleBatch``es, each of one lane. At most once per pipeline.

        Args:
            microbatch_size: Records per batch.
            drop_last: The last, short batch of each lane at the end of the stream is delivered
                (the default: nothing is dropped); ``True`` drops it for fixed shapes, and the
                records dropped are counted in ``metrics_snapshot()["losses"]`` as
                ``short_batch``. (Zephon 0.2.0 defaulted to ``True``; no flush happens mid-run
                here, so this concerns one batch per lane per run.)
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once):
                the engine places ``batch`` itself.

        Returns:
            This pipeline.

        Raises:
            ValueError: ``batch`` was already called.
        """
        if any(isinstance(o, BatchOp) for o in self._ops):
            raise ValueError("batch() may appear only once")
        return self._append(BatchOp(microbatch_size, drop_last=drop_last))

    @compat_keywords("placement", "parallelism")
    def shuffle(self, buffer_size: int | None = None, *, seed: int = 0,
                algorithm: str = "streaming", warmup_growth: float = 1.5,
                placement: str = "auto", parallelism: int | None = None) -> Self:
        """Shuffle records in a per-lane buffer, in an order that depends only on the seed and on
        record identity (never on workers or block boundaries).

        Args:
            buffer_size: Records held per lane (default 8192). The window starts small and grows
                to this size, so the first batch does not wait for a full buffer.
            seed: The shuffle's seed.
            algorithm: ``"streaming"`` (a growing reservoir), ``"block"`` (tumbling blocks of
                ``buffer_size``, each permuted) or ``"block_warmup"`` (blocks that grow by
                ``warmup_growth`` up to ``buffer_size``).
            warmup_growth: Growth factor of ``"block_warmup"``'s blocks (at least 1.0).
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once).
            parallelism: Accepted for compatibility; a lane's shuffle runs serially.

        Returns:
            This pipeline.
        """
        from zephon.ops.shuffle import ShuffleOp

        return self._append(ShuffleOp(8192 if buffer_size is None else buffer_size, seed=seed,
                                      algorithm=algorithm, warmup_growth=warmup_growth))

    @compat_keywords("placement", "parallelism")
    def ensure_mixture(self, *, max_buffer_size: int | None = 1000,
                       drain_target_ratio: float = 0.8, obsolete_drain_rate: float = 0.1,
                       weight_by: Any = "auto", warn_tolerance: float | None = None,
                       mixture: Mapping[str, float] | None = None, placement: str = "auto",
                       parallelism: int | None = None) -> Self:
        """Keep each lane's output on the target mixture, whatever the order records arrive in.

        Per-dataset buffers release the record of the dataset furthest behind its share. Weights
        are tokens after ``tokenize`` (or with a token-aware work source), else samples. A realised
        mixture that drifts from the target by more than ``warn_tolerance`` is reported.

        Args:
            max_buffer_size: Records buffered per lane before the buffers are drained best-first
                (the mixture then drifts toward the input for a scarce dataset). ``None`` buffers
                without limit and drops, counted, what cannot be emitted on target at the end.
            drain_target_ratio: Fraction of ``max_buffer_size`` left after such a drain.
            obsolete_drain_rate: Share of output given to datasets outside the target mixture.
            weight_by: ``"auto"`` (tokens when tokenized, else samples), ``"samples"``, a payload
                field name, or a callable ``record -> weight``.
            warn_tolerance: Drift of a dataset's realised share from its target above which a
                warning is given (default: no warning).
            mixture: Target weights by dataset name (default: the work source's mixture).
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once).
            parallelism: Accepted for compatibility; a lane's mixture runs serially.

        Returns:
            This pipeline.

        Raises:
            ValueError: Unknown dataset names, a bad ``weight_by``, or (token-aware work source)
                ``weight_by="samples"`` or no ``tokenize`` before it.
        """
        from zephon.ops.ensure_mixture import EnsureMixtureOp

        return self._append(EnsureMixtureOp(
            self.work_source, max_buffer_size=max_buffer_size,
            drain_target_ratio=drain_target_ratio, obsolete_drain_rate=obsolete_drain_rate,
            weight_by=weight_by, warn_tolerance=warn_tolerance, mixture=mixture,
            tokenized=any(o.traits().cost == "tokenize" for o in self._ops)))

    @compat_keywords("placement", "parallelism")
    def expand_chat(self, *, field: str = "messages", placement: str = "auto",
                    parallelism: int | None = None) -> Self:
        """One record per answered user query of the conversation in ``field``: each keeps the
        conversation up to the next user message (``zephon.ops.expand_chat``). A conversation with
        no answered query is dropped, and trailing unanswered turns cut; both are counted in
        ``metrics_snapshot()["losses"]``.

        Args:
            field: The payload field holding the list of ``{"role": ..., "content": ...}``
                messages (a dotted path reaches nested fields).
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once).
            parallelism: Shown in ``explain()``; every worker runs the stateless operators.

        Returns:
            This pipeline.

        Raises:
            ValueError: ``field`` has an empty path segment.
        """
        from zephon.ops.expand_chat import ExpandChatOp

        datasets = self.work_source.datasets_by_id
        ordered = [datasets[i] for i in sorted(datasets)] if isinstance(datasets, Mapping) \
            else list(datasets)
        return self._append(ExpandChatOp(ordered, field=field, parallelism=parallelism))

    # -- builder: user operators (docs/guides/operators.md) -----------------------------------

    @compat_keywords("placement", "parallelism")
    def stateful_transform(self, name: str, *, init_state: Callable[[], Any],
                           push: Callable[[Any, list], tuple],
                           flush: Callable[[Any], list] | None = None,
                           should_flush: Callable[[Any], bool] | None = None,
                           transform: Callable[[list], list] | None = None,
                           placement: str = "auto", parallelism: int = 1,
                           indexable: bool = False, preserves_cursor_order: bool = True,
                           state_records: Callable[[Any], list] | None = None,
                           state_from_records: Callable[[list], Any] | None = None) -> Self:
        """Per-lane state folded over the records: ``push(state, [record]) -> (state, outputs)``
        serially and in order, ``flush(state) -> outputs`` at the end of the stream (and when
        ``should_flush(state)``), then an optional stateless ``transform(records) -> records``.

        Args:
            name: The operator's name (in metrics, errors and checkpoints).
            init_state: ``() -> state``: a lane's fresh state.
            push: ``(state, records) -> (state, outputs)``, called with one record at a time.
            flush: ``state -> outputs`` at the end of the stream and on ``should_flush``. Supply it
                whenever ``push`` keeps records in the state, or they are lost at the end.
            should_flush: ``state -> bool``: flush now and start over from ``init_state()``.
            transform: ``records -> records``: a stateless step after the state.
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once).
            parallelism: Shown in ``explain()``.
            indexable: Accepted for compatibility.
            preserves_cursor_order: ``False`` when records are held back or reordered.
            state_records: ``state -> records``: the input records the state holds. With
                ``state_from_records`` it keeps a checkpoint the size of the state.
            state_from_records: ``records -> state``: the state rebuilt from those records.

        Returns:
            This pipeline.
        """
        from zephon.ops.stateful_transform import build_stateful_transform

        for op in build_stateful_transform(
                name, init_state=init_state, push=push, flush=flush, should_flush=should_flush,
                transform=transform, parallelism=parallelism, indexable=indexable,
                preserves_cursor_order=preserves_cursor_order, state_records=state_records,
                state_from_records=state_from_records):
            self._append(op)
        return self

    @compat_keywords("placement")
    def add_op(self, op: Operator | str | None = None, /, **kw: Any) -> Self:
        """Add a user operator: ``add_op(MyOp(...))`` with a ``BaseOp`` subclass instance, or
        ``add_op("name", process_many=fn, preserves_cursor_order=True, ...)``.

        Args:
            op: A ``BaseOp`` instance, or the operator's name for the function form.
            **kw: Function form: ``process_many`` (``records -> records``, required),
                ``preserves_cursor_order`` (required), ``accumulator`` (a factory of the
                ``Accumulator`` that groups records per lane; default: each block is a group and
                the operator runs on the workers), ``process_one``, ``validation_samples``,
                ``parallelism`` [1], ``placement``, ``indexable``, ``batch_shape_sensitive``,
                ``requires_serial_state``, ``calibration_replayable`` [all False]. Instance form:
                ``name`` (the node's name; default the class name) and ``placement`` only.

        Returns:
            This pipeline.
        """
        from zephon.ops.add_op import build_add_op

        return self._append(build_add_op(op, **kw))

    @compat_keywords("placement", "parallelism")
    def materialize(self, placement: str = "auto", parallelism: int | None = None) -> Self:
        """Payloads are always materialised in Zephon; kept for API compatibility.

        Args:
            placement: Zephon 0.2.0's; no effect (a non-default value is said once).
            parallelism: Zephon 0.2.0's; no effect (a non-default value is said once).

        Returns:
            This pipeline.
        """
        return self
