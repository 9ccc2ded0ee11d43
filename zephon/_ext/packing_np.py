"""Pure-Python twin of ``packing.pyx``: the same bin-assignment rules over plain lists.

Written independently of the Cython version (lists of segments instead of linked segment
stores) so that the equality tests check the rules, not a transliteration. Decisions depend
only on the open bins in opening order, their fill, and the pool's (length, arrival) pairs.
"""

from __future__ import annotations

import numpy as np

from zephon._ext.packing_algorithms import ALGORITHMS, code

FIRST_FIT, BEST_FIT, WRAP, BEST_FIT_WRAP = (
    ALGORITHMS.index(n) for n in ("first_fit", "best_fit", "wrap", "best_fit_wrap"))


class PackCore:
    """Open bins / wrap carry / candidate pool of one lane (see packer.py for the rules)."""

    def __init__(self, algorithm: str, max_length: int, num_bins: int, min_len: int,
                 max_segs: int, fullest: bool, drop_oversized: bool, pool_size: int,
                 max_age: int) -> None:
        if max_length < 1 or num_bins < 1 or min_len < 1:
            raise ValueError("invalid packing configuration")
        self.algo = code(algorithm)
        self.max_length, self.num_bins, self.min_len = int(max_length), int(num_bins), int(min_len)
        self.max_segs, self.pool_size, self.max_age = int(max_segs), max(int(pool_size), 0), int(max_age)
        self.fullest, self.drop_oversized = bool(fullest), bool(drop_oversized)
        self.bins: list[list[list[int]]] = []     # open bins, oldest first; segments [rec, start, len]
        self.pool: list[list[int]] = []           # candidates [rec, start, len, seq]
        self.arrivals = 0
        self._out: list[tuple[list[list[int]], int]] = []
        self._dropped: list[int] = []

    # ---- helpers ------------------------------------------------------------------------------
    @staticmethod
    def _fill(b: list[list[int]]) -> int:
        return sum(s[2] for s in b)

    def _emit(self, k: int) -> None:
        b = self.bins.pop(k)
        self._out.append((b, self.max_length - self._fill(b)))

    def _done(self, b: list[list[int]]) -> bool:
        """A wrap / best_fit_wrap bin is done at max_length tokens or max_segs segments."""
        return self._fill(b) == self.max_length or bool(self.max_segs and len(b) >= self.max_segs)

    def _place(self, rec: int, start: int, length: int) -> None:
        L = self.max_length
        fits = [k for k, b in enumerate(self.bins)
                if L - self._fill(b) >= length and (not self.max_segs or len(b) < self.max_segs)]
        if fits:
            if self.algo == FIRST_FIT:
                k = fits[0]
            else:  # least room left; min() keeps the oldest among equals
                k = min(fits, key=lambda i: L - self._fill(self.bins[i]))
        else:
            if len(self.bins) == self.num_bins:
                victim = 0
                if self.fullest:
                    fills = [self._fill(b) for b in self.bins]
                    victim = fills.index(max(fills))
                self._emit(victim)
            self.bins.append([])
            k = len(self.bins) - 1
        self.bins[k].append([rec, start, length])
        b = self.bins[k]
        if L - self._fill(b) < self.min_len or (self.max_segs and len(b) >= self.max_segs):
            self._emit(k)

    def _fill_step(self) -> None:
        L = self.max_length
        if not self.bins:
            self.bins.append([])
        room = L - self._fill(self.bins[0])
        oldest = min(range(len(self.pool)), key=lambda j: self.pool[j][3])
        fits = [j for j, c in enumerate(self.pool) if c[2] <= room]
        if not fits or self.arrivals - 1 - self.pool[oldest][3] >= self.max_age:
            pick = oldest
        else:
            pick = min(fits, key=lambda j: (-self.pool[j][2], self.pool[j][3]))
        rec, start, length, _ = self.pool[pick]
        take = min(length, room)
        self.bins[0].append([rec, start, take])
        if take == length:
            self.pool.pop(pick)
        else:
            self.pool[pick][1] += take
            self.pool[pick][2] -= take
        if self._done(self.bins[0]):
            self._emit(0)

    def _arrive(self, rec: int, length: int) -> None:
        L = self.max_length
        if length == 0 or (length > L and self.drop_oversized):
            self._dropped.append(rec)
            return
        if self.algo == WRAP:
            pos = 0
            while pos < length:
                if not self.bins:
                    self.bins.append([])
                take = min(length - pos, L - self._fill(self.bins[0]))
                self.bins[0].append([rec, pos, take])
                pos += take
                if self._done(self.bins[0]):
                    self._emit(0)
        elif self.algo == BEST_FIT_WRAP:
            self.pool.append([rec, 0, length, self.arrivals])
            self.arrivals += 1
            while len(self.pool) > self.pool_size and (
                    sum(c[2] for c in self.pool) >= L
                    or (self.max_segs and len(self.pool) >= self.max_segs)):
                self._fill_step()
        else:
            pos = 0
            while length - pos > L:
                self._out.append(([[rec, pos, L]], 0))
                pos += L
            self._place(rec, pos, length - pos)

    def _result(self) -> tuple:
        segs = [s for b, _ in self._out for s in b]
        off = np.zeros(len(self._out) + 1, dtype=np.int64)
        np.cumsum([len(b) for b, _ in self._out], out=off[1:])
        flat = np.asarray(segs, dtype=np.int64).reshape(-1, 3)
        pad = np.asarray([p for _, p in self._out], dtype=np.int64)
        res = (off, flat[:, 0].copy(), flat[:, 1].copy(), flat[:, 2].copy(), pad,
               np.asarray(self._dropped, dtype=np.int64))
        self._out, self._dropped = [], []
        return res

    # ---- API ---------------------------------------------------------------------------------
    def push(self, lengths, record_ids) -> tuple:
        """Returns (seg_offsets, record_id, token_start, token_len, padding, dropped)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        record_ids = np.asarray(record_ids, dtype=np.int64)
        if len(record_ids) != len(lengths):
            raise ValueError("lengths and record_ids must have equal lengths")
        if len(lengths) and lengths.min() < 0:
            raise ValueError(f"negative record length at position {int(np.argmax(lengths < 0))}")
        for rec, length in zip(record_ids.tolist(), lengths.tolist()):
            self._arrive(rec, length)
        return self._result()

    def flush(self) -> tuple:
        """Emit every open bin, partial ones padded (wrap's carry too); leaves the state fresh."""
        if self.algo == BEST_FIT_WRAP:
            while self.pool:
                self._fill_step()
        while self.bins:
            self._emit(0)
        self.arrivals = 0
        return self._result()

    @property
    def pending_tokens(self) -> int:
        return sum(self._fill(b) for b in self.bins) + sum(c[2] for c in self.pool)

    def export(self) -> dict:
        return {"bins": [[list(s) for s in b] for b in self.bins],
                "pool": sorted((list(c) for c in self.pool), key=lambda c: c[3]),
                "arrivals": int(self.arrivals)}

    def load(self, state: dict) -> None:
        if len(state.get("bins", [])) > self.num_bins:
            raise ValueError("packer state holds more open bins than num_bins")
        self.bins = [[[int(x) for x in s] for s in b] for b in state.get("bins", [])]
        self.pool = [[int(x) for x in c] for c in state.get("pool", [])]
        self.arrivals = int(state.get("arrivals", 0))
        self._out, self._dropped = [], []
