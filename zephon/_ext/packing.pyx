# cython: language_level=3
"""Streaming bin assignment for token packing: first_fit, best_fit, wrap, best_fit_wrap.

``PackCore`` is the per-lane state of one packer. ``push(lengths, record_ids)`` runs the
per-record loop without the GIL over C arrays (open bins as linked segment lists in a shared
segment store; best_fit_wrap's candidate pool as a dense array) and returns the bins completed
by that push as flat segment arrays. The numpy twin ``packing_np.PackCore`` is an independent
list-based implementation of the same rules; ``zephon/tokens/packer.py`` documents them.
"""

import numpy as np

from libc.stdint cimport int64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

from zephon._ext.packing_algorithms import ALGORITHMS, code

# the algorithms by their place in the one list (``packing_algorithms.ALGORITHMS``)
cdef int FIRST_FIT = ALGORITHMS.index("first_fit")
cdef int BEST_FIT = ALGORITHMS.index("best_fit")
cdef int WRAP = ALGORITHMS.index("wrap")
cdef int BEST_FIT_WRAP = ALGORITHMS.index("best_fit_wrap")

cdef struct Vec:
    int64_t* data
    Py_ssize_t size
    Py_ssize_t cap

cdef struct Seg:
    int64_t rec, start, length, next

cdef struct Bin:
    int64_t head, tail, nseg, fill   # fill < 0: the slot is free

cdef struct Cand:
    int64_t rec, start, length, seq


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


cdef inline int vpush(Vec* v, int64_t x) except -1 nogil:
    if v.size == v.cap:
        v.data = <int64_t*>_grow(v.data, &v.cap, v.size + 1, sizeof(int64_t))
    v.data[v.size] = x
    v.size += 1
    return 0


cdef object _take(Vec* v):
    out = np.empty(v.size, dtype=np.int64)
    cdef int64_t[::1] mv = out
    if v.size:
        memcpy(&mv[0], v.data, v.size * sizeof(int64_t))
    v.size = 0
    return out


