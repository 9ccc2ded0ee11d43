"""Pure-Python/numpy twin of ``shuffle.pyx``: identity hashes, shuffle buffer, mixture balancer.

The formulas below are the contract both implementations follow (all arithmetic mod 2**64):

- ``mix64(z) = splitmix64 finalizer of (z + 0x9E3779B97F4A7C15)``.
- key of a record: ``h = mix64(KEY_SALT ^ dataset); h = mix64(h ^ shard); h = mix64(h ^ sample);``
  then ``h = mix64(h ^ child)`` along the lineage path until its first negative entry.
- lane base: ``base = mix64(mix64(SHUFFLE_SALT ^ seed) ^ lane)``.
- streaming eviction: ``mix64(mix64(mix64(base ^ key) ^ emitted) ^ count) % (count + 1)``;
  the value ``count`` means the arrival itself leaves.
- streaming flush victim: ``mix64(mix64(mix64(base ^ FLUSH_SALT) ^ emitted) ^ count) % count``.
- block: ``h = mix64(base ^ BLOCK_SALT)``, ``h = mix64(h ^ key)`` over the block in arrival
  order, then Fisher-Yates from the end with ``j = mix64(h ^ i) % (i + 1)``.
"""

from __future__ import annotations

from collections import deque

import numpy as np

MASK = (1 << 64) - 1
SHARE_SCALE = 1 << 20
SAT = 1 << 62
GOLDEN, M1, M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
KEY_SALT = 0x243F6A8885A308D3
SHUFFLE_SALT = 0x13198A2E03707344
FLUSH_SALT = 0xA4093822299F31D0
BLOCK_SALT = 0x082EFA98EC4E6C89
MODES = ("streaming", "block", "block_warmup")


def _mix(z: int) -> int:
    z = (z + GOLDEN) & MASK
    z = ((z ^ (z >> 30)) * M1) & MASK
    z = ((z ^ (z >> 27)) * M2) & MASK
    return z ^ (z >> 31)


