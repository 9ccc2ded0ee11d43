"""The pipeline builder: records the operator chain and options, nothing else.

Each builder call appends one operator and returns the same ``Pipeline`` (fluent). Nothing runs
until iteration; then ``zephon.engine`` compiles the chain and runs it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from zephon.ops.base import BaseOp
from zephon.ops.batch import BatchOp
from zephon.ops.decode_text import DecodeTextOp
from zephon.ops.map_transform import MapBatchOp, MapTransformOp
from zephon.options import RuntimeOptions

if TYPE_CHECKING:
    from zephon.validation import ValidationReport


class Pipeline:
    """A lazily built chain of operators over a WorkSource. Iterate it to get batches."""

    def __init__(self, work_source: Any) -> None:
        from zephon.engine.chunk_source import speaks_clone_protocol

        if not hasattr(work_source, "lane_chunk") and not speaks_clone_protocol(work_source):
            raise TypeError("Pipeline needs a WorkSource such as StaticMixtureWorkSource (or "
                            "one with next_chunk(), clone_for_lane() and datasets_by_id)")
        self.work_source = work_source
        self._ops: list[BaseOp] = []
        self._fetch_kw: dict[str, Any] = {}
        self._prefetch: dict[str, Any] | None = None
        self._options = RuntimeOptions()
        self._observability: dict[str, Any] | None = None
        self._pending_restore: dict | None = None
        self._validated = False  # add_op operators are probed on the first iteration
        self._runtime = None  # live engine session; never pickled

    # -- pickling: drop the live runtime, keep graph, options, pending restore -------------------

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_runtime"] = None
        return state

    def _changed(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def _append(self, op: BaseOp) -> Pipeline:
        if any(isinstance(o, BatchOp) for o in self._ops) and not getattr(op, "after_batch_ok", False):
            if not isinstance(op, MapBatchOp):
                warnings.warn(f"{op.op_name} placed after batch: it will see SampleBatch items",
                              stacklevel=3)
        self._ops.append(op)
        self._validated = False
        self._changed()
        return self

    # -- builder: fetch side -------------------------------------------------------------------

    def fetch(self, parallelism: int | None = None, max_batch: int | None = None) -> Pipeline:
        """Tune the implicit fetch operator (worker count, micro-batch size)."""
        from zephon.ops.fetch import FetchOp

        FetchOp([], parallelism, max_batch)  # validates
        self._fetch_kw = {"parallelism": parallelism, "max_batch": max_batch}
        self._changed()
        return self

    fetch_parallelism = fetch

    def prefetch(self, buffer_size: int = 1024, parallelism: int | None = None, *,
                 placement: str = "local") -> Pipeline:
        if self._prefetch is not None:
            raise RuntimeError("prefetch() may be called at most once per pipeline")
        if buffer_size < 1:
            raise ValueError(f"prefetch buffer_size must be >= 1, got {buffer_size}")
        self._prefetch = {"buffer_size": int(buffer_size), "parallelism": parallelism or 4}
        self._changed()
        return self

    # -- builder: record operators -------------------------------------------------------------

    def decode_text(self, parallelism: int | None = None, **kw: Any) -> Pipeline:
        return self._append(DecodeTextOp(parallelism=parallelism, **kw))

    def map_transform(self, fn: Callable[[Any], Any], *, drop_none: bool = True,
                      placement: str = "auto", parallelism: int | None = None) -> Pipeline:
        return self._append(MapTransformOp(fn, drop_none=drop_none, parallelism=parallelism))

    def map_batch(self, fn: Callable[[Any], Any], *, drop_none: bool = True,
                  placement: str = "auto", parallelism: int | None = None) -> Pipeline:
        if not any(isinstance(o, BatchOp) for o in self._ops):
            raise ValueError("map_batch must come after batch()")
        return self._append(MapBatchOp(fn, drop_none=drop_none, parallelism=parallelism))

    def batch(self, microbatch_size: int, *, drop_last: bool = False,
              placement: str = "auto") -> Pipeline:
        """Per-lane groups of ``microbatch_size`` records become one ``SampleBatch``.

        Args:
            microbatch_size: records per batch.
            drop_last: the last, short batch of each lane at the end of the stream is delivered
                (the default: nothing is dropped); ``True`` drops it for fixed shapes, and the
                records dropped are counted in ``metrics_snapshot()["losses"]`` as
                ``short_batch``. (Zephon 0.2.0 defaulted to ``True``; no flush happens mid-run
                here, so this concerns one batch per lane per run.)
            placement: accepted for compatibility; the engine places ``batch`` itself.
        """
        if any(isinstance(o, BatchOp) for o in self._ops):
            raise ValueError("batch() may appear only once")
        return self._append(BatchOp(microbatch_size, drop_last=drop_last))

    def tokenize(self, tokenizer: Any = None, tokenizer_id: str | None = None, *, field: str,
                 **kw: Any) -> Pipeline:
        """Text -> token ids. Each document gets the BOS/EOS its tokenizer has, settled here (a
        ``special_tokens`` request it cannot honour raises now); bad text fields raise a
        ``DataError`` or, with ``on_bad_record="skip"``, are skipped and counted. The keywords
        and rules: ``zephon.ops.tokenize``."""
        from zephon.ops.tokenize import TokenizeOp

        op = TokenizeOp(tokenizer, tokenizer_id, field=field, **kw).named_by(self.work_source)
        return self._append(op)

    def tokenize_chat(self, tokenizer: Any = None, tokenizer_id: str | None = None, *,
                      eos_token: str | None = None, field: str = "messages",
                      max_length: int | None = None, chat_template: Any = None,
                      apply_chat_template: bool = True, span_source: str = "auto",
                      loss_on_last_turn_only: bool = False, loss_scope: str = "all_assistant",
                      chat_template_kwargs: Mapping[str, Any] | None = None,
                      tools_field: str | None = "tools",
                      enable_thinking_field: str | None = "enable_thinking",
                      mask_field_out: str = "loss_mask", preserve_upstream_payload: bool = False,
                      oversized: str = "error", on_bad_record: str = "raise",
                      placement: str = "auto", parallelism: int | None = None) -> Pipeline:
        """Conversations -> token ids and a per-token ``loss_mask`` (1 on what the assistant
        generates), with the tokenizer's chat template or ``chat_template=``; spans from
        ``{% generation %}`` tags, else checked prefix diffs (``span_source``). Conversations
        over ``max_length`` raise, or are truncated / dropped and counted (``oversized``); bad
        ones raise a ``DataError`` or are skipped and counted (``on_bad_record``). The rules:
        ``zephon.ops.tokenize_chat``."""
        from zephon.ops.tokenize_chat import TokenizeChatOp

        op = TokenizeChatOp(
            tokenizer, tokenizer_id, eos_token=eos_token, field=field, max_length=max_length,
            chat_template=chat_template, apply_chat_template=apply_chat_template,
            span_source=span_source, loss_on_last_turn_only=loss_on_last_turn_only,
            loss_scope=loss_scope,
            chat_template_kwargs=dict(chat_template_kwargs) if chat_template_kwargs else None,
            tools_field=tools_field, enable_thinking_field=enable_thinking_field,
            mask_field_out=mask_field_out, preserve_upstream_payload=preserve_upstream_payload,
            oversized=oversized, on_bad_record=on_bad_record, parallelism=parallelism,
            placement=placement)
        return self._append(op.named_by(self.work_source))

    def shuffle(self, buffer_size: int | None = None, *, seed: int = 0,
                algorithm: str = "streaming", warmup_growth: float = 1.5,
                placement: str = "auto", parallelism: int | None = None) -> Pipeline:
        from zephon.ops.shuffle import ShuffleOp

        return self._append(ShuffleOp(8192 if buffer_size is None else buffer_size, seed=seed,
                                      algorithm=algorithm, warmup_growth=warmup_growth))

    def ensure_mixture(self, *, max_buffer_size: int | None = 1000,
                       drain_target_ratio: float = 0.8, obsolete_drain_rate: float = 0.1,
                       weight_by: Any = "auto", warn_tolerance: float | None = None,
                       mixture: Mapping[str, float] | None = None, placement: str = "auto",
                       parallelism: int | None = None) -> Pipeline:
        from zephon.ops.ensure_mixture import EnsureMixtureOp

        return self._append(EnsureMixtureOp(
            self.work_source, max_buffer_size=max_buffer_size,
            drain_target_ratio=drain_target_ratio, obsolete_drain_rate=obsolete_drain_rate,
            weight_by=weight_by, warn_tolerance=warn_tolerance, mixture=mixture,
            tokenized=any(o.op_name in ("tokenize", "tokenize_chat") for o in self._ops)))

    def pack_flat(self, max_length: int, **kw: Any) -> Pipeline:
        from zephon.ops.pack import PackOp

        return self._append(PackOp(max_length, flat=True, work_source=self.work_source, **kw))

    def pack_sequences(self, max_length: int, **kw: Any) -> Pipeline:
        from zephon.ops.pack import PackOp

        return self._append(PackOp(max_length, flat=False, work_source=self.work_source, **kw))

    def expand_chat(self, *, field: str = "messages", placement: str = "auto",
                    parallelism: int | None = None) -> Pipeline:
        """One record per answered user query of the conversation in ``field`` (a dotted path):
        each keeps the conversation up to the next user message (``zephon.ops.expand_chat``)."""
        from zephon.ops.expand_chat import ExpandChatOp

        datasets = self.work_source.datasets_by_id
        ordered = [datasets[i] for i in sorted(datasets)] if isinstance(datasets, Mapping) \
            else list(datasets)
        return self._append(ExpandChatOp(ordered, field=field, parallelism=parallelism))

    # -- builder: user operators (docs/user_operators.md) -------------------------------------

    def stateful_transform(self, name: str, *, init_state: Callable[[], Any],
                           push: Callable[[Any, list], tuple],
                           flush: Callable[[Any], list] | None = None,
                           should_flush: Callable[[Any], bool] | None = None,
                           transform: Callable[[list], list] | None = None,
                           placement: str = "auto", parallelism: int = 1,
                           indexable: bool = False, preserves_cursor_order: bool = True,
                           state_records: Callable[[Any], list] | None = None,
                           state_from_records: Callable[[list], Any] | None = None) -> Pipeline:
        """Per-lane state folded over the records: ``push(state, [record]) -> (state, outputs)``
        serially and in order, ``flush(state) -> outputs`` at the end of the stream (and when
        ``should_flush(state)``), then an optional stateless ``transform(records) -> records``."""
        from zephon.ops.stateful_transform import build_stateful_transform

        for op in build_stateful_transform(
                name, init_state=init_state, push=push, flush=flush, should_flush=should_flush,
                transform=transform, parallelism=parallelism, indexable=indexable,
                preserves_cursor_order=preserves_cursor_order, state_records=state_records,
                state_from_records=state_from_records):
            self._append(op)
        return self

    def add_op(self, op: BaseOp | str | None = None, /, **kw: Any) -> Pipeline:
        """A user operator: ``add_op(MyOp(...))`` with a ``BaseOp`` subclass instance, or
        ``add_op("name", process_many=fn, preserves_cursor_order=True, accumulator=None,
        process_one=None, validation_samples=None, parallelism=1, placement="auto",
        indexable=False, batch_shape_sensitive=False, requires_serial_state=False,
        calibration_replayable=False)``."""
        from zephon.ops.add_op import build_add_op

        return self._append(build_add_op(op, **kw))

    def validate(self, *, strict: bool = False) -> ValidationReport:
        """Probe the ``add_op`` operators with synthetic records -> ``ValidationReport``;
        ``strict=True`` raises ``ValidationError`` when it has errors."""
        from zephon.validation import validate_pipeline

        return validate_pipeline(self, strict=strict)

    def materialize(self, placement: str = "auto", parallelism: int | None = None) -> Pipeline:
        """Payloads are always materialised in Zephon; kept for API compatibility."""
        return self

    # -- options and inspection ----------------------------------------------------------------

    def options(self, **kw: Any) -> Pipeline:
        self._options.update(**kw)
        self._validated = False  # auto_validation may have changed
        self._changed()
        return self

    def enable_observability(self, tracking: str = "nodes", *, sink: Any = None) -> Pipeline:
        if tracking not in ("off", "stages", "nodes"):
            raise ValueError(f"tracking must be off|stages|nodes, got {tracking!r}")
        self._observability = {"tracking": tracking, "sink": sink}
        self._changed()
        return self

    def explain(self) -> str:
        from zephon.engine.explain import explain

        return explain(self)

    # -- running -------------------------------------------------------------------------------

    def _all_ops(self) -> list[BaseOp]:
        from zephon.ops.fetch import FetchOp

        datasets = self.work_source.datasets_by_id
        datasets = [datasets[i] for i in sorted(datasets)] if isinstance(datasets, Mapping) else list(datasets)
        io = self._options.explicit.get("io_options")
        if io is not None:  # storage settings travel with the (pickled) datasets
            datasets = [ds.with_store_options(io) if hasattr(ds, "with_store_options") else ds
                        for ds in datasets]
        return [FetchOp(datasets, **self._fetch_kw), *self._ops]

    def __iter__(self) -> Iterator[Any]:
        from zephon.engine.session import Session

        if self._runtime is not None and self._runtime.active:
            raise RuntimeError("this pipeline is already being iterated; only one iterator may be active")
        if self._runtime is not None:
            self._runtime.close()
        if not self._validated:
            from zephon.validation import auto_validate

            auto_validate(self)  # options(auto_validation=...): strict raises, warn warns
            self._validated = True
        from zephon.ops.recipes import mark_needs

        mark_needs(self._ops)
        self._runtime = Session(self)
        return iter(self._runtime)

    def checkpoint(self) -> dict:
        """A small JSON-serializable description of the delivered position."""
        from zephon.engine.session import checkpoint_of

        return checkpoint_of(self)

    def restore(self, state: Mapping[str, Any]) -> Pipeline:
        """Resume from ``state`` when iteration starts. The checkpoint is checked whole here
        (schema, ranges, this pipeline's operators, digests): a malformed, altered or
        incompatible one raises ``CheckpointError`` naming the field."""
        from zephon.engine.checkpoint import validate_checkpoint

        doc = validate_checkpoint(state, self)
        self._changed()
        self._pending_restore = doc
        return self

    def close(self) -> None:
        self._changed()

    def metrics_snapshot(self) -> dict | None:
        """Per operator records/bytes/busy time, per dataset delivery against the target,
        buffers, shared memory and memory in use; None before the first iteration."""
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
        """An IterableDataset over this pipeline (``zephon/torch.py``); it does no work until
        iterated (token-aware sources are primed then, as when iterating the pipeline)."""
        from zephon.torch import PipelineIterableDataset

        return PipelineIterableDataset(self, stateful=stateful)

    def to_indexable_torch_dataset(self) -> Any:
        raise RuntimeError(
            "this pipeline is not indexable: a StaticMixtureWorkSource has no map-style access; "
            "use to_torch_dataset()")

    @property
    def is_indexable(self) -> bool:
        return False

    def __repr__(self) -> str:
        names = ["fetch", *(o.op_name for o in self._ops)]
        return f"Pipeline({' -> '.join(names)})"

