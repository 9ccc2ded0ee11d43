"""litData chunk layouts and values decoded one at a time (the reader is litdata.py).

A chunk is ``[n: u32][offsets: u32 * (n + 1)][items]``; an item is the sizes of its PyTree
leaves (u32 each) and then the leaves' bytes. ``optimize(compression="zstd")`` wraps chunks in
one of three ways, each turned back into that plain layout once, into the node cache
(``decode_chunk``): the whole file (``compression_level="chunk"``, litData before 0.2.60),
frames of 256 items (``"batch"``, magic ``LDFZ01``, today's default) or each item on its own
(``"sample"``). Records of flat dicts of strings and numbers are stored by today's litData as
an Arrow IPC file appended to the chunk (magic ``LDARW01``), read as such.

Also here: the PyTree spec (``data_spec``, torch's treespec JSON) and litData's compact
encoding of list and dict leaves (``json`` leaves), both decoded value by value as litData
does.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import numpy as np

__all__ = ["FOOTER_MAGIC", "NUMPY_DTYPES", "TORCH_DTYPES", "decode_chunk", "footer_span",
           "nested_loads", "numpy_leaf", "parse_spec", "unflatten"]

FOOTER_MAGIC = b"LDARW01\0"
_FRAMED_MAGIC = b"LDFZ01\0\0"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PREFIX = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")
# litData's dtype tables (litdata/constants.py), by index; do not reorder
NUMPY_DTYPES = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8,
                                      np.uint16, np.uint32, np.uint64, np.float16, np.float32,
                                      np.float64, np.complex64, np.complex128, bool)]
TORCH_DTYPES = ["float32", "float32", "float64", "float64", "complex64", "complex64",
                "complex128", "complex128", "float16", "float16", "bfloat16", "uint8", "int8",
                "int16", "int16", "int32", "int32", "int64", "int64", "bool", "uint16"]


def footer_span(buf: np.ndarray) -> tuple[int, int] | None:
    """(start, length) of the Arrow IPC file a chunk ends with, or None."""
    if len(buf) < 12 or bytes(buf[-8:]) != FOOTER_MAGIC:
        return None
    length = int(buf[-12:-8].view("<u4")[0])
    start = len(buf) - 12 - length
    return (start, length) if start >= 0 and length > 0 else None


def _zstd():
    import zstandard

    return zstandard.ZstdDecompressor()


def decode_chunk(data: bytes, level: str | None) -> bytes:
    """The plain layout of a chunk as stored (see the module docstring); plain chunks and
    chunks that are only an Arrow footer (litData leaves those unwrapped) as they are."""
    if data[:8] == _FRAMED_MAGIC:
        return _unframe(data)
    if data[:4] == _ZSTD_MAGIC:
        return _zstd().decompressobj().decompress(data)
    if level == "sample" and len(data) >= 8:
        n = int.from_bytes(data[:4], "little")
        offsets = np.frombuffer(data, "<u4", n + 1, 4).astype(np.int64)
        if n and offsets[0] == offsets[-1]:
            return data  # no items: an Arrow footer only
        dctx = _zstd()
        items = [dctx.decompressobj().decompress(data[a:b])
                 for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        return _plain(items)
    return data


def _plain(items: list[bytes]) -> bytes:
    n = len(items)
    header = 4 + 4 * (n + 1)
    sizes = np.fromiter((len(x) for x in items), dtype=np.int64, count=n)
    offsets = (header + np.concatenate(([0], np.cumsum(sizes)))).astype("<u4")
    return b"".join([np.uint32(n).tobytes(), offsets.tobytes(), *items])


def _unframe(data: bytes) -> bytes:
    _, version, _, n, _, n_frames = _PREFIX.unpack_from(data, 0)
    if version != 1:
        raise ValueError(f"framed zstd chunk of version {version}; zephon reads version 1")
    offsets = np.frombuffer(data, "<u4", n + 1, _PREFIX.size).astype(np.int64)
    table = _PREFIX.size + 4 * (n + 1)
    dctx = _zstd()
    body = []
    for i in range(n_frames):
        _, _, off, clen, ulen = _FRAME.unpack_from(data, table + i * _FRAME.size)
        raw = dctx.decompressobj().decompress(data[off:off + clen])
        if len(raw) != ulen:
            raise ValueError(f"frame {i} decompressed to {len(raw)} bytes, not {ulen}")
        body.append(raw)
    joined = b"".join(body)
    if len(joined) != offsets[-1]:
        raise ValueError(f"frames hold {len(joined)} bytes, the offsets say {int(offsets[-1])}")
    header = 4 + 4 * (n + 1)
    return b"".join([np.uint32(n).tobytes(), (offsets + header).astype("<u4").tobytes(),
                     joined])


# -- PyTree spec ---------------------------------------------------------------------------


def parse_spec(text: str) -> Any:
    """torch's treespec JSON -> nested ("dict", keys, children) / ("list"|"tuple", children) /
    None (a leaf); ValueError for node types other than dict, list and tuple."""
    doc = json.loads(text)
    if not (isinstance(doc, list) and len(doc) == 2):
        raise ValueError("data_spec is not a treespec")

    def node(d: dict) -> Any:
        kind = d.get("type")
        children = [node(c) for c in d.get("children_spec", [])]
        if kind is None:
            return None
        if kind in ("builtins.dict", "collections.OrderedDict"):
            return ("dict", json.loads(d["context"]), children)
        if kind in ("builtins.list", "builtins.tuple"):
            return (kind.split(".")[1], children)
        raise ValueError(f"PyTree node type {kind!r} is not read by zephon")
    return node(doc[1])


def flat_keys(spec: Any) -> list[str] | None:
    """The keys of a spec that is one dict of leaves with string keys (the common record),
    else None."""
    if spec and spec[0] == "dict" and all(c is None for c in spec[2]) and \
            all(isinstance(k, str) for k in spec[1]):
        return list(spec[1])
    return None


def unflatten(spec: Any, leaves: list) -> Any:
    it = iter(leaves)

    def build(node: Any) -> Any:
        if node is None:
            return next(it)
        if node[0] == "dict":
            return {k: build(c) for k, c in zip(node[1], node[2])}
        values = [build(c) for c in node[1]]
        return tuple(values) if node[0] == "tuple" else values
    return build(spec)


# -- leaves decoded one value at a time ----------------------------------------------------


def numpy_leaf(data: bytes) -> np.ndarray:
    """litData's ``numpy`` leaf: [dtype index: u32][ndim: u32][shape: u32 * ndim][values],
    a writable copy as litData gives."""
    dtype = NUMPY_DTYPES[int.from_bytes(data[:4], "little")]
    ndim = int.from_bytes(data[4:8], "little")
    shape = np.frombuffer(data, "<u4", ndim, 8).tolist()
    return np.frombuffer(data, dtype, offset=8 + 4 * ndim).reshape(shape).copy()


_U32, _I64, _F64 = struct.Struct("<I"), struct.Struct("<q"), struct.Struct("<d")


def nested_loads(raw: bytes) -> Any:
    """A ``json`` leaf: litData's compact tags, or plain JSON (older chunks)."""
    if not raw or raw[0] > 0x20:
        return json.loads(raw)
    return _at(raw, 0)[0]


