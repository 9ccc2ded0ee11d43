"""``OpTraits``: the static facts about an operator that the planner and restore read.

The reference library's fields (``preserves_cursor_order`` ... ``calibration_replayable``) are
what a user operator declares; the plan-time facts below them (``combines_records``,
``restores_lazily``, ``forms_batches``) are declared by the built-in operators and by the
adapters that run user operators. Nothing in Zephon asks an operator anything else at plan
time: the planner, restore and the checkpoint checks read these, never probe attributes.
It lives under the reference's module path ``zephon.ops.traits``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

__all__ = ["OpTraits", "declared"]


@dataclass(frozen=True, kw_only=True)
class OpTraits:
    """Static facts the planner needs about an operator (keyword-only).

    Args:
        preserves_cursor_order: Outputs keep the order of their inputs' cursors; ``False``
            when records are held back, reordered or combined.
        indexable: The operator keeps map-style access possible (kept for the reference's
            API).
        parallelism: Shown in ``explain()``.
        batch_shape_sensitive: The output depends on how records are grouped.
        requires_serial_state: The operator keeps state across blocks: it runs serially, one
            accumulator per lane (``new_lane``), after the worker stage.
        stall_on_epoch_boundary: Refused: Zephon has no periodic flush to stall on.
        calibration_replayable: Running the operator on one record at a time, with no
            accumulator, gives the same payloads and record counts as a real run (order may
            differ), so token-aware priming may replay it between fetch and tokenize.
        combines_records: Its rows are built from several inputs or from its state. Each row
            carries a recipe (``zephon.state.recipes``) naming the inputs to replay wherever a
            later serial operator may hold it (the plan tells each lane: the context service
            ``"recipes_needed"``), and restore rebuilds held rows with the operator's
            ``recipe_inputs`` / ``rebuild_rows``.
        restores_lazily: Its accumulator decides what to emit from the held records' identity
            alone, so restore hands it their cursors (``LazyRecords``) and the records are
            fetched only as they leave.
        forms_batches: It turns records into ``SampleBatch``es (``batch``): the plan notes
            that the stream is batched, and a restore may change its micro-batch size.
        record_by_record: Each output record is made from one input record alone, whatever
            the others in the block and their order: the worker stage may hand it records in
            shard order and leave putting them in pointer order to the coordinator.
        cost: What a record costs it, for choosing a runner and sizing memory: ``"python"``
            (Python per record, holding the GIL: the default), ``"decode"`` (reading and
            decoding in Arrow or the kernels, without the GIL), ``"tokenize"`` (a tokenizer:
            records grow by their token ids) or ``"slice"`` (rows passed on as they are, as
            views: ``batch``; a serial stage of such operators needs no coordinator process).
        keeps_count: The operator accounts itself for every record it takes in and does not
            emit (it counts what it drops in the loss ledger, or its rows are built from
            several records by design, as packing's are). For every other operator the engine
            compares records in and out, by dataset, and counts what is missing: under
            ``"filtered"`` for a stateless operator (a ``map_transform`` returning None, a
            ``filter``), under ``"not_emitted"`` for a stateful one, once its buffer is empty.
    """

    preserves_cursor_order: bool
    indexable: bool = True
    parallelism: int = 1
    batch_shape_sensitive: bool = False
    requires_serial_state: bool = False
    stall_on_epoch_boundary: bool = False
    # True promises that running the operator on one record at a time, with no accumulator,
    # gives the same payloads and record counts as a real run (order may differ): token-aware
    # priming may then replay it between fetch and tokenize (engine/priming/token_ratios.py)
    calibration_replayable: bool = False
    # -- plan-time facts (built-in operators and the user-operator adapters) ----------------------
    combines_records: bool = False
    restores_lazily: bool = False
    forms_batches: bool = False
    record_by_record: bool = False
    cost: Literal["python", "decode", "tokenize", "slice"] = "python"
    keeps_count: bool = False


# the facts a user operator does not declare: left out of its fingerprint, which describes what
# it declares (so checkpoints taken before these existed still match)
_PLAN_FIELDS = ("combines_records", "restores_lazily", "forms_batches", "record_by_record",
                "cost", "keeps_count")


def declared(traits: OpTraits) -> dict:
    """The fields of ``traits`` a user operator declares, as a dict (fingerprints)."""
    return {k: v for k, v in asdict(traits).items() if k not in _PLAN_FIELDS}
