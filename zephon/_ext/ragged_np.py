"""Pure-numpy twin of ``ragged.pyx`` (same functions, same results, same errors).

Every function is vectorised: a segment list becomes flat source/destination index arrays
via ``repeat`` + ``arange`` and one fancy-indexed copy. A chunked source (``values`` a list of
arrays, ``chunk`` the array of each segment) is joined first and the segments shifted into it.
"""

from __future__ import annotations

import numpy as np


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64).reshape(-1)


def _joined(values, chunk, src: np.ndarray, lens: np.ndarray,
            dtype=None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(one values array, segment starts in it, mask of segments that reach out of their own
    chunk or None) for a plain or chunked source."""
    if chunk is None:
        values = np.asarray(values)
        return (values if dtype is None else values.astype(dtype, copy=False)), src, None
    chunk = _i64(chunk)
    if len(chunk) != len(src):
        raise ValueError("chunk must give one source array per segment")
    arrays = [np.asarray(v) for v in values]
    if len(chunk) and (chunk.min() < 0 or chunk.max() >= len(arrays)):
        raise ValueError("chunk index out of range of the source arrays")
    if not arrays:
        if len(chunk):
            raise ValueError("segments need at least one source array")
        return np.empty(0, dtype=dtype or np.int32), src, None
    dtype = dtype or arrays[0].dtype
    sizes = np.array([len(a) for a in arrays], dtype=np.int64)
    starts = np.zeros(len(arrays), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    outside = (src < 0) | (src + lens > sizes[chunk])
    joined = np.concatenate([a.astype(dtype, copy=False) for a in arrays])
    return joined, src + starts[chunk], outside


def _within(lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(segment of each element, index of each element inside its segment)."""
    total = int(lens.sum()) if len(lens) else 0
    seg = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
    first = np.zeros(len(lens), dtype=np.int64)
    if len(lens) > 1:
        np.cumsum(lens[:-1], out=first[1:])
    return seg, np.arange(total, dtype=np.int64) - first[seg]


def gather_segments(values, src_starts, lengths, out_row, out_col, out) -> None:
    """Copy ``values[src:src+len]`` to ``out[row, col:col+len]`` for every segment, in place."""
    src, lens, rows, cols = _i64(src_starts), _i64(lengths), _i64(out_row), _i64(out_col)
    if not (len(src) == len(lens) == len(rows) == len(cols)):
        raise ValueError("segment arrays must have equal lengths")
    values = np.asarray(values)
    R, L = out.shape
    bad = (lens < 0) | (src < 0) | (src + lens > len(values)) | (rows < 0) | (rows >= R) \
        | (cols < 0) | (cols + lens > L)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"segment {i} (source {src[i]}+{lens[i]}, destination "
                         f"[{rows[i]}, {cols[i]}]) is out of range")
    seg, within = _within(lens)
    out.reshape(-1)[rows[seg] * L + cols[seg] + within] = values[src[seg] + within]


