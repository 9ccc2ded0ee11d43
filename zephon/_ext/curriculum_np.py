"""Pure-numpy twin of ``curriculum.pyx``: the curriculum's per-sample kernels.

Same functions, same results (the tests hold the two equal):

- ``hash_mix(key, values)``: the 64-bit integer hash that every seeded decision derives from.
- ``feistel_permute(indices, n, key)``: a keyed bijection of ``[0, n)`` in O(1) memory.
- ``epoch_pointers(...)``: positions of one epoch of a dataset's order -> (shard_id, sample_idx).
- ``swrr_interleave(counts)`` / ``chunk_pointers(...)``: smooth weighted round robin over the
  components of a chunk, and the gather of their pointers into read order.

The permutation is an unbalanced Feistel network over the smallest power-of-two domain that
covers ``n`` (so at most twice ``n``), with cycle walking: values that land outside ``[0, n)``
are encrypted again until they land inside, which keeps the map a bijection of ``[0, n)``.
"""

from __future__ import annotations

import numpy as np

#: Feistel rounds. Part of the data format: changing it changes every shuffled order.
ROUNDS = 6

_U = np.uint64
_GOLDEN = _U(0x9E3779B97F4A7C15)
_M1 = _U(0xBF58476D1CE4E5B9)
_M2 = _U(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def _splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # uint64 arithmetic is meant to wrap
        x = x + _GOLDEN
        x = (x ^ (x >> _U(30))) * _M1
        x = (x ^ (x >> _U(27))) * _M2
    return x ^ (x >> _U(31))


def _mix(key: np.ndarray, x: np.ndarray) -> np.ndarray:
    return _splitmix(key ^ _splitmix(x))


def hash_mix(key: int, values: np.ndarray) -> np.ndarray:
    """``splitmix64(key ^ splitmix64(v))`` for each int64 ``v``, as uint64."""
    v = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    return _mix(np.full(v.shape, int(key) & _MASK64, dtype=np.uint64), v)


def _bit_length(v: np.ndarray) -> np.ndarray:
    bits = np.zeros(v.shape, dtype=np.uint64)
    v = v.copy()
    for k in (32, 16, 8, 4, 2, 1):
        big = v >= (_U(1) << _U(k))
        bits[big] += _U(k)
        v[big] >>= _U(k)
    return bits + (v > 0).astype(np.uint64)


def _feistel(x: np.ndarray, n: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Element-wise keyed permutation: x, n, key are uint64 arrays of one shape, x < n."""
    out = x.copy()
    idx = np.flatnonzero(n > 1)  # a domain of size 0 or 1 has only the identity
    if idx.size == 0:
        return out
    cur, dom = x[idx], n[idx]
    bits = _bit_length(dom - _U(1))
    hi0 = bits // _U(2)
    lo0 = bits - hi0
    k0 = _splitmix(key[idx])
    with np.errstate(over="ignore"):
        rk = [k0 + _U(i + 1) * _GOLDEN for i in range(ROUNDS)]
    one = _U(1)
    while idx.size:
        a, b = hi0, lo0
        for i in range(ROUNDS):
            left = cur >> b
            right = cur & ((one << b) - one)
            f = _splitmix(right ^ rk[i]) & ((one << a) - one)
            cur = (right << a) | (left ^ f)
            a, b = b, a
        inside = cur < dom
        out[idx[inside]] = cur[inside]
        if inside.all():
            break
        keep = ~inside  # cycle walking: encrypt the escapees again
        idx, cur, dom, hi0, lo0 = idx[keep], cur[keep], dom[keep], hi0[keep], lo0[keep]
        rk = [r[keep] for r in rk]
    return out


def feistel_permute(indices: np.ndarray, n: int, key: int) -> np.ndarray:
    """The image of each index in ``[0, n)`` under the permutation keyed by ``key``."""
    idx = np.ascontiguousarray(indices, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"feistel_permute: indices must lie in [0, {n})")
    x = idx.view(np.uint64)
    res = _feistel(x, np.full(x.shape, n, dtype=np.uint64),
                   np.full(x.shape, int(key) & _MASK64, dtype=np.uint64))
    return res.view(np.int64)


def shard_lookup(cum: np.ndarray, buckets: int) -> tuple[np.ndarray, int]:
    """An acceleration table for ``epoch_pointers``: (table, shift).

    ``table[b]`` is the last shard whose range starts at or before position ``b << shift``;
    ``buckets`` is rounded up to a power of two covering ``cum[-1]`` positions.
    """
    cum = np.ascontiguousarray(cum, dtype=np.int64)
    n_total = int(cum[-1])
    shift = 0
    while (n_total >> shift) >= buckets:
        shift += 1
    n_buckets = (max(n_total - 1, 0) >> shift) + 1
    starts = np.arange(n_buckets, dtype=np.int64) << shift
    table = np.searchsorted(cum, starts, side="right") - 1
    return np.minimum(table, cum.shape[0] - 2).astype(np.int64), shift


def epoch_pointers(start: int, count: int, n_total: int, block_size: int, block_key: int,
                   cum: np.ndarray, shard_ids: np.ndarray, within: bool, within_key: int,
                   lookup: np.ndarray | None = None,
                   lookup_shift: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Pointers for positions ``[start, start + count)`` of one epoch of a dataset's order.

    ``shard_ids`` are the shards in visiting order and ``cum`` (length ``len(shard_ids) + 1``)
    their cumulative row counts. With ``block_size > 1`` each block of that many positions is
    permuted (key ``hash_mix(block_key, block)``); with ``within`` the rows of each shard are
    permuted (key ``hash_mix(within_key, shard_id)``). ``lookup``/``lookup_shift`` (from
    ``shard_lookup``) only speed up the shard search; results do not depend on them.
    """
    cum = np.ascontiguousarray(cum, dtype=np.int64)
    shard_ids = np.ascontiguousarray(shard_ids, dtype=np.int64)
    _check_epoch_args(start, count, n_total, cum, shard_ids)
    if lookup is not None and len(lookup) and (
            not 0 <= lookup_shift <= 62 or len(lookup) != ((n_total - 1) >> lookup_shift) + 1):
        raise ValueError("epoch_pointers: lookup does not match cum (use shard_lookup(cum, ...))")
    p = np.arange(start, start + count, dtype=np.int64)
    if block_size > 1 and count:
        blk = p // block_size
        base = blk * block_size
        blen = np.minimum(block_size, n_total - base)
        bkey = hash_mix(block_key, blk)
        p = base + _feistel((p - base).view(np.uint64), blen.view(np.uint64), bkey).view(np.int64)
    j = np.searchsorted(cum, p, side="right") - 1
    off = p - cum[j]
    sid = shard_ids[j]
    if within and count:
        size = (cum[j + 1] - cum[j]).view(np.uint64)
        off = _feistel(off.view(np.uint64), size, hash_mix(within_key, sid)).view(np.int64)
    return sid, off


def _check_epoch_args(start: int, count: int, n_total: int, cum: np.ndarray,
                      shard_ids: np.ndarray) -> None:
    if start < 0 or count < 0 or start + count > n_total:
        raise ValueError(f"epoch_pointers: range [{start}, {start + count}) outside [0, {n_total})")
    if cum.shape[0] != shard_ids.shape[0] + 1 or cum[0] != 0 or cum[-1] != n_total:
        raise ValueError("epoch_pointers: cum must be [0, ..., n_total] with one entry per shard + 1")


def swrr_interleave(counts: np.ndarray) -> np.ndarray:
    """Component index of each position of a chunk under smooth weighted round robin.

    Every step each component with a positive count gains credit equal to its count; the one
    with the most credit (ties: the earlier component) is emitted and pays back the total.
    Over ``sum(counts)`` steps component ``c`` is emitted exactly ``counts[c]`` times.
    """
    c = np.ascontiguousarray(counts, dtype=np.int64)
    if c.size and c.min() < 0:
        raise ValueError("swrr_interleave: counts must be >= 0")
    total = int(c.sum())
    active = [i for i in range(c.size) if c[i] > 0]
    if len(active) <= 1:
        return np.full(total, active[0] if active else 0, dtype=np.int64)
    # Sequential by nature; a plain Python loop is the simplest faithful twin.
    weights = [int(c[i]) for i in active]
    credit = [0] * len(active)
    res = [0] * total
    rng = range(len(active))
    for t in range(total):
        best = 0
        for i in rng:
            credit[i] += weights[i]
            if credit[i] > credit[best]:
                best = i
        credit[best] -= total
        res[t] = active[best]
    return np.asarray(res, dtype=np.int64)


def chunk_pointers(counts: np.ndarray, dataset_ids: np.ndarray, shard_ids: np.ndarray,
                   sample_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Interleave component-major pointers into read order.

    Component ``c`` owns the next ``counts[c]`` entries of ``shard_ids``/``sample_idx`` (in its
    own order) and has dataset id ``dataset_ids[c]``; the result lists every pointer once, in
    the order ``swrr_interleave(counts)`` visits the components.
    """
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    dataset_ids = np.ascontiguousarray(dataset_ids, dtype=np.int64)
    shard_ids = np.ascontiguousarray(shard_ids, dtype=np.int64)
    sample_idx = np.ascontiguousarray(sample_idx, dtype=np.int64)
    total = int(counts.sum()) if counts.size else 0
    if dataset_ids.shape != counts.shape or shard_ids.shape != (total,) or sample_idx.shape != (total,):
        raise ValueError("chunk_pointers: need len(dataset_ids) == len(counts) and "
                         "len(shard_ids) == len(sample_idx) == sum(counts)")
    order = swrr_interleave(counts)
    # The k-th visit of component c reads entry offset[c] + k: a stable sort by component
    # lists the positions of each component in visiting order, component-major.
    src = np.empty(total, dtype=np.int64)
    src[np.argsort(order, kind="stable")] = np.arange(total, dtype=np.int64)
    return dataset_ids[order], shard_ids[src], sample_idx[src]