cdef class PackCore:
    """Open bins / wrap carry / candidate pool of one lane (see packer.py for the rules)."""

    cdef readonly int algo
    cdef readonly int64_t max_length, num_bins, min_len, max_segs, pool_size, max_age
    cdef readonly bint fullest, drop_oversized
    cdef Seg* segs
    cdef Py_ssize_t seg_cap, seg_top
    cdef int64_t seg_free
    cdef Bin* bins
    cdef int64_t* order            # open bin slots, oldest first
    cdef int64_t n_open
    cdef Cand* cands
    cdef Py_ssize_t cand_cap, n_cand
    cdef int64_t pool_tokens, arrivals
    cdef Vec o_off, o_rec, o_start, o_len, o_pad, o_drop

    def __cinit__(self, str algorithm, int64_t max_length, int64_t num_bins, int64_t min_len,
                  int64_t max_segs, bint fullest, bint drop_oversized, int64_t pool_size,
                  int64_t max_age):
        if max_length < 1 or num_bins < 1 or min_len < 1:
            raise ValueError("invalid packing configuration")
        self.algo = code(algorithm)
        self.max_length, self.num_bins, self.min_len = max_length, num_bins, min_len
        self.max_segs, self.pool_size, self.max_age = max_segs, max(pool_size, 0), max_age
        self.fullest, self.drop_oversized = fullest, drop_oversized
        self.seg_free = -1
        cdef Py_ssize_t cap = 0
        self.bins = <Bin*>_grow(NULL, &cap, num_bins, sizeof(Bin))
        cap = 0
        self.order = <int64_t*>_grow(NULL, &cap, num_bins, sizeof(int64_t))
        cdef int64_t b
        for b in range(num_bins):
            self.bins[b].fill = -1

    def __dealloc__(self):
        free(self.segs); free(self.bins); free(self.order); free(self.cands)
        free(self.o_off.data); free(self.o_rec.data); free(self.o_start.data)
        free(self.o_len.data); free(self.o_pad.data); free(self.o_drop.data)

    # ---- bins ---------------------------------------------------------------------------
    cdef int64_t _open(self) except -1 nogil:
        cdef int64_t b = 0
        while self.bins[b].fill >= 0:
            b += 1
        self.bins[b].head = -1; self.bins[b].tail = -1
        self.bins[b].nseg = 0; self.bins[b].fill = 0
        self.order[self.n_open] = b
        self.n_open += 1
        return self.n_open - 1

    cdef int _add(self, int64_t k, int64_t rec, int64_t start, int64_t length) except -1 nogil:
        cdef int64_t s, b = self.order[k]
        if self.seg_free >= 0:
            s = self.seg_free
            self.seg_free = self.segs[s].next
        else:
            if self.seg_top == self.seg_cap:
                self.segs = <Seg*>_grow(self.segs, &self.seg_cap, self.seg_top + 1, sizeof(Seg))
            s = self.seg_top
            self.seg_top += 1
        self.segs[s].rec = rec; self.segs[s].start = start
        self.segs[s].length = length; self.segs[s].next = -1
        if self.bins[b].tail < 0:
            self.bins[b].head = s
        else:
            self.segs[self.bins[b].tail].next = s
        self.bins[b].tail = s
        self.bins[b].nseg += 1
        self.bins[b].fill += length
        return 0

    cdef int _close(self, int64_t k, bint forget) except -1 nogil:
        """Emit the k-th open bin (or, when loading a state, forget it) and free its slot."""
        cdef int64_t b = self.order[k], s = self.bins[b].head, nxt
        while s >= 0:
            if not forget:
                vpush(&self.o_rec, self.segs[s].rec)
                vpush(&self.o_start, self.segs[s].start)
                vpush(&self.o_len, self.segs[s].length)
            nxt = self.segs[s].next
            self.segs[s].next = self.seg_free
            self.seg_free = s
            s = nxt
        if not forget:
            vpush(&self.o_off, self.o_rec.size)
            vpush(&self.o_pad, self.max_length - self.bins[b].fill)
        self.bins[b].fill = -1
        self.n_open -= 1
        for s in range(k, self.n_open):
            self.order[s] = self.order[s + 1]
        return 0

    cdef inline bint _full(self, int64_t k) noexcept nogil:
        """A wrap / best_fit_wrap bin is done at max_length tokens or max_segs segments."""
        cdef int64_t b = self.order[k]
        return self.bins[b].fill == self.max_length or (
            self.max_segs > 0 and self.bins[b].nseg >= self.max_segs)

    cdef int _solo(self, int64_t rec, int64_t start, int64_t length) except -1 nogil:
        """A bin holding one piece of an oversized record, emitted at once."""
        vpush(&self.o_rec, rec); vpush(&self.o_start, start); vpush(&self.o_len, length)
        vpush(&self.o_off, self.o_rec.size)
        vpush(&self.o_pad, self.max_length - length)
        return 0

    # ---- first_fit / best_fit --------------------------------------------------------------
    cdef int _place(self, int64_t rec, int64_t start, int64_t length) except -1 nogil:
        cdef int64_t k, b, room, best = -1, best_room = 0, L = self.max_length
        for k in range(self.n_open):
            b = self.order[k]
            room = L - self.bins[b].fill
            if room >= length and (self.max_segs == 0 or self.bins[b].nseg < self.max_segs):
                if self.algo == FIRST_FIT:
                    best = k
                    break
                if best < 0 or room < best_room:
                    best, best_room = k, room
        if best < 0:
            if self.n_open == self.num_bins:
                best = 0
                if self.fullest:
                    for k in range(1, self.n_open):
                        if self.bins[self.order[k]].fill > self.bins[self.order[best]].fill:
                            best = k
                self._close(best, False)
            best = self._open()
        self._add(best, rec, start, length)
        b = self.order[best]
        if L - self.bins[b].fill < self.min_len or (
                self.max_segs and self.bins[b].nseg >= self.max_segs):
            self._close(best, False)
        return 0

    # ---- best_fit_wrap -------------------------------------------------------------------------
    cdef int _fill_step(self) except -1 nogil:
        cdef Py_ssize_t j, best = -1, oldest = 0, pick
        cdef int64_t room, take
        if self.n_open == 0:
            self._open()
        room = self.max_length - self.bins[self.order[0]].fill
        for j in range(self.n_cand):
            if self.cands[j].seq < self.cands[oldest].seq:
                oldest = j
            if self.cands[j].length <= room and (
                    best < 0 or self.cands[j].length > self.cands[best].length or (
                        self.cands[j].length == self.cands[best].length
                        and self.cands[j].seq < self.cands[best].seq)):
                best = j
        # an over-age candidate goes first; with nothing that fits, the oldest is split
        if best < 0 or self.arrivals - 1 - self.cands[oldest].seq >= self.max_age:
            pick = oldest
        else:
            pick = best
        take = min(self.cands[pick].length, room)
        self._add(0, self.cands[pick].rec, self.cands[pick].start, take)
        self.pool_tokens -= take
        if take == self.cands[pick].length:
            self.n_cand -= 1
            self.cands[pick] = self.cands[self.n_cand]
        else:
            self.cands[pick].start += take
            self.cands[pick].length -= take
        if self._full(0):
            self._close(0, False)
        return 0

    cdef int _candidate(self, int64_t rec, int64_t start, int64_t length, int64_t seq) except -1 nogil:
        if self.n_cand == self.cand_cap:
            self.cands = <Cand*>_grow(self.cands, &self.cand_cap, self.n_cand + 1, sizeof(Cand))
        self.cands[self.n_cand].rec = rec; self.cands[self.n_cand].start = start
        self.cands[self.n_cand].length = length; self.cands[self.n_cand].seq = seq
        self.n_cand += 1
        self.pool_tokens += length
        return 0

    # ---- per record ----------------------------------------------------------------------------
    cdef int _arrive(self, int64_t rec, int64_t length) except -1 nogil:
        cdef int64_t L = self.max_length, pos = 0, take
        if length == 0 or (length > L and self.drop_oversized):
            vpush(&self.o_drop, rec)
            return 0
        if self.algo == WRAP:
            while pos < length:
                if self.n_open == 0:
                    self._open()
                take = min(length - pos, L - self.bins[self.order[0]].fill)
                self._add(0, rec, pos, take)
                pos += take
                if self._full(0):
                    self._close(0, False)
        elif self.algo == BEST_FIT_WRAP:
            self._candidate(rec, 0, length, self.arrivals)
            self.arrivals += 1
            # a bin is built once the pool is over size and holds a bin's worth: max_length
            # tokens, or max_segs records when bins are capped
            while self.n_cand > self.pool_size and (
                    self.pool_tokens >= L or (self.max_segs > 0 and self.n_cand >= self.max_segs)):
                self._fill_step()
        else:
            while length - pos > L:   # oversized and kept: full solo bins, then the tail
                self._solo(rec, pos, L)
                pos += L
            self._place(rec, pos, length - pos)
        return 0

    cdef _result(self):
        return (_take(&self.o_off), _take(&self.o_rec), _take(&self.o_start),
                _take(&self.o_len), _take(&self.o_pad), _take(&self.o_drop))

    cdef _begin(self):
        self.o_off.size = 0
        vpush(&self.o_off, 0)

    def push(self, const int64_t[::1] lengths, const int64_t[::1] record_ids):
        """Returns (seg_offsets, record_id, token_start, token_len, padding, dropped)."""
        cdef Py_ssize_t i, n = lengths.shape[0]
        if record_ids.shape[0] != n:
            raise ValueError("lengths and record_ids must have equal lengths")
        for i in range(n):
            if lengths[i] < 0:
                raise ValueError(f"negative record length at position {i}")
        self._begin()
        with nogil:
            for i in range(n):
                self._arrive(record_ids[i], lengths[i])
        return self._result()

    def flush(self):
        """Emit every open bin, partial ones padded (wrap's carry too); leaves the state fresh."""
        self._begin()
        with nogil:
            if self.algo == BEST_FIT_WRAP:
                while self.n_cand:
                    self._fill_step()
            while self.n_open:
                self._close(0, False)
        self.arrivals = 0
        return self._result()

    @property
    def pending_tokens(self):
        cdef int64_t k, t = self.pool_tokens
        for k in range(self.n_open):
            t += self.bins[self.order[k]].fill
        return t

    def export(self):
        """Open bins (oldest first) as [record_id, token_start, token_len] lists, the pool as
        [record_id, token_start, token_len, arrival_seq] sorted by arrival, and the counter."""
        bins = []
        for k in range(self.n_open):
            seglist = []
            s = self.bins[self.order[k]].head
            while s >= 0:
                seglist.append([self.segs[s].rec, self.segs[s].start, self.segs[s].length])
                s = self.segs[s].next
            bins.append(seglist)
        cdef Py_ssize_t j
        pool = [[self.cands[j].rec, self.cands[j].start, self.cands[j].length, self.cands[j].seq]
                for j in range(self.n_cand)]
        pool.sort(key=lambda c: c[3])
        return {"bins": bins, "pool": pool, "arrivals": int(self.arrivals)}

    def load(self, state):
        """Replace the whole state by an ``export()`` dict (validated by the caller)."""
        while self.n_open:
            self._close(0, True)
        self.o_drop.size = 0
        self.n_cand = 0
        self.pool_tokens = 0
        self.arrivals = int(state.get("arrivals", 0))
        if len(state.get("bins", [])) > self.num_bins:
            raise ValueError("packer state holds more open bins than num_bins")
        for seglist in state.get("bins", []):
            k = self._open()
            for rec, start, length in seglist:
                self._add(k, rec, start, length)
        for rec, start, length, seq in state.get("pool", []):
            self._candidate(rec, start, length, seq)
