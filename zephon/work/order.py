"""The order in which one dataset's samples are visited, epoch after epoch.

A dataset's stream is the concatenation of its epochs; epoch ``e`` is a permutation of all its
samples, composed (each layer optional, keyed by the seed, the dataset's position and the
epoch) of:

1. a shard permutation (``shuffle_shards``): shards are visited in a Feistel-permuted order;
   samples of a shard stay together, which keeps reads local;
2. a within-shard permutation (``shuffle_within_shard``): the rows of each shard in a
   Feistel-permuted order (key also mixes the shard id);
3. a block shuffle (``shuffle_block_size``): the sequence from 1-2 is cut into consecutive
   blocks of that many positions and each block is Feistel-permuted on its own. "global" is
   one block of the whole dataset, still O(1) memory: the permutation is computed, not stored.

Stream position ``q`` -> epoch ``q // N``, position ``q % N`` -> block layer -> binary search in
the cumulative counts of the visiting order (O(log shards)) -> within-shard layer. With
``reshuffle_on_repeat`` off every epoch reuses epoch 0's keys, i.e. replays the same order.
"""

from __future__ import annotations

from collections import OrderedDict
from types import ModuleType

import numpy as np

from zephon.work.hashing import TAG_BLOCKS, TAG_SHARDS, TAG_WITHIN, derive_key

_TABLE_CACHE = 8  # epoch tables kept per dataset (a chunk rarely spans more than two epochs)


class DatasetOrder:
    """Random access to the (shard_id, sample_idx) at any stream position of one dataset."""

    def __init__(self, position: int, ids: np.ndarray, counts: np.ndarray, *, seed: int,
                 shuffle_shards: bool, shuffle_within_shard: bool, block_size: int | None,
                 reshuffle: bool, kernel: ModuleType) -> None:
        self.ids = np.ascontiguousarray(ids, dtype=np.int64)
        self.counts = np.ascontiguousarray(counts, dtype=np.int64)
        if self.ids.shape != self.counts.shape:
            raise ValueError("shard ids and counts must be aligned")
        self.total = int(self.counts.sum())
        if self.total <= 0:
            raise ValueError("a dataset in a mixture needs at least one sample")
        self.position = position
        self.seed = seed
        self.shuffle_shards = shuffle_shards
        self.shuffle_within_shard = shuffle_within_shard
        # A block of one position is the identity: the kernel takes 0 for "no block layer".
        self.block_size = int(block_size) if block_size and block_size > 1 else 0
        self.reshuffle = reshuffle
        self._k = kernel
        self._tables: OrderedDict[int, tuple] = OrderedDict()

    def _epoch(self, epoch: int) -> tuple:
        """(shard ids in visiting order, cumulative counts, block key, within key, lookup)."""
        ekey = epoch if self.reshuffle else 0
        hit = self._tables.get(ekey)
        if hit is not None:
            self._tables.move_to_end(ekey)
            return hit
        n = self.ids.shape[0]
        if self.shuffle_shards and n > 1:
            perm = self._k.feistel_permute(np.arange(n, dtype=np.int64), n,
                                           derive_key(self.seed, TAG_SHARDS, self.position, ekey))
            ids, counts = self.ids[perm], self.counts[perm]
        else:
            ids, counts = self.ids, self.counts
        keep = counts > 0  # empty shards can never be visited; drop them from the search
        ids = np.ascontiguousarray(ids[keep])
        cum = np.zeros(ids.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts[keep], out=cum[1:])
        # Block shuffling scatters positions over all shards; a bucket table makes the shard
        # search O(1). Sequential positions hit the kernel's same-shard fast path instead.
        lookup = (self._k.shard_lookup(cum, 8 * ids.shape[0]) if self.block_size
                  else (None, 0))
        entry = (ids, cum, derive_key(self.seed, TAG_BLOCKS, self.position, ekey),
                 derive_key(self.seed, TAG_WITHIN, self.position, ekey), lookup)
        self._tables[ekey] = entry
        if len(self._tables) > _TABLE_CACHE:
            self._tables.popitem(last=False)
        return entry

    def pointers(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(shard_id, sample_idx) of stream positions ``[start, start + count)``."""
        n = self.total
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        q, left = start, count
        while left > 0:
            epoch, p = divmod(q, n)
            take = min(left, n - p)
            ids, cum, bkey, wkey, (lut, shift) = self._epoch(epoch)
            parts.append(self._k.epoch_pointers(p, take, n, self.block_size, bkey, cum, ids,
                                                self.shuffle_within_shard, wkey, lut, shift))
            q += take
            left -= take
        if len(parts) == 1:
            return parts[0]
        if not parts:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))

    def epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """The whole order of one epoch (for inspection and tests; O(total) memory)."""
        return self.pointers(epoch * self.total, self.total)
