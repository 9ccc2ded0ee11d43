# cython: language_level=3
"""Curriculum kernels: keyed permutations, epoch orders and the in-chunk interleave.

Compiled twin of ``curriculum_np.py`` (see there for the contracts); results are identical.
Every loop runs without the GIL.
"""

import numpy as np

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc

# Part of the data format: must equal curriculum_np.ROUNDS.
cdef enum:
    _ROUNDS = 6

ROUNDS = _ROUNDS


cdef struct Feistel:
    uint64_t n
    int hi
    int lo
    uint64_t rk[6]


cdef inline uint64_t _splitmix(uint64_t x) noexcept nogil:
    x = x + 0x9E3779B97F4A7C15ULL
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL
    return x ^ (x >> 31)


cdef inline uint64_t _mix(uint64_t key, uint64_t x) noexcept nogil:
    return _splitmix(key ^ _splitmix(x))


cdef inline void _feistel_init(Feistel* f, uint64_t n, uint64_t key) noexcept nogil:
    cdef int bits = 0
    cdef int i
    cdef uint64_t v = n - 1 if n > 0 else 0
    while v:
        v >>= 1
        bits += 1
    cdef uint64_t k0 = _splitmix(key)
    f.n = n
    f.hi = bits // 2
    f.lo = bits - f.hi
    # One hash per key: per-shard keys change every few positions under block shuffling.
    for i in range(_ROUNDS):
        f.rk[i] = k0 + <uint64_t>(i + 1) * 0x9E3779B97F4A7C15ULL


cdef inline uint64_t _feistel_apply(const Feistel* f, uint64_t x) noexcept nogil:
    cdef int a, b, t, i
    cdef uint64_t left, right, g
    if f.n <= 1:
        return x
    while True:
        a = f.hi
        b = f.lo
        for i in range(_ROUNDS):
            left = x >> b
            right = x & ((<uint64_t>1 << b) - 1)
            g = _splitmix(right ^ f.rk[i]) & ((<uint64_t>1 << a) - 1)
            x = (right << a) | (left ^ g)
            t = a
            a = b
            b = t
        if x < f.n:  # cycle walking keeps the map a bijection of [0, n)
            return x


cdef inline uint64_t _key(object key):
    # Keys are 64-bit words; accept any Python int like the numpy twin does.
    return <uint64_t>(int(key) & 0xFFFFFFFFFFFFFFFF)


def hash_mix(key, values):
    cdef uint64_t k = _key(key)
    cdef const int64_t[::1] v = np.ascontiguousarray(values, dtype=np.int64)
    out = np.empty(v.shape[0], dtype=np.uint64)
    cdef uint64_t[::1] o = out
    cdef Py_ssize_t i
    with nogil:
        for i in range(v.shape[0]):
            o[i] = _mix(k, <uint64_t>v[i])
    return out


