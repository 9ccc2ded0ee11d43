"""batch: per-lane groups of ``microbatch_size`` records become one ``SampleBatch``."""

from __future__ import annotations

from zephon import accounting
from zephon.block import Block, RowsOf
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
                        requires_serial_state=True, forms_batches=True, cost="slice",
                        keeps_count=True)

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
        n = len(block)
        if not n:
            return []
        if self.count + n < self.size:
            self.pending.append(block)
            self.count += n
            return []
        out, at = [], 0
        if self.count >= self.size:  # restored with a smaller size: whole batches held
            block, n = Block.concat([*self.pending, block]), self.count + n
        elif self.count:  # the batch begun in an earlier block is completed by this one
            at = self.size - self.count
            out.append(_as_batch(Block.concat([*self.pending, block.slice(0, at)])))
        # the rest are this block's own rows: views, nothing concatenated or copied
        full = at + (n - at) // self.size * self.size
        out.extend(RowsOf(block, i, i + self.size, is_batch=True)
                   for i in range(at, full, self.size))
        self.pending = [block.slice(full, n)] if full < n else []
        self.count = n - full
        return out

    def flush(self) -> list[Block]:
        self.discard = 0
        if not self.pending:
            return []
        merged = Block.concat(self.pending)
        self.pending, self.count = [], 0
        # after a restore with a smaller micro-batch size, pending may hold whole batches
        full = (len(merged) // self.size) * self.size
        out = [RowsOf(merged, i, i + self.size, is_batch=True) for i in range(0, full, self.size)]
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


def _as_batch(block: Block) -> Block:
    return Block(block.meta, block.payload, block.lineage, block.sparse, is_batch=True)
