"""The global chunk stream of a static mixture: chunk g as a pure function of g.

Component ``c``'s samples in global chunk ``g`` are stream positions
``[cum_c(g), cum_c(g + 1))`` of its dataset order (``quotas.py`` for ``cum``, ``order.py`` for
the order). Stream positions run on across epochs, so a pass that ends mid-quota continues
with the start of the next epoch in the same chunk, and a dataset smaller than its quota
simply wraps: no sample is dropped, none is seen twice within a pass.

Where the stream ends (if it does) is a global sample position (``config.Termination.
sample_limits``). With mode "all" (stop_after_passes) the stream ends right after the sample
that brings the *last* dataset to its passes; with "any" ("stop" datasets, max_repeats) at the
start of the first chunk whose quota a capped dataset cannot supply (spec 4.6). Samples are numbered in
read order (chunk by chunk, smooth weighted round robin inside a chunk), so the final chunk is
the read-order prefix of the full chunk up to that sample: it may be short, and its
composition still follows the round robin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from zephon.work.order import DatasetOrder
from zephon.work.quotas import QuotaSchedule


@dataclass(frozen=True)
class GlobalChunk:
    counts: np.ndarray  # samples per component
    dataset_id: np.ndarray
    shard_id: np.ndarray
    sample_idx: np.ndarray


class CurriculumPlan:
    def __init__(self, orders: Sequence[DatasetOrder], quotas: QuotaSchedule, mode: str,
                 limits: Sequence[int | None], kernel: ModuleType) -> None:
        if quotas.num_components != len(orders):
            raise ValueError("one quota weight per dataset order is needed")
        self.orders = list(orders)
        self.chunk_size = quotas.chunk_size
        self.quotas = quotas
        self._k = kernel
        self._ids = np.arange(len(self.orders), dtype=np.int64)
        self.end_position = self._end_position(mode, limits)  # samples in the stream, or None

    # -- where the stream ends ------------------------------------------------------------

    def _end_position(self, mode: str, limits: Sequence[int | None]) -> int | None:
        if mode == "all":
            ends = [self.position_of(c, lim) for c, lim in enumerate(limits) if lim is not None]
            return max(ends) if ends else None
        # "any" (spec 4.6): the stream ends before the first chunk whose quota a capped dataset
        # cannot supply (the chunk that would hold its sample number limit + 1); when that chunk
        # also holds the dataset's last sample, it ends right after that sample (the chunk's
        # read-order prefix), so that no sample of the pass is left out
        ends = [max(self.quotas.chunk_reaching(c, lim + 1) * self.chunk_size,
                    self.position_of(c, lim) if lim else 0)
                for c, lim in enumerate(limits) if lim is not None]
        last = getattr(self.quotas, "end_position", None)  # every dataset left ("redistribute")
        if last is not None:
            ends.append(last)
        return min(ends) if ends else None

    def position_of(self, component: int, count: int) -> int:
        """1-based global read position of component's ``count``-th sample."""
        k = self.quotas.chunk_reaching(component, count)
        within = count - self.quotas.cum(k)[component]
        order = self._k.swrr_interleave(np.asarray(self.quotas.quotas(k), dtype=np.int64))
        return k * self.chunk_size + int(np.flatnonzero(order == component)[within - 1]) + 1

    @property
    def finite(self) -> bool:
        return self.end_position is not None

    @property
    def num_chunks(self) -> int | None:
        """Global chunks in the stream (the last may be short), or None if infinite."""
        if self.end_position is None:
            return None
        return -(-self.end_position // self.chunk_size)

    def chunk_length(self, g: int) -> int:
        if self.end_position is None:
            return self.chunk_size
        return max(0, min(self.chunk_size, self.end_position - g * self.chunk_size))

    # -- chunks ---------------------------------------------------------------------------

    def chunk(self, g: int) -> GlobalChunk | None:
        """Global chunk ``g`` in read order, or None past the end of the stream."""
        length = self.chunk_length(g)
        if length <= 0:
            return None
        lo, hi = self.quotas.cum(g), self.quotas.cum(g + 1)
        counts = np.fromiter((b - a for a, b in zip(lo, hi)), dtype=np.int64, count=len(lo))
        shards, samples = [], []
        for c, order in enumerate(self.orders):
            if counts[c]:
                sh, sa = order.pointers(lo[c], int(counts[c]))
                shards.append(sh)
                samples.append(sa)
        ds, sh, sa = self._k.chunk_pointers(counts, self._ids, np.concatenate(shards),
                                            np.concatenate(samples))
        if length < self.chunk_size:  # the final chunk: the read-order prefix
            ds, sh, sa = ds[:length], sh[:length], sa[:length]
            counts = np.bincount(ds, minlength=len(self.orders)).astype(np.int64)
        return GlobalChunk(counts, ds, sh, sa)