def feistel_permute(indices, int64_t n, key):
    cdef uint64_t k = _key(key)
    cdef const int64_t[::1] idx = np.ascontiguousarray(indices, dtype=np.int64)
    cdef Py_ssize_t i, m = idx.shape[0]
    for i in range(m):
        if idx[i] < 0 or idx[i] >= n:
            raise ValueError(f"feistel_permute: indices must lie in [0, {n})")
    out = np.empty(m, dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef Feistel f
    with nogil:
        _feistel_init(&f, <uint64_t>n, k)
        for i in range(m):
            o[i] = <int64_t>_feistel_apply(&f, <uint64_t>idx[i])
    return out


def shard_lookup(cum, Py_ssize_t buckets):
    # Built once per epoch table, in numpy (not a hot loop); see curriculum_np.shard_lookup.
    cum = np.ascontiguousarray(cum, dtype=np.int64)
    cdef int64_t n_total = int(cum[cum.shape[0] - 1])
    cdef int shift = 0
    while (n_total >> shift) >= buckets:
        shift += 1
    n_buckets = (max(n_total - 1, 0) >> shift) + 1
    starts = np.arange(n_buckets, dtype=np.int64) << shift
    table = np.searchsorted(cum, starts, side="right") - 1
    return np.minimum(table, cum.shape[0] - 2).astype(np.int64), shift


def epoch_pointers(int64_t start, int64_t count, int64_t n_total, int64_t block_size,
                   block_key, cum, shard_ids, bint within, within_key,
                   lookup=None, int lookup_shift=0):
    cdef uint64_t bkey = _key(block_key)
    cdef uint64_t wkey = _key(within_key)
    cdef const int64_t[::1] cm = np.ascontiguousarray(cum, dtype=np.int64)
    cdef const int64_t[::1] ids = np.ascontiguousarray(shard_ids, dtype=np.int64)
    cdef const int64_t[::1] lut = np.ascontiguousarray(
        lookup if lookup is not None else np.zeros(0, dtype=np.int64), dtype=np.int64)
    cdef bint use_lut = lut.shape[0] > 0
    cdef Py_ssize_t n_shards = ids.shape[0]
    if start < 0 or count < 0 or start + count > n_total:
        raise ValueError(f"epoch_pointers: range [{start}, {start + count}) outside [0, {n_total})")
    if cm.shape[0] != n_shards + 1 or cm[0] != 0 or cm[n_shards] != n_total:
        raise ValueError("epoch_pointers: cum must be [0, ..., n_total] with one entry per shard + 1")
    if use_lut and (lookup_shift < 0 or lookup_shift > 62
                    or lut.shape[0] != ((n_total - 1) >> lookup_shift) + 1):
        raise ValueError("epoch_pointers: lookup does not match cum (use shard_lookup(cum, ...))")
    out_shard = np.empty(count, dtype=np.int64)
    out_sample = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] osh = out_shard
    cdef int64_t[::1] osa = out_sample
    cdef Feistel fb, fw
    cdef int64_t t, p, blk, base = 0, blen, off
    cdef int64_t cur_blk = -1, cur_w = -1
    cdef Py_ssize_t j = 0, lo, width, half
    with nogil:
        _feistel_init(&fb, 1, 0)  # replaced before first use; initialised to quiet the compiler
        _feistel_init(&fw, 1, 0)
        for t in range(count):
            p = start + t
            if block_size > 1:
                blk = p // block_size
                if blk != cur_blk:
                    base = blk * block_size
                    blen = n_total - base
                    if blen > block_size:
                        blen = block_size
                    _feistel_init(&fb, <uint64_t>blen, _mix(bkey, <uint64_t>blk))
                    cur_blk = blk
                p = base + <int64_t>_feistel_apply(&fb, <uint64_t>(p - base))
            if use_lut:
                # Shuffled positions: the last shard starting at or before the bucket, then a
                # short forward scan; a same-shard test would only mispredict here.
                j = lut[p >> lookup_shift]
                while cm[j + 1] <= p:
                    j += 1
            elif not (cm[j] <= p and p < cm[j + 1]):
                # Consecutive positions mostly stay in the shard of the previous one (tested
                # above). Otherwise: a branch-free search for the last j with cm[j] <= p, which
                # is a non-empty shard since cm[n_shards] = n_total > p.
                lo = 0
                width = n_shards
                while width > 1:
                    half = width >> 1
                    lo = lo + half if cm[lo + half] <= p else lo
                    width -= half
                j = lo
            off = p - cm[j]
            if within:
                if j != cur_w:
                    _feistel_init(&fw, <uint64_t>(cm[j + 1] - cm[j]),
                                  _mix(wkey, <uint64_t>ids[j]))
                    cur_w = j
                off = <int64_t>_feistel_apply(&fw, <uint64_t>off)
            osh[t] = ids[j]
            osa[t] = off
    return out_shard, out_sample


