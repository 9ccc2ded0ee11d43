"""The operator API: what built-in and user operators are made of.

An operator has two faces. The record face (``process_many`` over ``SampleRecord`` lists, an
``Accumulator`` deciding groups) is the public API of the reference library, so user operators
written for it run unchanged. The block face (``process_block``; a per-lane
``LaneAccumulator`` over columnar blocks) is what the engine calls: built-in operators override
it to work on columns, and the default implementation adapts the record face to it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from zephon.block import Block
from zephon.types import SampleBatch, SampleRecord, block_from_records, records_from_block

PackingAlgorithm = Literal["first_fit", "best_fit", "wrap", "best_fit_wrap"]
"""The ``algorithm`` of ``pack_flat`` / ``pack_sequences``."""
SpecialTokensMode = Literal["bos_eos", "bos", "eos", "none", "tokenizer_default"]
"""The ``special_tokens`` of ``tokenize``: which markers bracket each document."""
MissingFieldMode = Literal["error", "empty"]
"""The ``missing_field`` of ``tokenize``: a record without the text field raises, or counts as
empty text."""
SpanSource = Literal["auto", "generation_tags", "prefix_diff"]
"""Where a chat template's assistant spans come from (kept for the reference's API)."""
T = TypeVar("T")  # the element type: SampleRecord before ``batch``, SampleBatch after it
ReadyBatch = tuple[list[T], int]  # (elements, nanoseconds the first of them waited)
"""A group an ``Accumulator`` releases: ``(elements, nanoseconds the first of them waited)``."""


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
        requires_serial_state: The operator needs state across calls (runs serially).
        stall_on_epoch_boundary: Refused: Zephon has no periodic flush to stall on.
        calibration_replayable: Running the operator on one record at a time, with no
            accumulator, gives the same payloads and record counts as a real run (order may
            differ), so token-aware priming may replay it between fetch and tokenize.
    """

    preserves_cursor_order: bool
    indexable: bool = True
    parallelism: int = 1
    batch_shape_sensitive: bool = False
    requires_serial_state: bool = False
    stall_on_epoch_boundary: bool = False
    # True promises that running the operator on one record at a time, with no accumulator,
    # gives the same payloads and record counts as a real run (order may differ): token-aware
    # priming may then replay it between fetch and tokenize (engine/priming.py)
    calibration_replayable: bool = False


@dataclass(frozen=True)
class StageInfo:
    """Where an operator runs in the compiled plan (``OpContext.stage_info``).

    Args:
        stage_index: The stage's position in the plan.
        stage_name: The stage's name.
        op_index: The operator's position in the pipeline.
        collect_stats: Whether the stage collects timing.
    """

    stage_index: int
    stage_name: str
    op_index: int
    collect_stats: bool = False


class OpContext:
    """Runner services handed to ``setup`` (worker id, process kind, stage info).

    Args:
        stage_info: Where the operator runs.
        **services: The services, read with ``get`` (``"worker_id"``, ...).
    """

    def __init__(self, stage_info: StageInfo | None = None, **services: Any) -> None:
        self.stage_info = stage_info
        self._services = services

    def get(self, key: str, default: Any = None) -> Any:
        """A service by name.

        Args:
            key: The service's name, e.g. ``"worker_id"``.
            default: What to return when the runner does not offer it.

        Returns:
            The service, or ``default``.
        """
        return self._services.get(key, default)


class Accumulator(ABC, Generic[T]):
    """Record-level accumulator: decides which records are processed together (per lane).

    Generic in the element type so typed operators can say ``Accumulator[SampleRecord]``."""

    @abstractmethod
    def push_many(self, elems: list[T]) -> list[ReadyBatch]:
        """Take records (of any lanes) and release the groups that are ready.

        Args:
            elems: The records, in stream order.

        Returns:
            Ready groups, each of one lane.
        """

    @abstractmethod
    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch]:
        """Release what is held (at the end of the stream, or of one lane).

        Args:
            reset: Also return the lane(s) to the fresh state.
            lane_id: Only this lane (None: every lane).

        Returns:
            The released groups.
        """

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        """Whether records are held (the reference's default says none; override it when
        yours holds any: the validator checks the answer).

        Args:
            lane_id: Only this lane (None: any lane).

        Returns:
            True when records are held.
        """
        return False


class PassthroughAccumulator(Accumulator[T]):
    """Each pushed group is one ready group; nothing is ever held."""

    def push_many(self, elems: list) -> list[ReadyBatch]:
        """The pushed records, as one group.

        Args:
            elems: The records.

        Returns:
            One group (none for no records).
        """
        return [(list(elems), 0)] if elems else []

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch]:
        """Nothing to release.

        Args:
            reset: Ignored.
            lane_id: Ignored.

        Returns:
            An empty list.
        """
        return []

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        """Never holds anything.

        Args:
            lane_id: Ignored.

        Returns:
            False.
        """
        return False


