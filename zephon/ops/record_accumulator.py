"""A record-level ``Accumulator`` + ``process_many`` as one lane's serial block accumulator.

The engine drives blocks; a user operator thinks in records and groups. Per lane, ``RecordLane``
turns each pushed block into records, lets the user's accumulator decide the groups, runs
``process_many`` on each ready group and lays the outputs back out as a block.

Checkpoints need no help from the accumulator: this adapter knows which records it pushed and
which came back in a ready group, so the records still held are exactly "pushed, not yet
released" and are named by their cursors like the built-ins' held records. Restore re-derives
them and pushes them, in arrival order, into a fresh accumulator. That is exact for any
accumulator whose state is a function of the records it holds (counting, grouping by key or
size); ``validate()`` checks it (``ACC_NOT_RESTORABLE``), and restore refuses an accumulator
that releases a group while being refilled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from zephon.block import Block
from zephon.ops.accumulators import Accumulator, ReadyBatch
from zephon.ops.base import LaneAccumulator, OpContext
from zephon.ops.user_calls import call_user, elements_of, sample_of
from zephon.state import recipes
from zephon.state.held_store import HeldStore
from zephon.state.refs import refs_of
from zephon.types import SampleBatch, records_from_block


class GroupOp(Protocol):
    """What a ``RecordLane`` needs of its operator (``add_op.UserOp``)."""

    @property
    def op_name(self) -> str: ...

    def new_accumulator(self, ctx: OpContext) -> Accumulator: ...

    def run_group(self, elems: list, single: Callable[[int], tuple] | None,
                  lane_id: int | None = None) -> list[Block]: ...


class RecordLane(LaneAccumulator):
    def __init__(self, op: GroupOp, lane_id: int, ctx: OpContext) -> None:
        self.op = op
        self.lane_id = lane_id
        self.ctx = ctx
        # the plan's word: whether a later serial operator may hold the rows built here
        self.emit_recipes = bool(ctx.get("recipes_needed", True))
        self._reset()

    def _reset(self) -> None:
        self.acc = self.op.new_accumulator(self.ctx)
        self.store = HeldStore()  # the pushed blocks, rows addressed by arrival id
        self.next_id = 0
        # the components end-of-data hooks run for: the work source's, else those seen
        self.components: set[int] = set(self.ctx.get("component_ids", ()) or ())
        # id(element) -> (first arrival id, rows, element); insertion order = arrival order.
        # The element itself is kept so its id() cannot be reused while it is waiting.
        self.waiting: dict[int, tuple[int, int, Any]] = {}

    # -- driving -----------------------------------------------------------------------------

    def push(self, block: Block) -> list[Block]:
        if not len(block):
            return []
        elems = self._admit(block)
        if not self.ctx.get("component_ids"):
            self.components.update(np.unique(block.meta["dataset_id"]).tolist())
        groups = call_user(self.op.op_name, self.acc.push_many, (elems,), elems)
        return self._release(groups)

    def _admit(self, block: Block) -> list:
        first = self.next_id
        self.store.add(block, np.arange(first, first + len(block), dtype=np.int64))
        self.next_id += len(block)
        elems = elements_of(block)
        at = first
        for e in elems:
            rows = len(e) if isinstance(e, SampleBatch) else 1
            self.waiting[id(e)] = (at, rows, e)
            at += rows
        return elems

    def _release(self, groups: list[ReadyBatch]) -> list[Block]:
        if not isinstance(groups, list):
            raise TypeError(f"operator {self.op.op_name}: the accumulator must return a list of "
                            f"(elements, waited_ns) groups, got {type(groups).__name__}")
        out: list[Block] = []
        for g in groups:
            elems = g[0] if isinstance(g, tuple) else g
            if not isinstance(elems, list):
                raise TypeError(f"operator {self.op.op_name}: each ready group must be "
                                "(list_of_elements, waited_ns)")
            if elems:
                out.extend(self._process(elems))
        return out

    def _process(self, elems: list) -> list[Block]:
        ids = []
        for e in elems:
            entry = self.waiting.pop(id(e), None)
            if entry is None:
                raise RuntimeError(f"operator {self.op.op_name}: its accumulator released an "
                                   f"element it was not given, or released it twice "
                                   f"(sample {sample_of(e)})")
            ids.extend(range(entry[0], entry[0] + entry[1]))
        inputs = self.store.pop(np.asarray(ids, dtype=np.int64))
        batches = inputs.is_batch or isinstance(elems[0], SampleBatch)

        def single(i: int) -> tuple:  # a fresh copy of element i, to find the record at fault
            return ([records_from_block(inputs.slice(i, i + 1))[0]],)

        blocks = self.op.run_group(elems, None if batches else single, self.lane_id)
        if self.emit_recipes and not batches and blocks:
            body = ",".join(recipes.fragments(inputs))
            blk = blocks[0]
            blocks = [recipes.attach(blk, [recipes.make("g", m, body) for m in range(len(blk))])]
        return blocks

    def flush(self) -> list[Block]:
        out: list[Block] = []
        hook = getattr(self.acc, "on_source_exhausted", None)
        if hook is not None:  # end of data: once per component the lane has read
            for cid in sorted(self.components):
                out.extend(self._release(call_user(self.op.op_name, hook,
                                                   (self.lane_id, cid), [])))
        groups = call_user(self.op.op_name, self.acc.flush, (), [])
        out.extend(self._release(groups))
        if self.waiting or self.acc.has_pending_data():
            lost = len(self.waiting)
            raise RuntimeError(f"operator {self.op.op_name}: its accumulator still holds {lost} "
                               "record(s) after flush() at the end of the stream; flush must "
                               "release everything it holds (accumulator flush contract)")
        self._reset()
        return out

    # -- checkpoints -------------------------------------------------------------------------

    def held(self) -> int:
        return len(self.store)

    def get_state(self) -> dict:
        state: dict[str, Any] = {"held": refs_of(self.store.block())}
        sizes = [rows for _, rows, e in self.waiting.values() if isinstance(e, SampleBatch)]
        if sizes:
            state["batch_sizes"] = sizes
        return state

    def set_state(self, state: dict, held: Block | None) -> None:
        self._reset()
        if held is None or not len(held):
            return
        sizes = state.get("batch_sizes")
        if sizes:  # held batches were re-derived as one run of rows: cut them apart again
            cuts = np.cumsum([0, *sizes])
            parts = [held.slice(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]
            for p in parts:
                p.is_batch = True
        else:
            parts = [held]
        elems = []
        for p in parts:
            elems.extend(self._admit(p))
        groups = call_user(self.op.op_name, self.acc.push_many, (elems,), elems)
        if groups:
            raise RuntimeError(
                f"operator {self.op.op_name}: restoring its accumulator by pushing back the "
                f"{len(elems)} record(s) it held released a group; Zephon restores an "
                "accumulator from the records it holds, so its grouping must depend only on "
                "them (see docs/guides/operators.md, 'Checkpoints')")