def mix64(x) -> np.ndarray:
    """splitmix64 finalizer of every element, vectorised (uint64 arithmetic wraps)."""
    z = np.ascontiguousarray(x, dtype=np.uint64).reshape(-1) + np.uint64(GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(M1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(M2)
    return z ^ (z >> np.uint64(31))


def record_keys(dataset_id, shard_id, sample_idx, lineage=None) -> np.ndarray:
    """uint64 identity hash per record (see the module docstring)."""
    cols = [np.ascontiguousarray(c, dtype=np.int64).reshape(-1)
            for c in (dataset_id, shard_id, sample_idx)]
    n = len(cols[0])
    if len(cols[1]) != n or len(cols[2]) != n:
        raise ValueError("identity columns must have equal lengths")
    h = mix64(cols[0].view(np.uint64) ^ np.uint64(KEY_SALT))
    h = mix64(h ^ cols[1].view(np.uint64))
    h = mix64(h ^ cols[2].view(np.uint64))
    if lineage is not None:
        lin = np.asarray(lineage, dtype=np.int64)
        lin = lin[:, None] if lin.ndim == 1 else lin
        if lin.ndim != 2 or lin.shape[0] != n:
            raise ValueError("lineage must be [n] or [n, depth]")
        alive = np.ones(n, dtype=bool)
        for j in range(lin.shape[1]):      # a loop over lineage depth, not over records
            alive &= lin[:, j] >= 0
            h = np.where(alive, mix64(h ^ np.ascontiguousarray(lin[:, j]).view(np.uint64)), h)
    return h


class ShuffleCore:
    """Per-lane shuffle buffer holding (arrival index, key) pairs; see shuffler.py."""

    def __init__(self, mode: int, buffer_size: int, seed: int, lane: int, growth: float) -> None:
        if not 0 <= mode <= 2 or buffer_size < 1 or growth < 1.0:
            raise ValueError("invalid shuffle configuration")
        self.mode, self.buffer_size, self.growth = int(mode), int(buffer_size), float(growth)
        self.base = _mix(_mix(SHUFFLE_SALT ^ (seed & MASK)) ^ (lane & MASK))
        self._reset()

    def _reset(self) -> None:
        w0 = 0 if self.buffer_size == 1 else max(1, min(128, self.buffer_size // 16))
        self.idx: list[int] = []
        self.keys: list[int] = []
        self.emitted = self.arrivals = 0
        self.window = (w0, self.buffer_size, max(1, w0))[self.mode]

    def _block(self) -> list[int]:
        h = _mix(self.base ^ BLOCK_SALT)
        for k in self.keys:
            h = _mix(h ^ k)
        idx = self.idx
        for i in range(len(idx) - 1, 0, -1):
            j = _mix(h ^ i) % (i + 1)
            idx[i], idx[j] = idx[j], idx[i]
        self.emitted += len(idx)
        self.idx, self.keys = [], []
        if self.mode == 2:
            self.window = min(self.buffer_size, max(self.window + 1, int(self.window * self.growth)))
        return idx

    def push(self, keys: np.ndarray) -> np.ndarray:
        """``keys``: uint64, one per arrival; returns the arrival indices emitted, in order."""
        out: list[int] = []
        for key in np.asarray(keys, dtype=np.uint64).tolist():
            a = self.arrivals
            self.arrivals += 1
            if self.mode != 0:
                self.idx.append(a)
                self.keys.append(key)
                if len(self.idx) >= self.window:
                    out.extend(self._block())
            elif len(self.idx) < self.window:
                self.idx.append(a)
                self.keys.append(key)
            else:
                count = len(self.idx)
                v = _mix(_mix(_mix(self.base ^ key) ^ self.emitted) ^ count) % (count + 1)
                if v == count:
                    out.append(a)
                else:
                    out.append(self.idx[v])
                    self.idx[v], self.keys[v] = a, key
                self.emitted += 1
                if self.window < self.buffer_size:
                    self.window += 1
        return np.asarray(out, dtype=np.int64)

    def flush(self) -> np.ndarray:
        out: list[int] = []
        if self.mode != 0:
            if self.idx:
                out = self._block()
        else:
            while self.idx:
                count = len(self.idx)
                v = _mix(_mix(_mix(self.base ^ FLUSH_SALT) ^ self.emitted) ^ count) % count
                out.append(self.idx[v])
                self.idx[v], self.keys[v] = self.idx[-1], self.keys[-1]
                self.idx.pop()
                self.keys.pop()
                self.emitted += 1
        self._reset()
        return np.asarray(out, dtype=np.int64)

    @property
    def pending(self) -> int:
        return len(self.idx)

    def export(self) -> dict:
        return {"buffer": [[a, k - (1 << 64) if k >> 63 else k] for a, k in zip(self.idx, self.keys)],
                "window": self.window, "emitted": self.emitted, "arrivals": self.arrivals}

    def load(self, state: dict) -> None:
        if len(state["buffer"]) > self.buffer_size:
            raise ValueError("shuffle state holds more records than buffer_size")
        self.idx = [int(a) for a, _ in state["buffer"]]
        self.keys = [int(k) & MASK for _, k in state["buffer"]]
        self.window, self.emitted = int(state["window"]), int(state["emitted"])
        self.arrivals = int(state["arrivals"])


def _sat(x: int) -> int:
    return SAT if x > SAT else (-SAT if x < -SAT else x)


class MixCore:
    """Per-lane, per-component FIFO buffers and SWRR deficits; see mixer.py for the rules."""

    def __init__(self, shares, max_buffer: int, drain_to: int, ob_rate: int) -> None:
        self.max_buffer, self.drain_to, self.ob_rate = int(max_buffer), int(drain_to), int(ob_rate)
        self.bufs: list[deque] = []
        self.share: list[int] = []
        self.deficit: list[int] = []
        self.emitted_w: list[int] = []
        self.ob_credit = self.seq = 0
        self.set_shares(shares)

    @property
    def n_comp(self) -> int:
        return len(self.bufs)

    @property
    def buffered(self) -> int:
        return sum(len(b) for b in self.bufs)

    def _ensure(self, n: int) -> None:
        while len(self.bufs) < n:
            self.bufs.append(deque())
            self.share.append(0)
            self.deficit.append(0)
            self.emitted_w.append(0)

    def set_shares(self, shares) -> None:
        shares = [int(s) for s in np.asarray(shares, dtype=np.int64).reshape(-1)]
        self._ensure(len(shares))
        self.share = [shares[c] if c < len(shares) else 0 for c in range(self.n_comp)]
        self.deficit = [0] * self.n_comp

    def _ob_buffered(self) -> int:
        return sum(len(b) for c, b in enumerate(self.bufs) if self.share[c] == 0)

    def _emit(self, c: int, out: list[int]) -> None:
        rec, w, _ = self.bufs[c].popleft()
        out.append(rec)
        self.emitted_w[c] += w
        if self.share[c] > 0:
            for j in range(self.n_comp):
                if self.share[j] > 0:
                    self.deficit[j] = _sat(self.deficit[j] + self.share[j] * w)
            self.deficit[c] = _sat(self.deficit[c] - SHARE_SCALE * w)
            self.ob_credit = min(SHARE_SCALE, self.ob_credit + self.ob_rate)
        else:
            self.ob_credit = max(0, self.ob_credit - SHARE_SCALE)

    def _best(self, buffered_only: bool) -> int:
        cands = [c for c in range(self.n_comp)
                 if self.share[c] > 0 and (not buffered_only or self.bufs[c])]
        # max() keeps the first (lowest id) of equal deficits
        return max(cands, key=lambda c: self.deficit[c]) if cands else -1

    def _oldest_obsolete(self) -> int:
        cands = [c for c in range(self.n_comp) if self.share[c] == 0 and self.bufs[c]]
        return min(cands, key=lambda c: self.bufs[c][0][2]) if cands else -1

    def _run(self, out: list[int]) -> None:
        while True:
            if self.ob_credit >= SHARE_SCALE and self._ob_buffered():
                self._emit(self._oldest_obsolete(), out)
                continue
            w = self._best(False)
            if w < 0 or not self.bufs[w]:
                return
            self._emit(w, out)

    def _drain_one(self, out: list[int]) -> None:
        c = -1
        if not (self.ob_credit >= SHARE_SCALE and self._ob_buffered()):
            c = self._best(True)
        self._emit(c if c >= 0 else self._oldest_obsolete(), out)

    def push(self, components, weights, record_ids) -> np.ndarray:
        comps = np.asarray(components, dtype=np.int64).reshape(-1)
        ws = np.asarray(weights, dtype=np.int64).reshape(-1)
        rids = np.asarray(record_ids, dtype=np.int64).reshape(-1)
        if len(ws) != len(comps) or len(rids) != len(comps):
            raise ValueError("components, weights and record_ids must have equal lengths")
        if len(comps):
            self._ensure(int(comps.max()) + 1)
        out: list[int] = []
        for c, w, r in zip(comps.tolist(), ws.tolist(), rids.tolist()):
            self.bufs[c].append((r, w, self.seq))
            self.seq += 1
            self._run(out)
            if self.max_buffer >= 0 and self.buffered >= self.max_buffer:
                while self.buffered > self.drain_to:
                    self._drain_one(out)
        return np.asarray(out, dtype=np.int64)

    def flush(self) -> tuple[np.ndarray, np.ndarray]:
        out: list[int] = []
        self._run(out)
        if self.max_buffer >= 0:
            while self.buffered:
                self._drain_one(out)
        left = sorted((sq, r) for b in self.bufs for r, _, sq in b)
        for c in range(self.n_comp):
            self.bufs[c].clear()
            self.deficit[c] = self.emitted_w[c] = 0
        self.ob_credit = self.seq = 0
        return np.asarray(out, dtype=np.int64), np.asarray([r for _, r in left], dtype=np.int64)

    def export(self) -> dict:
        return {"shares": list(self.share), "deficit": list(self.deficit),
                "emitted_weight": list(self.emitted_w),
                "buffers": [[[r, w, sq] for r, w, sq in b] for b in self.bufs],
                "obsolete_credit": self.ob_credit, "seq": self.seq}

    def load(self, state: dict) -> None:
        n = max(len(state["shares"]), len(state["buffers"]))
        self.bufs, self.share, self.deficit, self.emitted_w = [], [], [], []
        self._ensure(n)
        self.set_shares(state["shares"])
        for c, items in enumerate(state["buffers"]):
            self.bufs[c].extend((int(r), int(w), int(sq)) for r, w, sq in items)
        for c, d in enumerate(state["deficit"]):
            self.deficit[c] = int(d)
        for c, e in enumerate(state["emitted_weight"]):
            self.emitted_w[c] = int(e)
        self.ob_credit, self.seq = int(state["obsolete_credit"]), int(state["seq"])
