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
SpecialTokensMode = Literal["bos_eos", "bos", "eos", "none", "tokenizer_default"]
MissingFieldMode = Literal["error", "empty"]
SpanSource = Literal["auto", "generation_tags", "prefix_diff"]
T = TypeVar("T")  # the element type: SampleRecord before ``batch``, SampleBatch after it
ReadyBatch = tuple[list[T], int]  # (elements, nanoseconds the first of them waited)


@dataclass(frozen=True, kw_only=True)
class OpTraits:
    """Static facts the planner needs about an operator."""

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
    stage_index: int
    stage_name: str
    op_index: int
    collect_stats: bool = False


class OpContext:
    """Runner services handed to ``setup`` (worker id, process kind, stage info)."""

    def __init__(self, stage_info: StageInfo | None = None, **services: Any) -> None:
        self.stage_info = stage_info
        self._services = services

    def get(self, key: str, default: Any = None) -> Any:
        return self._services.get(key, default)


class Accumulator(ABC, Generic[T]):
    """Record-level accumulator: decides which records are processed together (per lane).

    Generic in the element type so typed operators can say ``Accumulator[SampleRecord]``."""

    @abstractmethod
    def push_many(self, elems: list[T]) -> list[ReadyBatch]: ...

    @abstractmethod
    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch]: ...

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        """Whether records are held (the reference's default says none; override it when
        yours holds any: the validator checks the answer)."""
        return False


class PassthroughAccumulator(Accumulator[T]):
    """Each pushed group is one ready group; nothing is ever held."""

    def push_many(self, elems: list) -> list[ReadyBatch]:
        return [(list(elems), 0)] if elems else []

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch]:
        return []

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        return False


class CountingAccumulator(Accumulator[T]):
    """Groups of at most ``max_batch`` records, buffered per lane (a group never mixes lanes)."""

    def __init__(self, max_batch: int, max_latency_ms: float | None = None) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.max_batch = int(max_batch)
        self.max_latency_ms = max_latency_ms
        self._buf: dict[int, list] = {}

    def push_many(self, elems: list) -> list[ReadyBatch]:
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
        lanes = [lane_id] if lane_id is not None else sorted(self._buf)
        out = [(self._buf.pop(lane), 0) for lane in lanes if self._buf.get(lane)]
        return out

    def has_pending_data(self, lane_id: int | None = None) -> bool:
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
    def push(self, block: Block) -> list[Block]: ...

    @abstractmethod
    def flush(self) -> list[Block]: ...

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
        raise TypeError(f"{type(self).__name__} cannot be restored")


class BaseOp(ABC):
    """Base class of every operator. Subclasses implement ``traits`` and ``process_many``."""

    name: str = ""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)

    @abstractmethod
    def traits(self) -> OpTraits: ...

    @abstractmethod
    def process_many(self, elems: list) -> list: ...

    # -- lifecycle ------------------------------------------------------------------------------

    def setup(self, ctx: OpContext) -> None:
        """Runs once per worker process before the first block (load heavy resources here)."""
        self.stage_info = ctx.stage_info

    def accumulator(self, *, deterministic: bool, ctx: OpContext) -> Accumulator:
        return PassthroughAccumulator()

    def process_one(self, elem: Any) -> list:
        return self.process_many([elem])

    def validation_samples(self) -> list | None:
        return None

    # -- block face (engine) --------------------------------------------------------------------

    @property
    def op_name(self) -> str:
        return self.name or type(self).__name__

    def is_serial(self) -> bool:
        """True when the operator keeps state across blocks (runs in the coordinator)."""
        return False

    def new_lane(self, lane_id: int, ctx: OpContext) -> LaneAccumulator:
        raise TypeError(f"operator {self.op_name} is stateless")

    def process_block(self, block: Block) -> Block:
        """Default adapter: records in, records out, through ``process_many``."""
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
