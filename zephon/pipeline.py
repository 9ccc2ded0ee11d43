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
        if any(isinstance(o, BatchOp) for o in self._ops) and not isinstance(op, MapBatchOp):
            warnings.warn(f"{op.op_name} placed after batch: it will see SampleBatch items",
                          stacklevel=3)
        self._ops.append(op)
        self._validated = False
        self._changed()
        return self

    # -- builder: fetch side -------------------------------------------------------------------

    def fetch(self, parallelism: int | None = None, max_batch: int | None = None) -> Pipeline:
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

    def prefetch(self, buffer_size: int = 1024, parallelism: int | None = None, *,
                 placement: str = "local") -> Pipeline:
        """Download the shards that the next pointers need before the fetch reads them.

        Worth it for remote datasets. At most once per pipeline.

        Args:
            buffer_size: Pointers looked ahead.
            parallelism: Concurrent downloads (default 4).
            placement: Accepted for compatibility; prefetching runs on this node.

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

    def decode_text(self, parallelism: int | None = None, **kw: Any) -> Pipeline:
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

    def map_transform(self, fn: Callable[[Any], Any], *, drop_none: bool = True,
                      placement: str = "auto", parallelism: int | None = None) -> Pipeline:
        """Apply ``fn`` to every record's payload; ``None`` drops the record.

        ``fn`` runs where the stateless operators run (in worker processes it travels by value with
        cloudpickle) and must be deterministic: the same payload gives the same result.

        Args:
            fn: ``fn(payload) -> payload | None``; a dict record's payload is a plain dict.
            drop_none: Drop the records for which ``fn`` returns ``None``.
            placement: Accepted for compatibility; the engine places stateless operators itself.
            parallelism: Shown in ``explain()``; every worker runs the stateless operators.

        Returns:
            This pipeline.
        """
        return self._append(MapTransformOp(fn, drop_none=drop_none, parallelism=parallelism))

    def map_batch(self, fn: Callable[[Any], Any], *, drop_none: bool = True,
                  placement: str = "auto", parallelism: int | None = None) -> Pipeline:
        """Apply ``fn`` to every ``SampleBatch`` after ``batch``; ``None`` drops the batch.

        Args:
            fn: ``fn(batch) -> batch | None``.
            drop_none: Drop the batches for which ``fn`` returns ``None``.
            placement: Accepted for compatibility.
            parallelism: Shown in ``explain()``.

        Returns:
            This pipeline.

        Raises:
            ValueError: The pipeline has no ``batch`` yet.
        """
        if not any(isinstance(o, BatchOp) for o in self._ops):
            raise ValueError("map_batch must come after batch()")
        return self._append(MapBatchOp(fn, drop_none=drop_none, parallelism=parallelism))

    def batch(self, microbatch_size: int, *, drop_last: bool = False,
              placement: str = "auto") -> Pipeline:
        """Group records into ``SampleBatch``es, each of one lane. At most once per pipeline.

        Args:
            microbatch_size: Records per batch.
            drop_last: The last, short batch of each lane at the end of the stream is delivered
                (the default: nothing is dropped); ``True`` drops it for fixed shapes, and the
                records dropped are counted in ``metrics_snapshot()["losses"]`` as
                ``short_batch``. (Zephon 0.2.0 defaulted to ``True``; no flush happens mid-run
                here, so this concerns one batch per lane per run.)
            placement: Accepted for compatibility; the engine places ``batch`` itself.

        Returns:
            This pipeline.

        Raises:
            ValueError: ``batch`` was already called.
        """
        if any(isinstance(o, BatchOp) for o in self._ops):
            raise ValueError("batch() may appear only once")
        return self._append(BatchOp(microbatch_size, drop_last=drop_last))

    def tokenize(self, tokenizer: Any = None, tokenizer_id: str | None = None, *, field: str,
                 **kw: Any) -> Pipeline:
        """Text -> token ids. Each document gets the BOS/EOS its tokenizer has, settled here (a
        ``special_tokens`` request it cannot honour raises now); bad text fields raise a
        ``DataError`` or, with ``on_bad_record="skip"``, are skipped and counted.

        Args:
            tokenizer: A ``tokenizers.Tokenizer``, the path of a ``tokenizer.json`` or of a
                tokenizer directory (read as transformers reads it), or a transformers tokenizer.
            tokenizer_id: A tokenizer by name instead: ``"__fallback__"`` is the built-in
                byte-level tokenizer (UTF-8 bytes past four special ids), the same in every
                process.
            field: The payload field holding the text (a dotted path reaches nested fields).
            **kw: Other keywords, default in brackets: ``max_length`` [None]; ``truncation``
                [False; True cuts rows to ``max_length`` and counts every cut];
                ``split_long_samples`` [False; True cuts long documents into pieces that keep
                every token]; ``special_tokens`` ["bos_eos"; or "bos", "eos", "none",
                "tokenizer_default"]; ``bos_token_id``, ``eos_token_id``, ``pad_token_id`` [from
                the tokenizer]; ``preserve_upstream_payload`` [False; True keeps the input fields
                beside the ids]; ``missing_field`` ["error"; or "empty"]; ``on_bad_record``
                ["raise"; or "skip"]; ``add_attention_mask`` [True]; ``padding`` [False; or
                "max_length", True / "longest"]; ``return_tensors``; ``parallelism``;
                ``placement``.

        Returns:
            This pipeline.

        Raises:
            ValueError: Conflicting keywords, or a ``special_tokens`` request the tokenizer cannot
                honour (the message names the fix).
        """
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
            placement: Accepted for compatibility.
            parallelism: Accepted for compatibility; a lane's shuffle runs serially.

        Returns:
            This pipeline.
        """
        from zephon.ops.shuffle import ShuffleOp

        return self._append(ShuffleOp(8192 if buffer_size is None else buffer_size, seed=seed,
                                      algorithm=algorithm, warmup_growth=warmup_growth))

    def ensure_mixture(self, *, max_buffer_size: int | None = 1000,
                       drain_target_ratio: float = 0.8, obsolete_drain_rate: float = 0.1,
                       weight_by: Any = "auto", warn_tolerance: float | None = None,
                       mixture: Mapping[str, float] | None = None, placement: str = "auto",
                       parallelism: int | None = None) -> Pipeline:
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
            placement: Accepted for compatibility.
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
            tokenized=any(o.op_name in ("tokenize", "tokenize_chat") for o in self._ops)))

    def pack_flat(self, max_length: int, **kw: Any) -> Pipeline:
        """Pack token records into rows of exactly ``max_length`` tokens (packed documents plus
        padding) with per-document ``positions``; ``to_training`` turns them into tensors.

        Args:
            max_length: Tokens per row; use the model context + 1, so that the label shift leaves
                exactly the context length.
            **kw: ``algorithm`` ["first_fit"; "best_fit", "wrap" (a token stream cut into full
                rows, splitting documents) or "best_fit_wrap" (a candidate pool, at most one
                split per row)]; ``num_bins`` (open rows per lane for first/best fit);
                ``pad_token_id`` (required unless ``algorithm="wrap"``); ``tokens_field``
                ["auto"]; ``oversized`` ["split": a document longer than a row is cut into full
                rows and packed; "truncate" keeps its first ``max_length`` tokens; "drop" drops it;
                what is removed is counted] (``drop_oversized=True/False`` is the older spelling
                of "drop"/"split"); ``min_sequence_length`` [1];
                ``max_sequences_per_bin``; ``flush_strategy`` ["fifo" or "fullest": which open row
                leaves first]; ``candidate_pool_size``, ``max_candidate_age`` (best_fit_wrap);
                ``homogeneity`` ["none"; "full" keeps each row within one dataset, "group" within
                one of ``groups``]; ``groups`` (a ``DomainGroups`` or ``{group: [dataset, ...]}``);
                ``emit_positions`` [True]; ``placement``; ``parallelism``.

        Returns:
            This pipeline.

        Raises:
            ValueError: Bad or conflicting keywords (no ``pad_token_id`` for a padding algorithm,
                ``length_fn`` or ``shuffle_strategy``, which this version does not support).
        """
        from zephon.ops.pack import PackOp

        return self._append(PackOp(max_length, flat=True, work_source=self.work_source, **kw))

    def pack_sequences(self, max_length: int, **kw: Any) -> Pipeline:
        """Pack records into groups of at most ``max_length`` tokens, as lists of whole payloads
        (``{"packed_samples": [...]}``) rather than flat token rows; no padding.

        Args:
            max_length: Tokens per packed record.
            **kw: The keywords of ``pack_flat`` (``pad_token_id`` aside), and ``pack_payloads``
                ["keep_list"; "numpy_array", "torch_tensor" or a callable merging the list].

        Returns:
            This pipeline.
        """
        from zephon.ops.pack import PackOp

        return self._append(PackOp(max_length, flat=False, work_source=self.work_source, **kw))

    def expand_chat(self, *, field: str = "messages", placement: str = "auto",
                    parallelism: int | None = None) -> Pipeline:
        """One record per answered user query of the conversation in ``field``: each keeps the
        conversation up to the next user message (``zephon.ops.expand_chat``). A conversation with
        no answered query is dropped, and trailing unanswered turns cut; both are counted in
        ``metrics_snapshot()["losses"]``.

        Args:
            field: The payload field holding the list of ``{"role": ..., "content": ...}``
                messages (a dotted path reaches nested fields).
            placement: Accepted for compatibility.
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
        ``should_flush(state)``), then an optional stateless ``transform(records) -> records``.

        Args:
            name: The operator's name (in metrics, errors and checkpoints).
            init_state: ``() -> state``: a lane's fresh state.
            push: ``(state, records) -> (state, outputs)``, called with one record at a time.
            flush: ``state -> outputs`` at the end of the stream and on ``should_flush``. Supply it
                whenever ``push`` keeps records in the state, or they are lost at the end.
            should_flush: ``state -> bool``: flush now and start over from ``init_state()``.
            transform: ``records -> records``: a stateless step after the state.
            placement: Accepted for compatibility.
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

    def add_op(self, op: BaseOp | str | None = None, /, **kw: Any) -> Pipeline:
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

    def validate(self, *, strict: bool = False) -> ValidationReport:
        """Probe the ``add_op`` operators with synthetic records (determinism, identity,
        accumulator contracts).

        Args:
            strict: Raise ``ValidationError`` when the report has errors.

        Returns:
            The ``ValidationReport`` (``ok``, ``errors``, ``warnings``, ``format()``).
        """
        from zephon.validation import validate_pipeline

        return validate_pipeline(self, strict=strict)

    def materialize(self, placement: str = "auto", parallelism: int | None = None) -> Pipeline:
        """Payloads are always materialised in Zephon; kept for API compatibility.

        Args:
            placement: Ignored.
            parallelism: Ignored.

        Returns:
            This pipeline.
        """
        return self

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
        self._runtime = Session(self)
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

        return checkpoint_of(self)

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
        from zephon.engine.checkpoint_view import view_of
        from zephon.state.checkpoint import validate_checkpoint

        doc = validate_checkpoint(state, view_of(self))
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

        return PipelineIterableDataset(self, stateful=stateful)

    def to_indexable_torch_dataset(self) -> Any:
        """Not available: a mixture work source has no map-style access.

        Raises:
            RuntimeError: Always; use ``to_torch_dataset()``.
        """
        raise RuntimeError(
            "this pipeline is not indexable: a StaticMixtureWorkSource has no map-style access; "
            "use to_torch_dataset()")

    @property
    def is_indexable(self) -> bool:
        """Always ``False``: pipelines are iterable, not map-style."""
        return False

    def __repr__(self) -> str:
        names = ["fetch", *(o.op_name for o in self._ops)]
        return f"Pipeline({' -> '.join(names)})"

