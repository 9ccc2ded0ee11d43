"""batch: per-lane groups of ``microbatch_size`` records become one ``SampleBatch``."""

from __future__ import annotations

from zephon import accounting
from zephon.block import Block
from zephon.ops.base import LaneAccumulator, OpContext, OpTraits, StatefulOp
from zephon.state.refs import refs_of


class BatchOp(StatefulOp):
    name = "batch"

    def __init__(self, microbatch_size: int, *, drop_last: bool = False) -> None:
        if int(microbatch_size) < 1:
            raise ValueError(f"microbatch_size must be >= 1, got {microbatch_size}")
        self.microbatch_size = int(microbatch_size)
        self.drop_last = drop_last

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, batch_shape_sensitive=True,
                        requires_serial_state=True, forms_batches=True)

    def fingerprint(self) -> dict:
        return {"microbatch_size": self.microbatch_size, "drop_last": self.drop_last}

    def check_state(self, state, view, field: str) -> None:
        from zephon.state import checkpoint_ops

        checkpoint_ops.batch_state(self, state, view, field)

    def new_lane(self, lane_id: int, ctx: OpContext) -> LaneAccumulator:
        return BatchLane(self.microbatch_size, self.drop_last)


class BatchLane(LaneAccumulator):
    def __init__(self, size: int, drop_last: bool) -> None:
        self.size = size
        self.drop_last = drop_last
        self.pending: list[Block] = []
        self.count = 0
        # records at the head of the input that a run with another micro-batch size delivered
        # before its checkpoint (zephon.state.checkpoint.lane_states): skipped, not batched
        self.discard = 0

    def push(self, block: Block) -> list[Block]:
        if self.discard and len(block):
            k = min(self.discard, len(block))
            self.discard -= k
            block = block.slice(k, len(block))
        if not len(block):
            return []
        self.pending.append(block)
        self.count += len(block)
        if self.count < self.size:
            return []
        merged = Block.concat(self.pending)
        full = (len(merged) // self.size) * self.size
        out = [_as_batch(merged.slice(i, i + self.size), merged, i)
               for i in range(0, full, self.size)]
        rest = merged.slice(full, len(merged))
        self.pending = [rest] if len(rest) else []
        self.count = len(rest)
        return out

    def flush(self) -> list[Block]:
        self.discard = 0
        if not self.pending:
            return []
        merged = Block.concat(self.pending)
        self.pending, self.count = [], 0
        # after a restore with a smaller micro-batch size, pending may hold whole batches
        full = (len(merged) // self.size) * self.size
        out = [_as_batch(merged.slice(i, i + self.size), merged, i)
               for i in range(0, full, self.size)]
        if full < len(merged):
            tail = merged.slice(full, len(merged))
            if self.drop_last:  # the user's choice: counted and said, never silent
                accounting.count("batch", "short_batch", tail.meta["dataset_id"])
            else:
                out.append(_as_batch(tail))
        return out

    def held(self) -> int:
        return self.count

    def get_state(self) -> dict:
        state = {"held": refs_of(Block.concat(self.pending) if self.pending else None)}
        if self.discard:
            state["discard"] = self.discard
        return state

    def set_state(self, state: dict, held: Block | None) -> None:
        self.pending, self.count = [], 0
        self.discard = int(state.get("discard", 0))
        if held is not None and len(held):
            k = min(self.discard, len(held))
            self.discard -= k
            if k < len(held):
                self.pending = [held.slice(k, len(held))]
                self.count = len(held) - k


def _as_batch(block: Block, parent: Block | None = None, start: int = 0) -> Block:
    out = Block(block.meta, block.payload, block.lineage, block.sparse, is_batch=True)
    if parent is not None:
        out.origin = (parent, start)
    return out