class CountingAccumulator(Accumulator[T]):
    """Groups of at most ``max_batch`` records, buffered per lane (a group never mixes lanes).

    Args:
        max_batch: Records per group (at least 1).
        max_latency_ms: Accepted for the reference's API; groups are released by count only,
            so that they do not depend on timing.
    """

    def __init__(self, max_batch: int, max_latency_ms: float | None = None) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.max_batch = int(max_batch)
        self.max_latency_ms = max_latency_ms
        self._buf: dict[int, list] = {}

    def push_many(self, elems: list) -> list[ReadyBatch]:
        """Buffer records per lane; release each lane's buffer when it reaches ``max_batch``.

        Args:
            elems: The records.

        Returns:
            The full groups.
        """
        out: list[ReadyBatch] = []
        for e in elems:
            lane = _lane_of(e)
            buf = self._buf.setdefault(lane, [])
            buf.append(e)
            if len(buf) >= self.max_batch:
                out.append((buf, 0))
                self._buf[lane] = []
        return out

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch]:
        """Release the partial groups.

        Args:
            reset: The buffers are emptied either way.
            lane_id: Only this lane (None: every lane).

        Returns:
            One group per lane that held records.
        """
        lanes = [lane_id] if lane_id is not None else sorted(self._buf)
        out = [(self._buf.pop(lane), 0) for lane in lanes if self._buf.get(lane)]
        return out

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        """Whether records are buffered.

        Args:
            lane_id: Only this lane (None: any lane).

        Returns:
            True when records are buffered.
        """
        if lane_id is not None:
            return bool(self._buf.get(lane_id))
        return any(self._buf.values())


def _lane_of(elem: Any) -> int:
    if isinstance(elem, SampleRecord):
        return elem.meta.lane_id
    if isinstance(elem, SampleBatch):
        lanes = elem.lane_ids
        return lanes[0] if lanes else 0
    raise TypeError(f"Unsupported element type {type(elem).__name__}: expected SampleRecord")


class LaneAccumulator(ABC):
    """Block-level serial state of one operator for one lane (what the engine drives)."""

    @abstractmethod
    def push(self, block: Block) -> list[Block]:
        """Take a block of the lane's records, in stream order.

        Args:
            block: The records.

        Returns:
            The blocks ready to go downstream.
        """

    @abstractmethod
    def flush(self) -> list[Block]:
        """Release everything held (end of stream) and return to the fresh state."""

    def held(self) -> int:
        """How many records this accumulator holds right now (metrics, checkpoints)."""
        return 0

    def get_state(self) -> dict:
        """The accumulator's state as cursors: ``{"held": refs_of(block), ...scalars}``.

        ``held`` names the records it holds (as they entered this operator); restore re-derives
        them and hands them to ``set_state``. Data never goes into a checkpoint.
        """
        raise TypeError(f"{type(self).__name__} cannot be checkpointed")

    def set_state(self, state: dict, held: Block | None) -> None:
        """Return to a state from ``get_state``.

        Args:
            state: The dict ``get_state`` returned.
            held: The records it named, fetched again.
        """
        raise TypeError(f"{type(self).__name__} cannot be restored")


class BaseOp(ABC):
    """Base class of every operator. Subclasses implement ``traits`` and ``process_many``.

    ``__init__`` runs once in the training process (configuration only; it must be
    picklable); ``setup`` runs once per worker process.
    """

    name: str = ""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)

    @abstractmethod
    def traits(self) -> OpTraits:
        """The operator's ``OpTraits``."""

    @abstractmethod
    def process_many(self, elems: list) -> list:
        """Process a group of records (``SampleRecord``; ``SampleBatch`` after ``batch``).

        Args:
            elems: The group, in stream order, all of one lane when an accumulator groups them.

        Returns:
            The output records: keep each record's ``meta`` and replace its ``payload``, or
            derive new metadata with ``spawn_child`` / ``pack_meta``.
        """

    # -- lifecycle ------------------------------------------------------------------------------

    def setup(self, ctx: OpContext) -> None:
        """Runs once per worker process before the first block (load heavy resources here).

        Args:
            ctx: Runner services (``ctx.get("worker_id")``); call ``super().setup(ctx)``.
        """
        self.stage_info = ctx.stage_info

    def accumulator(self, *, deterministic: bool, ctx: OpContext) -> Accumulator:
        """The accumulator that groups this operator's records per lane (default: passthrough,
        each block one group, run on the workers).

        Args:
            deterministic: Whether the run must be deterministic (always True in Zephon).
            ctx: Runner services.

        Returns:
            A new accumulator.
        """
        return PassthroughAccumulator()

    def process_one(self, elem: Any) -> list:
        """Process one record (default: ``process_many([elem])``).

        Args:
            elem: The record.

        Returns:
            The output records.
        """
        return self.process_many([elem])

    def validation_samples(self) -> list | None:
        """Records or payloads the validator probes the operator with (default: None, the
        validator's synthetic ``{"text": str, "value": int}`` records)."""
        return None

    # -- block face (engine) --------------------------------------------------------------------

    @property
    def op_name(self) -> str:
        """The operator's name: ``name``, else the class name."""
        return self.name or type(self).__name__

    def is_serial(self) -> bool:
        """True when the operator keeps state across blocks (runs in the coordinator)."""
        return False

    def new_lane(self, lane_id: int, ctx: OpContext) -> LaneAccumulator:
        """The block-level state of a stateful operator for one lane (built-in operators).

        Args:
            lane_id: The lane.
            ctx: Runner services.

        Returns:
            The lane's accumulator.

        Raises:
            TypeError: The operator is stateless.
        """
        raise TypeError(f"operator {self.op_name} is stateless")

    def process_block(self, block: Block) -> Block:
        """Default adapter: records in, records out, through ``process_many``.

        Args:
            block: The columnar records (a batch after ``batch``).

        Returns:
            The output block.
        """
        if block.is_batch:
            out = self.process_many([SampleBatch._from_block(block)])
            return _batch_result(out, self.op_name)
        records = records_from_block(block)
        out = self.process_many(records)
        if not isinstance(out, list):
            raise TypeError(f"operator {self.op_name}: process_many must return a list")
        return block_from_records(out)


def _batch_result(out: list, op_name: str) -> Block:
    if len(out) != 1 or not isinstance(out[0], SampleBatch):
        raise TypeError(f"operator {op_name}: after batch, return a list of SampleBatch")
    return out[0].block
