"""The operator contract: what the engine calls, and the record-level adapter user code subclasses.

The engine runs ``Operator``s of two kinds, told apart by ``OpTraits.requires_serial_state``:

- a ``StatelessOp`` is a function of each block (``process_block``), run in the worker stage
  (or between serial operators) on any number of processes;
- a ``StatefulOp`` keeps per-lane state: ``new_lane`` gives the ``LaneAccumulator`` the engine
  pushes a lane's blocks into, in order, and checkpoints (``get_state`` / ``set_state``).

Every operator states its ``traits()`` (what the planner and restore read) and its
``fingerprint()`` (every setting that changes the data; a checkpoint is refused by a pipeline
whose fingerprint differs). Operators are configured once, in ``__init__``, and never changed
while they run; per-lane run state lives in the lane accumulators.

``BaseOp`` is the reference library's record-level face (``process_many`` over
``SampleRecord``s, an ``Accumulator`` grouping them): an adapter onto the block face, so user
operators written for the reference run unchanged (``add_op`` wraps them in ``UserOp``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from zephon.block import Block
from zephon.ops.accumulators import Accumulator, PassthroughAccumulator
from zephon.ops.traits import OpTraits, declared
from zephon.types import SampleBatch, block_from_records, records_from_block


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
    """Runner services handed to ``setup`` and ``new_lane`` (worker id, runner, stage info;
    for a lane, ``"recipes_needed"``: whether a later serial operator may hold its rows).

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

    def with_services(self, **services: Any) -> OpContext:
        """A copy of this context with more (or other) services; this one is left as it is.

        Args:
            **services: The services to add or replace.

        Returns:
            The new context.
        """
        return OpContext(self.stage_info, **{**self._services, **services})


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


class Operator(ABC):
    """What the engine runs: a ``StatelessOp`` or a ``StatefulOp`` (see the module docstring).

    ``__init__`` runs once in the training process (configuration only; it must be picklable);
    ``setup`` runs once per process that runs the operator.
    """

    name: str = ""

    @abstractmethod
    def traits(self) -> OpTraits:
        """The operator's ``OpTraits``."""

    @abstractmethod
    def fingerprint(self) -> dict:
        """Every setting that changes the data, as JSON data (functions by qualified name):
        what a checkpoint and a token-estimate cache entry are held against."""

    @property
    def op_name(self) -> str:
        """The operator's name: ``name``, else the class name."""
        return self.name or type(self).__name__

    def setup(self, ctx: OpContext) -> None:
        """Runs once per worker process before the first block (load heavy resources here).

        Args:
            ctx: Runner services (``ctx.get("worker_id")``); call ``super().setup(ctx)``.
        """
        self.stage_info = ctx.stage_info

    # -- restore of rows an operator built (``OpTraits.combines_records``) ------------------------

    def recipe_inputs(self, refs: dict) -> dict:
        """Cursors of every input that the recipes in ``refs`` replay, once each (operators
        whose traits say ``combines_records``; restore fetches these inputs again).

        Args:
            refs: The held rows' cursors as a checkpoint stores them, with their ``recipe``.

        Returns:
            Cursors (``chunk_id``, ``chunk_offset``, ``lineage`` arrays) of the inputs.
        """
        raise TypeError(f"operator {self.op_name} does not combine records")

    def rebuild_rows(self, refs: dict, inputs: Block) -> Block:
        """The rows ``refs`` names, built again from their ``recipe_inputs``.

        Args:
            refs: The held rows' cursors with their ``recipe``, as for ``recipe_inputs``.
            inputs: The records ``recipe_inputs`` named, fetched and prepared again.

        Returns:
            The rows, as the operator held them when the checkpoint was taken.
        """
        raise TypeError(f"operator {self.op_name} does not combine records")


class StatelessOp(Operator):
    """An operator that is a function of each block: it runs wherever the engine likes."""

    @abstractmethod
    def process_block(self, block: Block) -> Block | None:
        """The operator on one block of records (a batch after ``batch``); None drops them all."""


class StatefulOp(Operator):
    """An operator with per-lane state (``OpTraits.requires_serial_state``), run serially."""

    @abstractmethod
    def new_lane(self, lane_id: int, ctx: OpContext) -> LaneAccumulator:
        """A fresh accumulator for one lane (``ctx.get("recipes_needed")``: see
        ``OpTraits.combines_records``)."""

    def check_state(self, state: Any, view: Any, field: str) -> None:
        """Refuse (``CheckpointError`` naming ``field``) a checkpoint state this operator's
        accumulator could not have written; ``view`` is the lane's ``LaneView``
        (``zephon.state.checkpoint_checks``). Default: the held cursors are checked, the rest
        is the accumulator's own."""
        from zephon.state import checkpoint_ops

        checkpoint_ops.other_state(self, state, view, field)

    def held_bound(self) -> tuple[int, int]:
        """(records, tokens) a lane holds at most, for the memory plan; 0 where unknown."""
        return 0, 0


def run_on_records(op_name: str, block: Block, process_many: Any) -> Block:
    """A record-level function (``process_many``) on a block: records (or one ``SampleBatch``
    after ``batch``) in, a block out."""
    if block.is_batch:
        out = process_many([SampleBatch._from_block(block)])
        if len(out) != 1 or not isinstance(out[0], SampleBatch):
            raise TypeError(f"operator {op_name}: after batch, return a list of SampleBatch")
        return out[0].block
    out = process_many(records_from_block(block))
    if not isinstance(out, list):
        raise TypeError(f"operator {op_name}: process_many must return a list")
    return block_from_records(out)


class BaseOp(StatelessOp):
    """Base class of record-level (user) operators. Subclasses implement ``traits`` and
    ``process_many``; the block face is adapted from them.

    ``__init__`` runs once in the training process (configuration only; it must be
    picklable); ``setup`` runs once per worker process.
    """

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

    def fingerprint(self) -> dict:
        """The operator's class, declared traits and public attributes (functions by
        qualified name): a user operator's configuration is what ``__init__`` stored."""
        conf = {k: describe(v) for k, v in sorted(vars(self).items())
                if not k.startswith("_") and k not in ("stage_info", "name")}
        return {"class": describe(type(self)), "traits": declared(self.traits()),
                "config": conf}

    def process_block(self, block: Block) -> Block:
        """Default adapter: records in, records out, through ``process_many``.

        Args:
            block: The columnar records (a batch after ``batch``).

        Returns:
            The output block.
        """
        return run_on_records(self.op_name, block, self.process_many)


def describe(v: Any) -> Any:
    """A stable, JSON-able description of a user operator's configuration value."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [describe(x) for x in v]
    if isinstance(v, dict):
        return {str(k): describe(x) for k, x in v.items()}
    if isinstance(v, OpTraits):
        return declared(v)
    if callable(v):
        return f"{getattr(v, '__module__', '?')}.{getattr(v, '__qualname__', type(v).__name__)}"
    return type(v).__qualname__
