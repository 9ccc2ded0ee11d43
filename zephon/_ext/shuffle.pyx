# cython: language_level=3
"""Reordering kernels: identity hashes, the per-lane shuffle buffer, the mixture balancer.

Randomness is a pure function of seeds and record identity, mixed with the splitmix64
finalizer (``mix64``), never of timing or of how the stream was cut into blocks. The
constants and formulas are restated in ``shuffle_np`` (the twin) and must not change: they
define which records a checkpoint resumes with.
"""

import numpy as np

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

SHARE_SCALE = 1 << 20
cdef int64_t SCALE = 1 << 20, SAT = 1 << 62
cdef uint64_t GOLDEN = 0x9E3779B97F4A7C15, M1 = 0xBF58476D1CE4E5B9, M2 = 0x94D049BB133111EB
cdef uint64_t KEY_SALT = 0x243F6A8885A308D3, SHUFFLE_SALT = 0x13198A2E03707344
cdef uint64_t FLUSH_SALT = 0xA4093822299F31D0, BLOCK_SALT = 0x082EFA98EC4E6C89

MODES = ("streaming", "block", "block_warmup")


cdef inline uint64_t _mix(uint64_t z) noexcept nogil:
    z += GOLDEN
    z = (z ^ (z >> 30)) * M1
    z = (z ^ (z >> 27)) * M2
    return z ^ (z >> 31)


cdef void* _grow(void* p, Py_ssize_t* cap, Py_ssize_t need, size_t item) except NULL nogil:
    """Reallocate ``p`` (``cap`` items) to hold at least ``need`` items, doubling."""
    if p != NULL and need <= cap[0]:
        return p
    cap[0] = max(need, 2 * cap[0], 16)
    p = realloc(p, cap[0] * item)
    if p == NULL:
        with gil:
            raise MemoryError()
    return p


def mix64(x):
    """splitmix64 finalizer of every element (uint64 in, uint64 out)."""
    cdef const uint64_t[::1] src = np.ascontiguousarray(x, dtype=np.uint64).reshape(-1)
    out = np.empty(src.shape[0], dtype=np.uint64)
    cdef uint64_t[::1] dst = out
    cdef Py_ssize_t i
    with nogil:
        for i in range(src.shape[0]):
            dst[i] = _mix(src[i])
    return out


def record_keys(dataset_id, shard_id, sample_idx, lineage=None):
    """uint64 identity hash per record of (dataset, shard, sample[, lineage path]). ``lineage``:
    a child index per record or an (n, depth) matrix padded with -1; the path stops at the
    first negative entry, so padding depth never changes a key."""
    ds, sh, sa = [np.ascontiguousarray(c, dtype=np.int64).reshape(-1)
                  for c in (dataset_id, shard_id, sample_idx)]
    n = len(ds)
    if len(sh) != n or len(sa) != n:
        raise ValueError("identity columns must have equal lengths")
    lin = np.zeros((n, 0), np.int64) if lineage is None else np.asarray(lineage, dtype=np.int64)
    lin = np.ascontiguousarray(lin[:, None] if lin.ndim == 1 else lin)
    if lin.ndim != 2 or lin.shape[0] != n:
        raise ValueError("lineage must be [n] or [n, depth]")
    out = np.empty(n, dtype=np.uint64)
    cdef const int64_t[::1] d = ds, s = sh, m = sa
    cdef const int64_t[:, ::1] li = lin
    cdef uint64_t[::1] o = out
    cdef Py_ssize_t i, j
    cdef uint64_t h
    with nogil:
        for i in range(n):
            h = _mix(KEY_SALT ^ <uint64_t>d[i])
            h = _mix(h ^ <uint64_t>s[i])
            h = _mix(h ^ <uint64_t>m[i])
            for j in range(li.shape[1]):
                if li[i, j] < 0:
                    break
                h = _mix(h ^ <uint64_t>li[i, j])
            o[i] = h
    return out


