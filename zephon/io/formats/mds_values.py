"""MDS values decoded one at a time: the rare columns whose values cannot share one Arrow
column (mds.py reads everything else column-wise)."""

from __future__ import annotations

import numpy as np

__all__ = ["ND_DTYPES", "decode_ndarray", "split_image_list"]

ND_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32",
              33: "int32", 34: "float32", 64: "uint64", 65: "int64", 66: "float64"}


def decode_ndarray(data: bytes, dtype: str | None, shape: tuple[int, ...] | None) -> np.ndarray:
    """Streaming's ``ndarray`` encoding: [dtype code: 1 byte, unless fixed] [ndim << 2 | shape
    dtype code: 1 byte, then the shape, unless fixed] [values]. A read-only array, as
    Streaming's ``np.frombuffer`` gives."""
    i = 0
    if dtype is None:
        if data[0] not in ND_DTYPES:
            raise ValueError(f"unknown ndarray dtype code {data[0]}")
        dtype = ND_DTYPES[data[0]]
        i = 1
    if shape is None:
        ndim, code = data[i] >> 2, data[i] & 3
        width = 1 << code
        shape = tuple(int(x) for x in np.frombuffer(data, f"<u{width}", ndim, i + 1))
        i += 1 + ndim * width
    values = np.frombuffer(data, np.dtype(dtype), offset=i)
    return values.reshape(shape)


def split_image_list(data: bytes, encoding: str) -> list[bytes]:
    """The encoded images of a ``list[jpeg]`` / ``list[png]`` ([0: u32] [n: u32] [sizes: u32 *
    n] [images]) or ``jpeg_array`` ([n: u32] [sizes: u32 * n] [images]) value, as bytes."""
    i = 0 if encoding == "jpeg_array" else 4
    n = int(np.frombuffer(data, "<u4", 1, i)[0])
    sizes = np.frombuffer(data, "<u4", n, i + 4).astype(np.int64)
    ends = i + 4 + 4 * n + np.cumsum(sizes)
    if n and int(ends[-1]) != len(data):
        raise ValueError(f"{n} images of {int(sizes.sum())} bytes do not fill the value's "
                         f"{len(data) - i - 4 - 4 * n}")
    return [data[int(e - s):int(e)] for s, e in zip(sizes, ends)]
