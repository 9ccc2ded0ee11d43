"""shuffle: per-lane, deterministic from seeds and record identity (kernel: StreamShuffler)."""

from __future__ import annotations

import numpy as np

from zephon.block import Block
from zephon.ops.base import LaneAccumulator, OpContext, OpTraits, StatefulOp
from zephon.state.held_store import HeldStore
from zephon.state.refs import LazyRecords, concat_refs, refs_of
from zephon.tokens.shuffler import StreamShuffler, record_keys


class ShuffleOp(StatefulOp):
    name = "shuffle"

    def __init__(self, buffer_size: int = 8192, *, seed: int = 0, algorithm: str = "streaming",
                 warmup_growth: float = 1.5) -> None:
        StreamShuffler(buffer_size, seed, algorithm, warmup_growth)  # validates
        self.buffer_size = int(buffer_size)
        self.seed = int(seed)
        self.algorithm = algorithm
        self.warmup_growth = float(warmup_growth)

    def traits(self) -> OpTraits:
        # what to emit depends on identity keys kept in the shuffler's own state, so a
        # restored buffer's records are fetched only when they leave it
        return OpTraits(preserves_cursor_order=False, requires_serial_state=True,
                        restores_lazily=True, keeps_count=True)

    def fingerprint(self) -> dict:
        return {"buffer_size": self.buffer_size, "seed": self.seed,
                "algorithm": self.algorithm, "warmup_growth": self.warmup_growth}

    def check_state(self, state, view, field: str) -> None:
        from zephon.state import checkpoint_ops

        checkpoint_ops.shuffle_state(self, state, view, field)

    def held_bound(self) -> tuple[int, int]:
        return self.buffer_size, 0

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
        self.lazy: LazyRecords | None = None  # restored records not fetched yet (oldest ids)
        self.lazy_ids = np.empty(0, dtype=np.int64)

    def push(self, block: Block) -> list[Block]:
        first = self.shuffler.arrivals
        emit = self.shuffler.push(identity_keys(block))
        self.store.add(block, np.arange(first, first + len(block), dtype=np.int64))
        return [self._pop(emit)] if len(emit) else []

    def flush(self) -> list[Block]:
        emit = self.shuffler.flush()
        out = [self._pop(emit)] if len(emit) else []
        self.store.set(None, np.empty(0, dtype=np.int64))
        self.lazy, self.lazy_ids = None, np.empty(0, dtype=np.int64)
        return out

    def _pop(self, emit: np.ndarray) -> Block:
        is_lazy = np.isin(emit, self.lazy_ids) if len(self.lazy_ids) else None
        if is_lazy is None or not is_lazy.any():
            return self.store.pop(emit)
        pos = np.searchsorted(self.lazy_ids, emit[is_lazy])
        rebuilt = self.lazy.rebuild(pos)
        keep = np.ones(len(self.lazy_ids), dtype=bool)
        keep[pos] = False
        self.lazy_ids = self.lazy_ids[keep]
        self.lazy.keep(keep)
        fresh = self.store.pop(emit[~is_lazy]) if (~is_lazy).any() else None
        merged = Block.concat([b for b in (fresh, rebuilt) if b is not None])
        order = np.concatenate([np.flatnonzero(~is_lazy), np.flatnonzero(is_lazy)])
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.arange(len(order), dtype=np.int64)
        return merged.take(inverse)

    def held(self) -> int:
        return len(self.store) + len(self.lazy_ids)

    def get_state(self) -> dict:
        lazy = self.lazy.refs if self.lazy is not None else None
        return {"shuffler": self.shuffler.get_state(),
                "held": concat_refs([lazy, refs_of(self.store.block())]),
                "held_ids": np.concatenate([self.lazy_ids, self.store.ids])}

    def set_state(self, state: dict, held) -> None:
        self.shuffler = StreamShuffler.from_state(self.shuffler.config, state["shuffler"])
        ids = np.asarray(state["held_ids"], dtype=np.int64)
        if isinstance(held, LazyRecords):
            self.store.set(None, np.empty(0, dtype=np.int64))
            self.lazy, self.lazy_ids = held, ids
        else:
            self.store.set(held, ids)
            self.lazy, self.lazy_ids = None, np.empty(0, dtype=np.int64)