cdef int64_t _check_counts(const int64_t[::1] c) except -1:
    cdef Py_ssize_t i
    cdef int64_t total = 0
    for i in range(c.shape[0]):
        if c[i] < 0:
            raise ValueError("swrr_interleave: counts must be >= 0")
        total += c[i]
    return total


cdef void _swrr(const int64_t[::1] c, int64_t total, int64_t* comp_out, int64_t* active,
                int64_t* weight, int64_t* credit) noexcept nogil:
    cdef Py_ssize_t i, n_act = 0, best
    cdef int64_t t
    for i in range(c.shape[0]):
        if c[i] > 0:
            active[n_act] = i
            weight[n_act] = c[i]
            credit[n_act] = 0
            n_act += 1
    if n_act <= 1:
        for t in range(total):
            comp_out[t] = active[0]
        return
    cdef int64_t top, ci
    for t in range(total):
        # Keep the running maximum in a register: the compare becomes a conditional move.
        credit[0] += weight[0]
        top = credit[0]
        best = 0
        for i in range(1, n_act):
            ci = credit[i] + weight[i]
            credit[i] = ci
            if ci > top:  # strict: ties go to the earlier component
                top = ci
                best = i
        credit[best] -= total
        comp_out[t] = active[best]


def swrr_interleave(counts):
    cdef const int64_t[::1] c = np.ascontiguousarray(counts, dtype=np.int64)
    cdef int64_t total = _check_counts(c)
    out = np.empty(total, dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef Py_ssize_t n = c.shape[0]
    if total == 0:
        return out
    cdef int64_t* scratch = <int64_t*>malloc(3 * n * sizeof(int64_t))
    if scratch == NULL:
        raise MemoryError()
    try:
        with nogil:
            _swrr(c, total, &o[0], scratch, scratch + n, scratch + 2 * n)
    finally:
        free(scratch)
    return out


def chunk_pointers(counts, dataset_ids, shard_ids, sample_idx):
    cdef const int64_t[::1] c = np.ascontiguousarray(counts, dtype=np.int64)
    cdef const int64_t[::1] dsi = np.ascontiguousarray(dataset_ids, dtype=np.int64)
    cdef const int64_t[::1] shi = np.ascontiguousarray(shard_ids, dtype=np.int64)
    cdef const int64_t[::1] sai = np.ascontiguousarray(sample_idx, dtype=np.int64)
    cdef int64_t total = _check_counts(c)
    cdef Py_ssize_t n = c.shape[0], i
    if dsi.shape[0] != n or shi.shape[0] != total or sai.shape[0] != total:
        raise ValueError("chunk_pointers: need len(dataset_ids) == len(counts) and "
                         "len(shard_ids) == len(sample_idx) == sum(counts)")
    out_ds = np.empty(total, dtype=np.int64)
    out_sh = np.empty(total, dtype=np.int64)
    out_sa = np.empty(total, dtype=np.int64)
    cdef int64_t[::1] ods = out_ds
    cdef int64_t[::1] osh = out_sh
    cdef int64_t[::1] osa = out_sa
    if total == 0:
        return out_ds, out_sh, out_sa
    cdef int64_t* scratch = <int64_t*>malloc((4 * n + total) * sizeof(int64_t))
    if scratch == NULL:
        raise MemoryError()
    cdef int64_t* nxt = scratch + 3 * n
    cdef int64_t* comp = scratch + 4 * n
    cdef int64_t t, k, acc = 0
    try:
        with nogil:
            for i in range(n):
                nxt[i] = acc
                acc += c[i]
            _swrr(c, total, comp, scratch, scratch + n, scratch + 2 * n)
            for t in range(total):
                k = comp[t]
                ods[t] = dsi[k]
                osh[t] = shi[nxt[k]]
                osa[t] = sai[nxt[k]]
                nxt[k] += 1
    finally:
        free(scratch)
    return out_ds, out_sh, out_sa