def pack_rows(values, src_starts, lengths, seg_offsets, pad_value, out, positions=None,
              segment_ids=None, chunk=None) -> np.ndarray:
    """Lay consecutive segments into rows of ``out`` [R, L]; returns padding [R] (see ragged.pyx)."""
    src, lens, segoff = _i64(src_starts), _i64(lengths), _i64(seg_offsets)
    outside = None
    if chunk is not None and len(src) == len(lens):
        values, src, outside = _joined(values, chunk, src, lens, out.dtype)
    R, L = out.shape
    if len(src) != len(lens) or len(segoff) != R + 1:
        raise ValueError("need len(src_starts) == len(lengths) and len(seg_offsets) == R + 1")
    if len(segoff) and (segoff[0] < 0 or segoff[-1] > len(src) or np.any(np.diff(segoff) < 0)):
        raise ValueError("seg_offsets must be non-decreasing within the segment arrays")
    for extra in (positions, segment_ids):
        if extra is not None and extra.shape != out.shape:
            raise ValueError("positions / segment_ids must have the shape of out")
    values = np.asarray(values)
    # only the segments that rows use (a row range may start past segment 0)
    lo, hi = (int(segoff[0]), int(segoff[-1])) if len(segoff) else (0, 0)
    src, lens = src[lo:hi], lens[lo:hi]
    row = np.repeat(np.arange(R, dtype=np.int64), np.diff(segoff))
    excl = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=excl[1:])
    row_first = segoff[:-1] - lo
    col = excl[:-1] - excl[row_first][row]            # first column of each segment
    bad = (lens < 0) | (src < 0) | (src + lens > len(values)) | (col + lens > L)
    if outside is not None:
        bad |= outside[lo:hi]
    if bad.any():
        k = int(np.argmax(bad))
        raise ValueError(f"row {row[k]}: segment {k + lo} (source {src[k]}+{lens[k]}) is out of "
                         f"range or overflows the row length {L}")
    used = excl[segoff[1:] - lo] - excl[row_first]
    out[...] = pad_value
    seg, within = _within(lens)
    dest = row[seg] * L + col[seg] + within
    out.reshape(-1)[dest] = values[src[seg] + within]
    cols = np.arange(L, dtype=np.int64)
    if positions is not None:
        positions[...] = cols[None, :] - used[:, None]      # right for the pad tail
        positions.reshape(-1)[dest] = within
    if segment_ids is not None:
        nonempty = (lens > 0).astype(np.int64)
        ne_excl = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(nonempty, out=ne_excl[1:])
        rank = ne_excl[:-1] - ne_excl[row_first][row]     # among the row's non-empty segments
        per_row = ne_excl[segoff[1:] - lo] - ne_excl[row_first]
        segment_ids[...] = per_row[:, None]
        segment_ids.reshape(-1)[dest] = rank[seg]
    return (L - used).astype(np.int64)


def gather_ragged(values, src_starts, lengths, chunk=None) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``values[src:src+len]`` for every segment: returns (offsets, values).

    With ``chunk``, ``values`` is a list of arrays and segment i reads ``values[chunk[i]]``.
    """
    src, lens = _i64(src_starts), _i64(lengths)
    if len(src) != len(lens):
        raise ValueError("src_starts and lengths must have equal lengths")
    if len(lens) and lens.min() < 0:
        raise ValueError("negative segment length")
    values, src, outside = _joined(values, chunk, src, lens)
    bad = (src < 0) | (src + lens > len(values)) if outside is None else outside
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"segment {i} ({src[i]}+{lens[i]}) is out of range of {len(values)} values")
    offsets = np.zeros(len(src) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    seg, within = _within(lens)
    return offsets, values[src[seg] + within]


def take_ragged(offsets, values, idx) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``idx`` (any order, repeats allowed) of a ragged array: returns (offsets, values)."""
    off, rows = _i64(offsets), _i64(idx)
    n = len(off) - 1
    if len(rows) and (rows.min() < 0 or rows.max() >= n):
        raise ValueError(f"row index out of range for {n} rows")
    return gather_ragged(values, off[rows], off[rows + 1] - off[rows])


def concat_ragged(offsets_list, values_list) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ragged arrays (offsets may start anywhere, e.g. Arrow slices)."""
    if len(offsets_list) != len(values_list):
        raise ValueError("offsets_list and values_list must have equal lengths")
    offs = [_i64(o) for o in offsets_list]
    out_off = [np.zeros(1, dtype=np.int64)]
    parts = []
    base = 0
    for o, v in zip(offs, values_list):
        if len(o) < 1 or (len(o) > 1 and (o[0] < 0 or o[-1] > len(v))):
            raise ValueError("offsets out of range of their values")
        out_off.append(base + o[1:] - o[0])
        base += int(o[-1] - o[0])
        parts.append(np.asarray(v)[o[0]:o[-1]])
    if not parts:
        return out_off[0], np.empty(0, dtype=np.int32)
    return np.concatenate(out_off), np.concatenate(parts)