cdef class ShuffleCore:
    """Per-lane shuffle buffer holding (arrival index, key) pairs; see shuffler.py."""

    cdef readonly int mode
    cdef readonly int64_t buffer_size
    cdef readonly double growth
    cdef uint64_t base
    cdef int64_t* idx
    cdef uint64_t* keys
    cdef int64_t count, window, emitted
    cdef readonly int64_t arrivals

    def __cinit__(self, int mode, int64_t buffer_size, uint64_t seed, uint64_t lane,
                  double growth):
        if mode < 0 or mode > 2 or buffer_size < 1 or growth < 1.0:
            raise ValueError("invalid shuffle configuration")
        self.mode, self.buffer_size, self.growth = mode, buffer_size, growth
        self.base = _mix(_mix(SHUFFLE_SALT ^ seed) ^ lane)
        cdef Py_ssize_t cap = 0
        self.idx = <int64_t*>_grow(NULL, &cap, buffer_size + 1, sizeof(int64_t))
        cap = 0
        self.keys = <uint64_t*>_grow(NULL, &cap, buffer_size + 1, sizeof(uint64_t))
        self._reset()

    def __dealloc__(self):
        free(self.idx); free(self.keys)

    cdef void _reset(self) noexcept:
        cdef int64_t w0 = 0 if self.buffer_size == 1 else max(1, min(128, self.buffer_size // 16))
        self.count = self.emitted = self.arrivals = 0
        self.window = w0 if self.mode == 0 else (self.buffer_size if self.mode == 1 else max(1, w0))

    cdef Py_ssize_t _block(self, int64_t* out, Py_ssize_t n_out) noexcept nogil:
        """Permute the buffered block (seed: base seed + every key in arrival order), emit it."""
        cdef uint64_t h = _mix(self.base ^ BLOCK_SALT)
        cdef int64_t i, j, t
        for i in range(self.count):
            h = _mix(h ^ self.keys[i])
        for i in range(self.count - 1, 0, -1):
            j = <int64_t>(_mix(h ^ <uint64_t>i) % <uint64_t>(i + 1))
            t = self.idx[i]; self.idx[i] = self.idx[j]; self.idx[j] = t
        memcpy(&out[n_out], self.idx, self.count * sizeof(int64_t))
        n_out += self.count
        self.emitted += self.count
        self.count = 0
        if self.mode == 2:   # block_warmup: the next block is larger, up to buffer_size
            t = <int64_t>(self.window * self.growth)
            self.window = min(self.buffer_size, max(self.window + 1, t))
        return n_out

    def push(self, const uint64_t[::1] kv):
        """Arrivals numbered from ``arrivals``; returns the arrival indices emitted, in order."""
        out = np.empty(self.count + kv.shape[0], dtype=np.int64)
        cdef int64_t[::1] ov = out
        cdef Py_ssize_t i, n_out = 0
        cdef uint64_t h, v
        cdef int64_t a
        with nogil:
            for i in range(kv.shape[0]):
                a = self.arrivals
                self.arrivals += 1
                if self.mode == 0 and self.count >= self.window:
                    # the arrival competes with the buffered records for the exit
                    h = _mix(_mix(_mix(self.base ^ kv[i]) ^ <uint64_t>self.emitted)
                             ^ <uint64_t>self.count)
                    v = h % <uint64_t>(self.count + 1)
                    if v == <uint64_t>self.count:
                        ov[n_out] = a
                    else:
                        ov[n_out] = self.idx[v]
                        self.idx[v] = a; self.keys[v] = kv[i]
                    n_out += 1
                    self.emitted += 1
                    self.window += self.window < self.buffer_size
                else:
                    self.idx[self.count] = a; self.keys[self.count] = kv[i]
                    self.count += 1
                    if self.mode != 0 and self.count >= self.window:
                        n_out = self._block(&ov[0], n_out)
        return out[:n_out].copy()

    def flush(self):
        """Drain the buffer in a seeded pseudo-random order; leaves the state fresh."""
        out = np.empty(self.count, dtype=np.int64)
        cdef int64_t[::1] ov = out
        cdef Py_ssize_t n_out = 0
        cdef uint64_t v
        with nogil:
            if self.mode != 0 and self.count:
                n_out = self._block(&ov[0], 0)
            while self.mode == 0 and self.count:
                v = _mix(_mix(_mix(self.base ^ FLUSH_SALT) ^ <uint64_t>self.emitted)
                         ^ <uint64_t>self.count) % <uint64_t>self.count
                ov[n_out] = self.idx[v]
                n_out += 1
                self.count -= 1
                self.idx[v] = self.idx[self.count]; self.keys[v] = self.keys[self.count]
                self.emitted += 1
        self._reset()
        return out

    @property
    def pending(self):
        return int(self.count)

    def export(self):
        cdef Py_ssize_t i
        return {"buffer": [[self.idx[i], <int64_t>self.keys[i]] for i in range(self.count)],
                "window": int(self.window), "emitted": int(self.emitted),
                "arrivals": int(self.arrivals)}

    def load(self, state):
        buf = state["buffer"]
        if len(buf) > self.buffer_size:
            raise ValueError("shuffle state holds more records than buffer_size")
        for i, (a, key) in enumerate(buf):
            self.idx[i], self.keys[i] = a, <uint64_t>(<int64_t>key)
        self.count = len(buf)
        self.window, self.emitted, self.arrivals = state["window"], state["emitted"], state["arrivals"]


# ---- mixture balancer ---------------------------------------------------------------------------
cdef struct Node:
    int64_t rec, weight, seq, next

cdef struct Comp:
    int64_t head, tail, count, share, deficit, emitted_w


cdef inline int64_t _sat(int64_t x) noexcept nogil:
    return SAT if x > SAT else (-SAT if x < -SAT else x)


cdef class MixCore:
    """Per-component FIFO buffers (linked lists in one node pool) and SWRR deficits (rules:
    zephon/tokens/mixer.py). Shares are fixed-point (2**20 in total) and weights integers: every
    decision is exact integer arithmetic, identical in the twin and on every machine."""

    cdef Node* nodes
    cdef Comp* comps
    cdef int64_t* out               # the caller's output array while push/flush runs
    cdef Py_ssize_t node_cap, node_top, comp_cap, n_out
    cdef readonly int64_t n_comp, buffered, max_buffer, drain_to, ob_rate
    cdef int64_t node_free, ob_buffered, ob_credit, seq

    def __cinit__(self, shares, int64_t max_buffer, int64_t drain_to, int64_t ob_rate):
        self.node_free = -1
        self.max_buffer, self.drain_to, self.ob_rate = max_buffer, drain_to, ob_rate
        self.set_shares(shares)

    def __dealloc__(self):
        free(self.nodes); free(self.comps)

    cdef int _ensure(self, int64_t n) except -1:
        if n > self.n_comp:
            self.comps = <Comp*>_grow(self.comps, &self.comp_cap, n, sizeof(Comp))
            for c in range(self.n_comp, n):
                self.comps[c] = Comp(-1, -1, 0, 0, 0, 0)
            self.n_comp = n
        return 0

    def set_shares(self, shares):
        """New target shares (int64, summing to SHARE_SCALE); deficits restart at zero."""
        cdef const int64_t[::1] sv = np.ascontiguousarray(shares, dtype=np.int64)
        self._ensure(sv.shape[0])
        self.ob_buffered = 0
        for c in range(self.n_comp):
            self.comps[c].share = sv[c] if c < sv.shape[0] else 0
            self.comps[c].deficit = 0
            self.ob_buffered += self.comps[c].count if self.comps[c].share == 0 else 0

    cdef int _emit(self, int64_t c) except -1 nogil:
        cdef int64_t s = self.comps[c].head, w = self.nodes[s].weight, j
        self.out[self.n_out] = self.nodes[s].rec
        self.n_out += 1
        self.comps[c].head = self.nodes[s].next
        if self.comps[c].head < 0:
            self.comps[c].tail = -1
        self.nodes[s].next, self.node_free = self.node_free, s
        self.comps[c].count -= 1
        self.buffered -= 1
        self.comps[c].emitted_w += w
        if self.comps[c].share > 0:
            for j in range(self.n_comp):
                if self.comps[j].share > 0:
                    self.comps[j].deficit = _sat(self.comps[j].deficit + self.comps[j].share * w)
            self.comps[c].deficit = _sat(self.comps[c].deficit - SCALE * w)
            self.ob_credit = min(SCALE, self.ob_credit + self.ob_rate)
        else:
            self.ob_buffered -= 1
            self.ob_credit = max(0, self.ob_credit - SCALE)
        return 0

    cdef int64_t _pick(self, bint want) noexcept nogil:
        """want: SWRR's wanted target component (largest deficit, lowest id on ties) or -1 when
        it has nothing buffered. Else the best available: the obsolete quota when due, the
        buffered target component with the largest deficit, else the oldest obsolete record."""
        cdef int64_t c, best = -1, old = -1
        cdef bint quota = self.ob_buffered > 0 and self.ob_credit >= SCALE
        for c in range(self.n_comp):
            if self.comps[c].share > 0:
                if (want or self.comps[c].count) and (
                        best < 0 or self.comps[c].deficit > self.comps[best].deficit):
                    best = c
            elif self.comps[c].count and (old < 0 or self.nodes[self.comps[c].head].seq
                                          < self.nodes[self.comps[old].head].seq):
                old = c
        if quota or best < 0:
            return old
        return best if self.comps[best].count else -1

    cdef int _add(self, int64_t c, int64_t rec, int64_t w) except -1 nogil:
        cdef int64_t s = self.node_free
        if s >= 0:
            self.node_free = self.nodes[s].next
        else:
            self.nodes = <Node*>_grow(self.nodes, &self.node_cap, self.node_top + 1, sizeof(Node))
            s = self.node_top
            self.node_top += 1
        self.nodes[s] = Node(rec, w, self.seq, -1)
        self.seq += 1
        if self.comps[c].tail < 0:
            self.comps[c].head = s
        else:
            self.nodes[self.comps[c].tail].next = s
        self.comps[c].tail = s
        self.comps[c].count += 1
        self.buffered += 1
        self.ob_buffered += self.comps[c].share == 0
        return 0

    cdef int _run(self, bint drain_all) except -1 nogil:
        """Emit while the obsolete quota is due or the wanted component is buffered; then drain
        best-available records down to drain_to (or to empty when drain_all)."""
        cdef int64_t c = self._pick(True)
        while c >= 0:
            self._emit(c)
            c = self._pick(True)
        if drain_all or (self.max_buffer >= 0 and self.buffered >= self.max_buffer):
            while self.buffered > (0 if drain_all else self.drain_to):
                self._emit(self._pick(False))
        return 0

    cdef _start(self, Py_ssize_t n):
        """An output array for at most every buffered record plus n arrivals."""
        out = np.empty(self.buffered + n + 1, dtype=np.int64)
        cdef int64_t[::1] ov = out
        self.out, self.n_out = &ov[0], 0
        return out

    def push(self, const int64_t[::1] components, const int64_t[::1] weights,
             const int64_t[::1] record_ids):
        """Buffer each record, emit what the rules allow; returns emitted record ids in order."""
        cdef Py_ssize_t i, n = components.shape[0]
        if weights.shape[0] != n or record_ids.shape[0] != n:
            raise ValueError("components, weights and record_ids must have equal lengths")
        if n:
            self._ensure(int(np.max(components)) + 1)
        out = self._start(n)
        with nogil:
            for i in range(n):
                self._add(components[i], record_ids[i], weights[i])
                self._run(False)
        return out[:self.n_out].copy()

    def flush(self):
        """End of stream: returns (emitted, dropped); strict mode drops what is off target."""
        out = self._start(0)
        with nogil:
            self._run(self.max_buffer >= 0)
        emitted = out[:self.n_out].copy()
        left = sorted((it[2], it[0]) for c in range(self.n_comp) for it in self._items(c))
        self._clear()
        return emitted, np.array([r for _, r in left], dtype=np.int64)

    cdef _clear(self):
        """Fresh buffers and counters; the target shares stay."""
        for c in range(self.n_comp):
            self.comps[c] = Comp(-1, -1, 0, self.comps[c].share, 0, 0)
        self.node_top, self.node_free = 0, -1
        self.buffered = self.ob_buffered = self.ob_credit = self.seq = 0

    def _items(self, int64_t c):
        cdef int64_t s = self.comps[c].head
        items = []
        while s >= 0:
            items.append([self.nodes[s].rec, self.nodes[s].weight, self.nodes[s].seq])
            s = self.nodes[s].next
        return items

    def export(self):
        comps = [self.comps[c] for c in range(self.n_comp)]
        return {"shares": [c["share"] for c in comps], "deficit": [c["deficit"] for c in comps],
                "emitted_weight": [c["emitted_w"] for c in comps],
                "buffers": [self._items(c) for c in range(self.n_comp)],
                "obsolete_credit": int(self.ob_credit), "seq": int(self.seq)}

    def load(self, state):
        """Replace the whole state by an ``export()`` dict (validated by the caller)."""
        self._clear()
        self._ensure(max(len(state["shares"]), len(state["buffers"])))
        self.set_shares(np.asarray(state["shares"], dtype=np.int64))
        for c, items in enumerate(state["buffers"]):
            for rec, w, sq in items:
                self.seq = sq
                self._add(c, rec, w)
        for c, (d, e) in enumerate(zip(state["deficit"], state["emitted_weight"])):
            self.comps[c].deficit, self.comps[c].emitted_w = d, e
        self.ob_credit, self.seq = state["obsolete_credit"], state["seq"]
