"""Routing of global chunks to lanes.

Global chunks are taken in blocks of ``L = canonical_replicas``; every lane owns exactly one
chunk of each block, so lane ``l``'s ``j``-th chunk lies in block ``j``:

- "modulo": at position ``l`` of the block, i.e. global chunk ``j * L + l``;
- "permute": at position ``pi_j(l)``, where ``pi_j`` is a Feistel permutation of the lanes
  keyed by (seed, block ``j``). Periodic patterns in the global stream (a rare component every
  L-th chunk) are thus spread over all lanes instead of always hitting the same one.

Both directions are O(1) (O(L) for the inverse under "permute"), so a lane computes the
global index of its own chunks and nothing else.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from zephon.work.hashing import TAG_LANES, derive_key, mix64


class LaneRouter:
    def __init__(self, mode: str, lanes: int, seed: int, kernel: ModuleType) -> None:
        if mode not in ("modulo", "permute"):
            raise ValueError(f"unknown lane_assignment {mode!r}")
        if lanes < 1:
            raise ValueError("canonical_replicas must be >= 1")
        self.mode = mode
        self.lanes = lanes
        self._key = derive_key(seed, TAG_LANES)
        self._k = kernel

    def position(self, lane: int, block: int) -> int:
        """Where in block ``block`` lane ``lane``'s chunk sits."""
        if self.mode == "modulo" or self.lanes == 1:
            return lane
        return int(self._k.feistel_permute(np.array([lane], dtype=np.int64), self.lanes,
                                           mix64(self._key, block))[0])

    def global_index(self, lane: int, chunk_id: int) -> int:
        return chunk_id * self.lanes + self.position(lane, chunk_id)

    def lane_of(self, global_index: int) -> tuple[int, int]:
        """(lane, per-lane chunk id) of a global chunk."""
        block, pos = divmod(global_index, self.lanes)
        if self.mode == "modulo" or self.lanes == 1:
            return pos, block
        perm = self._k.feistel_permute(np.arange(self.lanes, dtype=np.int64), self.lanes,
                                       mix64(self._key, block))
        return int(np.flatnonzero(perm == pos)[0]), block

    def chunks_of_lane(self, lane: int, n_global: int) -> int:
        """How many of the global chunks ``[0, n_global)`` belong to ``lane``."""
        full, rest = divmod(n_global, self.lanes)
        return full + (1 if rest and self.position(lane, full) < rest else 0)