def _text(raw: bytes, i: int) -> tuple[str, int]:
    n = _U32.unpack_from(raw, i)[0]
    return raw[i + 4:i + 4 + n].decode("utf-8"), i + 4 + n


def _at(raw: bytes, i: int) -> tuple[Any, int]:
    tag = raw[i]
    if tag in (0, 1, 2, 3, 4, 5, 6):
        n = _U32.unpack_from(raw, i + 1)[0]
        i += 5
    if tag == 0:
        return json.loads(raw[i:i + n]), i + n
    if tag == 1:
        out = []
        for _ in range(n):
            s, i = _text(raw, i)
            out.append(s)
        return out, i
    if tag in (2, 3):
        return np.frombuffer(raw, "<i8" if tag == 2 else "<f8", n, i).tolist(), i + 8 * n
    if tag == 4:
        return [bool(b) for b in raw[i:i + n]], i + n
    if tag == 5:
        d = {}
        for _ in range(n):
            k, i = _text(raw, i)
            d[k], i = _at(raw, i)
        return d, i
    if tag == 6:
        return _records(raw, i, n)
    if tag == 7:
        return _text(raw, i + 1)
    if tag in (8, 9):
        return (_I64 if tag == 8 else _F64).unpack_from(raw, i + 1)[0], i + 9
    if tag == 10:
        return bool(raw[i + 1]), i + 2
    if tag == 11:
        return None, i + 1
    raise ValueError(f"unknown litData json leaf tag {tag}")


def _records(raw: bytes, i: int, n: int) -> tuple[list[dict], int]:
    nkeys = _U32.unpack_from(raw, i)[0]
    i += 4
    keys = []
    for _ in range(nkeys):
        k, i = _text(raw, i)
        keys.append(k)
    rows = []
    for _ in range(n):
        row = {}
        for k in keys:
            kind = raw[i]
            i += 1
            if kind == 0x10:
                row[k] = None
            elif kind == 0x11:
                row[k], i = _text(raw, i)
            elif kind in (0x12, 0x13):
                row[k] = (_I64 if kind == 0x12 else _F64).unpack_from(raw, i)[0]
                i += 8
            elif kind == 0x14:
                row[k] = bool(raw[i])
                i += 1
            else:
                raise ValueError(f"unknown litData record tag {kind}")
        rows.append(row)
    return rows, i


def decoder(level: str | None) -> Any:
    """A node-cache decoder (``decoded_local_copy``) giving a chunk's plain layout."""
    return lambda src: io.BytesIO(decode_chunk(src.read(), level))
