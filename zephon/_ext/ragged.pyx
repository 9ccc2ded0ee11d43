# cython: language_level=3
"""Ragged-array kernels: gather token segments into packed rows, take and concatenate rows.

A ragged array is ``offsets`` (int64, n+1, non-decreasing) plus ``values``; row i is
``values[offsets[i]:offsets[i+1]]``. Token ids are int32; aligned fields (loss masks, weights)
may use any element type of ``elem_t`` (bool arrays travel as uint8). The pure-numpy twin is
``ragged_np``; both raise ValueError on out-of-range segments instead of writing out of bounds.

``pack_rows`` and ``gather_ragged`` also read from a *chunked* source: ``values`` a list of
arrays and ``chunk`` the array each segment reads (its ``src`` counted inside that array). A
table column made of several Arrow chunks is then gathered in one pass, without first being
joined into one array (which would copy every value once more).
"""

import numpy as np

cimport cython
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uintptr_t
from libc.string cimport memcpy

ctypedef fused elem_t:
    int8_t
    uint8_t
    int16_t
    int32_t
    int64_t
    float
    double


def _as_elems(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype == np.bool_ else a


def _i64(a):
    return np.ascontiguousarray(a, dtype=np.int64).reshape(-1)


def _sources(values, chunk, n, dtype=None):
    """(arrays, base addresses, sizes, chunk index per segment or None) of a plain or chunked
    source, every array of ``dtype`` (default: the first one's); ``arrays`` keeps them alive
    while the kernel reads their memory."""
    if chunk is None:
        arrays = [_as_elems(values)]
    else:
        arrays = [_as_elems(v) for v in values]
        chunk = _i64(chunk)
        if len(chunk) != n:
            raise ValueError("chunk must give one source array per segment")
        if len(chunk) and (chunk.min() < 0 or chunk.max() >= len(arrays)):
            raise ValueError("chunk index out of range of the source arrays")
    if dtype is None:
        dtype = arrays[0].dtype if arrays else np.dtype(np.int32)
    arrays = [a if a.dtype == dtype else np.ascontiguousarray(a, dtype=dtype) for a in arrays]
    bases = np.array([a.ctypes.data for a in arrays], dtype=np.uintp)
    sizes = np.array([len(a) for a in arrays], dtype=np.int64)
    return arrays, bases, sizes, chunk



def _gather_segments(const elem_t[::1] values, const int64_t[::1] src, const int64_t[::1] lens,
                     const int64_t[::1] rows, const int64_t[::1] cols, elem_t[:, ::1] out):
    cdef Py_ssize_t i, n = src.shape[0], nv = values.shape[0]
    cdef Py_ssize_t R = out.shape[0], L = out.shape[1]
    cdef int64_t s, ln, r, c
    cdef int bad = 0
    with nogil:
        for i in range(n):
            s = src[i]; ln = lens[i]; r = rows[i]; c = cols[i]
            if ln < 0 or s < 0 or s + ln > nv or r < 0 or r >= R or c < 0 or c + ln > L:
                bad = 1
                break
            if ln:
                memcpy(&out[r, c], &values[s], <size_t>ln * sizeof(elem_t))
    if bad:
        raise ValueError(f"segment {i} (source {s}+{ln}, destination [{r}, {c}]) is out of range")


def gather_segments(values, src_starts, lengths, out_row, out_col, out):
    """Copy ``values[src:src+len]`` to ``out[row, col:col+len]`` for every segment, in place.

    ``out`` is a C-contiguous [R, L] array of the values' dtype; cells no segment covers keep
    their content (pre-fill it with the pad id).
    """
    src, lens, rows, cols = _i64(src_starts), _i64(lengths), _i64(out_row), _i64(out_col)
    if not (len(src) == len(lens) == len(rows) == len(cols)):
        raise ValueError("segment arrays must have equal lengths")
    target = out.view(np.uint8) if out.dtype == np.bool_ else out
    _gather_segments(_as_elems(values), src, lens, rows, cols, target)


def _pack_rows(const uintptr_t[::1] bases, const int64_t[::1] sizes, const int64_t[::1] chunk,
               const int64_t[::1] src, const int64_t[::1] lens,
               const int64_t[::1] seg_offsets, int64_t pad_value, elem_t[:, ::1] out,
               int32_t[:, ::1] positions, int32_t[:, ::1] segment_ids, int64_t[::1] padding):
    cdef Py_ssize_t R = out.shape[0], L = out.shape[1], nv = sizes[0]
    cdef Py_ssize_t r, k, j, col
    cdef int64_t s, ln
    cdef int32_t seg
    cdef elem_t pad = <elem_t>pad_value
    cdef const elem_t* values = <const elem_t*>bases[0]
    cdef bint chunked = chunk is not None
    cdef bint want_pos = positions is not None
    cdef bint want_seg = segment_ids is not None
    cdef int bad = 0
    with nogil:
        for r in range(R):
            col = 0
            seg = 0
            for k in range(seg_offsets[r], seg_offsets[r + 1]):
                s = src[k]; ln = lens[k]
                if chunked:
                    values = <const elem_t*>bases[chunk[k]]
                    nv = sizes[chunk[k]]
                if ln < 0 or s < 0 or s + ln > nv or col + ln > L:
                    bad = 1
                    break
                if ln == 0:
                    continue  # occupies no column, so it is not a segment of the row
                memcpy(&out[r, col], &values[s], <size_t>ln * sizeof(elem_t))
                if want_pos:
                    for j in range(ln):
                        positions[r, col + j] = <int32_t>j
                if want_seg:
                    for j in range(ln):
                        segment_ids[r, col + j] = seg
                col += ln
                seg += 1
            if bad:
                break
            padding[r] = L - col
            # the pad tail is a segment of its own: positions restart at 0 there too, so
            # cu_seqlens derived from position zeros never merges padding into a document
            for j in range(col, L):
                out[r, j] = pad
            if want_pos:
                for j in range(col, L):
                    positions[r, j] = <int32_t>(j - col)
            if want_seg:
                for j in range(col, L):
                    segment_ids[r, j] = seg
    if bad:
        raise ValueError(f"row {r}: segment {k} (source {s}+{ln}) is out of range or overflows "
                         f"the row length {L}")


@cython.wraparound(True)   # Python-level code: negative indices mean the end
def pack_rows(values, src_starts, lengths, seg_offsets, pad_value, out, positions=None,
              segment_ids=None, chunk=None):
    """Lay consecutive segments into rows of ``out`` [R, L] in one pass; returns padding [R].

    Row r receives segments ``seg_offsets[r]:seg_offsets[r+1]`` (each ``values[src:src+len]``)
    left to right from column 0, then ``pad_value`` up to L. Optional int32 [R, L] outputs:
    ``positions`` restart at 0 for every segment and again for the pad tail; ``segment_ids``
    number the non-empty segments of a row 0, 1, ... and give the pad tail the next number.
    With ``chunk``, ``values`` is a list of arrays and segment k reads ``values[chunk[k]]``.
    """
    src, lens, segoff = _i64(src_starts), _i64(lengths), _i64(seg_offsets)
    if len(src) != len(lens) or len(segoff) != out.shape[0] + 1:
        raise ValueError("need len(src_starts) == len(lengths) and len(seg_offsets) == R + 1")
    if len(segoff) and (segoff[0] < 0 or segoff[-1] > len(src) or np.any(np.diff(segoff) < 0)):
        raise ValueError("seg_offsets must be non-decreasing within the segment arrays")
    for extra in (positions, segment_ids):
        if extra is not None and extra.shape != out.shape:
            raise ValueError("positions / segment_ids must have the shape of out")
    padding = np.empty(out.shape[0], dtype=np.int64)
    target = out.view(np.uint8) if out.dtype == np.bool_ else out
    arrays, bases, sizes, chunk = _sources(values, chunk, len(src), target.dtype)
    if not len(bases):
        if len(src):
            raise ValueError("segments need at least one source array")
        bases, sizes = np.zeros(1, dtype=np.uintp), np.zeros(1, dtype=np.int64)
    _pack_rows(bases, sizes, chunk, src, lens, segoff, int(pad_value), target, positions,
               segment_ids, padding)
    del arrays
    return padding


def _gather_ragged(const uintptr_t[::1] bases, const int64_t[::1] sizes,
                   const int64_t[::1] chunk, const int64_t[::1] src, const int64_t[::1] lens,
                   const int64_t[::1] offsets, elem_t[::1] out):
    cdef Py_ssize_t i, n = src.shape[0], nv = sizes[0]
    cdef const elem_t* values = <const elem_t*>bases[0]
    cdef bint chunked = chunk is not None
    cdef int bad = 0
    with nogil:
        for i in range(n):
            if chunked:
                values = <const elem_t*>bases[chunk[i]]
                nv = sizes[chunk[i]]
            if lens[i] < 0 or src[i] < 0 or src[i] + lens[i] > nv:
                bad = 1
                break
            if lens[i]:
                memcpy(&out[offsets[i]], &values[src[i]], <size_t>lens[i] * sizeof(elem_t))
    if bad:
        raise ValueError(f"segment {i} ({src[i]}+{lens[i]}) is out of range of {nv} values")


@cython.wraparound(True)   # Python-level code: negative indices mean the end
def gather_ragged(values, src_starts, lengths, chunk=None):
    """Concatenate ``values[src:src+len]`` for every segment: returns (offsets, values).

    With ``chunk``, ``values`` is a list of arrays and segment i reads ``values[chunk[i]]``
    (the result has the first array's dtype).
    """
    src, lens = _i64(src_starts), _i64(lengths)
    if len(src) != len(lens):
        raise ValueError("src_starts and lengths must have equal lengths")
    if len(lens) and lens.min() < 0:
        raise ValueError("negative segment length")
    offsets = np.zeros(len(src) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    first = values if chunk is None else (values[0] if len(values) else np.empty(0, np.int32))
    is_bool = np.asarray(first).dtype == np.bool_
    arrays, bases, sizes, chunk = _sources(values, chunk, len(src))
    dtype = arrays[0].dtype if arrays else np.dtype(np.int32)
    if not len(bases):
        if len(src):
            raise ValueError("segments need at least one source array")
        bases, sizes = np.zeros(1, dtype=np.uintp), np.zeros(1, dtype=np.int64)
    out = np.empty(int(offsets[-1]), dtype=dtype)
    _gather_ragged(bases, sizes, chunk, src, lens, offsets, out)
    del arrays
    return offsets, (out.view(np.bool_) if is_bool else out)


def take_ragged(offsets, values, idx):
    """Rows ``idx`` (any order, repeats allowed) of a ragged array: returns (offsets, values)."""
    off, rows = _i64(offsets), _i64(idx)
    n = len(off) - 1
    if len(rows) and (rows.min() < 0 or rows.max() >= n):
        raise ValueError(f"row index out of range for {n} rows")
    return gather_ragged(values, off[rows], off[rows + 1] - off[rows])


def _rebase(const int64_t[::1] off, int64_t base, int64_t[::1] out):
    cdef Py_ssize_t i
    cdef int64_t first = off[0]
    with nogil:
        for i in range(1, off.shape[0]):
            out[i - 1] = base + off[i] - first


@cython.wraparound(True)   # Python-level code: negative indices mean the end
def concat_ragged(offsets_list, values_list):
    """Concatenate ragged arrays (offsets may start anywhere, e.g. Arrow slices)."""
    if len(offsets_list) != len(values_list):
        raise ValueError("offsets_list and values_list must have equal lengths")
    offs = [_i64(o) for o in offsets_list]
    n = sum(len(o) - 1 for o in offs)
    out_off = np.zeros(n + 1, dtype=np.int64)
    parts = []
    pos = 1
    for o, v in zip(offs, values_list):
        if len(o) < 1 or (len(o) > 1 and (o[0] < 0 or o[-1] > len(v))):
            raise ValueError("offsets out of range of their values")
        _rebase(o, out_off[pos - 1], out_off[pos:pos + len(o) - 1])
        parts.append(np.asarray(v)[o[0]:o[-1]])
        pos += len(o) - 1
    if not parts:
        return out_off, np.empty(0, dtype=np.int32)
    return out_off, np.concatenate(parts)
