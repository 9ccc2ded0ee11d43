"""shuffle: per-lane, deterministic from seeds and record identity (kernel: StreamShuffler)."""

from __future__ import annotations

import numpy as np

from zephon.block import Block
from zephon.engine.refs import refs_of
from zephon.ops.base import BaseOp, LaneAccumulator, OpContext, OpTraits
from zephon.ops.held_store import HeldStore
from zephon.tokens.shuffler import StreamShuffler, record_keys


class ShuffleOp(BaseOp):
    name = "shuffle"

    def __init__(self, buffer_size: int = 8192, *, seed: int = 0, algorithm: str = "streaming",
                 warmup_growth: float = 1.5) -> None:
        StreamShuffler(buffer_size, seed, algorithm, warmup_growth)  # validates
        self.buffer_size = int(buffer_size)
        self.seed = int(seed)
        self.algorithm = algorithm
        self.warmup_growth = float(warmup_growth)

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=False)

    def process_many(self, elems: list) -> list:
        raise TypeError("shuffle runs on blocks inside the engine")

    def is_serial(self) -> bool:
        return True

    def new_lane(self, lane_id: int, ctx: OpContext) -> LaneAccumulator:
        return ShuffleLane(StreamShuffler(self.buffer_size, self.seed, self.algorithm,
                                          self.warmup_growth, lane_id))


def identity_keys(block: Block) -> np.ndarray:
    m = block.meta
    lineage = block.lineage if block.lineage.shape[1] else None
    return record_keys(m["dataset_id"], m["shard_id"], m["sample_idx"], lineage)


class ShuffleLane(LaneAccumulator):
    def __init__(self, shuffler: StreamShuffler) -> None:
        self.shuffler = shuffler
        self.store = HeldStore()

    def push(self, block: Block) -> list[Block]:
        first = self.shuffler.arrivals
        emit = self.shuffler.push(identity_keys(block))
        self.store.add(block, np.arange(first, first + len(block), dtype=np.int64))
        return [self.store.pop(emit)] if len(emit) else []

    def flush(self) -> list[Block]:
        emit = self.shuffler.flush()
        out = [self.store.pop(emit)] if len(emit) else []
        self.store.set(None, np.empty(0, dtype=np.int64))
        return out

    def held(self) -> int:
        return len(self.store)

    def get_state(self) -> dict:
        return {"shuffler": self.shuffler.get_state(), "held": refs_of(self.store.block()),
                "held_ids": self.store.ids.copy()}

    def set_state(self, state: dict, held: Block | None) -> None:
        self.shuffler = StreamShuffler.from_state(self.shuffler.config, state["shuffler"])
        self.store.set(held, np.asarray(state["held_ids"], dtype=np.int64))
