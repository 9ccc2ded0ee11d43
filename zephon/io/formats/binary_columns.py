"""Arrow columns gathered straight from a memory-mapped binary shard (MDS, litData chunks).

Record-oriented binary formats store each record's fields one after the other; reading a
column of many rows is then a gather of byte spans (``start``, ``end`` per row), done here by
numpy indexing and the ``lineindex`` kernel's ``gather_spans``, never by a Python loop over the
rows. The columns come back as Arrow arrays in the shapes ``zephon.payload_values`` turns into
the values a format's own reader gives (marked numeric columns -> NumPy scalars, numeric lists
-> read-only arrays, fixed-size lists inside -> more dimensions).
"""

from __future__ import annotations

import mmap

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephon._ext import kernel

__all__ = ["binary_column", "fixed_width", "map_file", "numeric_column", "ndarray_column",
           "string_column", "SpanError"]


class SpanError(ValueError):
    """A row whose bytes do not fit its shard (``row``: 0-based position in the read)."""

    def __init__(self, message: str, row: int) -> None:
        super().__init__(message)
        self.row = row


def map_file(path: str) -> np.ndarray:
    """The file's bytes, memory-mapped read-only (an empty array for an empty file)."""
    with open(path, "rb") as f:
        if not f.seek(0, 2):
            return np.empty(0, dtype=np.uint8)
        return np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), dtype=np.uint8)


def fixed_width(buf: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each of ``starts``, as an (n, width) uint8 array (a copy)."""
    if not len(starts):
        return np.empty((0, width), dtype=np.uint8)
    if int(starts.min()) < 0 or int(starts.max()) + width > len(buf):
        bad = int(np.flatnonzero((starts < 0) | (starts + width > len(buf)))[0])
        raise SpanError(f"a {width}-byte field at byte {int(starts[bad])} runs past the end of "
                        f"the shard ({len(buf)} bytes)", bad)
    return buf[starts[:, None] + np.arange(width, dtype=np.int64)]


def _gather(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[pa.Buffer, np.ndarray]:
    """The spans' bytes, concatenated into one Arrow buffer, and their int64 offsets in it."""
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    if len(starts) and (int(starts.min()) < 0 or (ends < starts).any() or
                        int(ends.max()) > len(buf)):
        bad = int(np.flatnonzero((starts < 0) | (ends < starts) | (ends > len(buf)))[0])
        raise SpanError(f"a field spans bytes {int(starts[bad])}..{int(ends[bad])}, outside "
                        f"the shard ({len(buf)} bytes)", bad)
    total = int((ends - starts).sum())
    data = pa.allocate_buffer(total)  # Arrow's pool: aligned for the numeric views below
    _, offsets = kernel("lineindex").gather_spans(buf, starts, ends,
                                                  np.frombuffer(data, dtype=np.uint8))
    return data, np.asarray(offsets, dtype=np.int64)


def binary_column(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    data, offsets = _gather(buf, starts, ends)
    n = len(starts)
    if offsets[-1] > np.iinfo(np.int32).max:
        return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [
            None, pa.py_buffer(offsets), data])
    return pa.BinaryArray.from_buffers(pa.binary(), n, [
        None, pa.py_buffer(offsets.astype(np.int32)), data])


def string_column(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """UTF-8 text; SpanError naming the first row that is not valid UTF-8."""
    raw = binary_column(buf, starts, ends)
    try:
        return pc.cast(raw, pa.large_string() if pa.types.is_large_binary(raw.type)
                       else pa.string())
    except pa.ArrowInvalid:
        for i, value in enumerate(raw.to_pylist()):  # error path only: find the row
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as e:
                raise SpanError(f"text is not valid UTF-8: {e}", i) from None
        raise


def numeric_column(buf: np.ndarray, starts: np.ndarray, dtype: np.dtype) -> pa.Array:
    """One little-endian scalar of ``dtype`` at each of ``starts``."""
    dtype = np.dtype(dtype).newbyteorder("<")
    values = fixed_width(buf, starts, dtype.itemsize).reshape(-1).view(dtype)
    return pa.array(values.astype(dtype.newbyteorder("="), copy=False))


def ndarray_column(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, dtype: np.dtype,
                   inner: tuple[int, ...]) -> pa.Array:
    """Arrays of ``dtype`` whose bytes are the spans, each of shape ``(-1, *inner)``: a list
    column, with one fixed-size list level per inner dimension. SpanError for a span that
    does not hold whole elements."""
    dtype = np.dtype(dtype)
    width = dtype.itemsize * int(np.prod(inner, dtype=np.int64)) if inner else dtype.itemsize
    sizes = ends - starts
    if len(sizes) and (sizes % width).any():
        bad = int(np.flatnonzero(sizes % width)[0])
        raise SpanError(f"{int(sizes[bad])} bytes do not hold whole {dtype} elements of shape "
                        f"{inner}", bad)
    data, offsets = _gather(buf, starts, ends)
    values: pa.Array = pa.Array.from_buffers(pa.from_numpy_dtype(dtype),
                                             int(offsets[-1]) // dtype.itemsize, [None, data])
    for size in reversed(inner):
        values = pa.FixedSizeListArray.from_arrays(values, size)
    outer = offsets // width
    if outer[-1] > np.iinfo(np.int32).max:
        return pa.LargeListArray.from_arrays(pa.array(outer, pa.int64()), values)
    return pa.ListArray.from_arrays(pa.array(outer.astype(np.int32)), values)
