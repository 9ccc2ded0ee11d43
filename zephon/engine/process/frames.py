"""Blocks as bytes: written straight into a slot, read back as zero-copy views.

A *frame* is what one descriptor points at: a run of parts (a columnar ``Block`` or a pickled
object) followed by a small header that lists them. Every process boundary uses it: pointer
blocks to a worker, worker-stage results back to the coordinator, finished batches (with their
lane states) to the training process.

A block part is laid out as::

    [16-byte prefix: header length, payload kind, payload length] [header (pickle)]
    [meta arrays and lineage, raw, 64-byte aligned] [payload: Arrow IPC stream | pickle]

Numeric columns are raw numpy bytes, so reading them back is ``root[a:b].view(dtype)``;
the payload table is an Arrow IPC stream, written by Arrow directly into the slot and read
back by ``pa.ipc.open_stream`` over the same memory without a copy. Only object payloads
(the last-resort ``list`` payload of a block, and ``SampleRecord`` units) are pickled.

Every view made by ``read_frame`` keeps ``root`` (the uint8 array the frame was read from)
alive, so a weak reference on ``root`` tells the reader when the slot may be reused.

Finished units are packed into frame parts by ``units.py``; an exception crosses a boundary as
``failures.pack_exception`` packs it.
"""

from __future__ import annotations

import io
import math
import pickle
import struct

import cloudpickle
import numpy as np
import pyarrow as pa

from zephon.block import Block
from zephon.errors import EngineError

ALIGN = 64
MAGIC = b"ZPF1"
_FRAME = struct.Struct("<4sIQQ")  # magic, part count, header offset, header length
_BLOCK = struct.Struct("<IIQ")  # block header length, payload kind, payload length
_NONE, _ARROW, _PICKLE = 0, 1, 2
_LINEAGE = "\0lineage"  # cannot clash with a meta column name


class _Full(Exception):
    """The destination has no room for the part being written."""


def _align(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def _dumps(obj) -> bytes:
    try:
        return pickle.dumps(obj, protocol=5)
    except (pickle.PicklingError, TypeError, AttributeError):
        return cloudpickle.dumps(obj, protocol=5)  # lambdas and local classes in user payloads


def private_copy(src, n: int) -> np.ndarray:
    """The first ``n`` bytes of ``src`` copied into process-private, 64-byte aligned memory."""
    raw = np.empty(n + ALIGN, dtype=np.uint8)
    shift = (-raw.ctypes.data) % ALIGN
    out = raw[shift : shift + n]
    out[:] = np.frombuffer(src, dtype=np.uint8, count=n)
    return out


# -- block parts ------------------------------------------------------------------------------


def _columns(block: Block) -> list[tuple[str, np.ndarray]]:
    cols = [(k, np.ascontiguousarray(v)) for k, v in block.meta.items()]
    cols.append((_LINEAGE, np.ascontiguousarray(block.lineage)))
    for name, a in cols:
        if a.dtype.hasobject:
            raise TypeError(f"block meta column {name!r} holds Python objects")
    return cols


def _block_header(block: Block, cols) -> tuple[bytes, list[int], int]:
    """(header, offset of each column after the header, bytes of all columns)."""
    specs, offsets, rel = [], [], 0
    for name, a in cols:
        specs.append((name, a.dtype.str, a.shape, rel))
        offsets.append(rel)
        rel = _align(rel + a.nbytes)
    hdr = pickle.dumps((len(block), block.is_batch, tuple(sorted(block.sparse)), specs), 5)
    return hdr, offsets, rel


def _write_table(dst: memoryview, off: int, table: pa.Table) -> int:
    sink = pa.FixedSizeBufferWriter(pa.py_buffer(dst[off:]))
    try:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    except OSError as e:  # Arrow's "Write out of bounds"
        raise _Full from e
    return sink.tell()


def _write_block(dst: memoryview, off: int, block: Block) -> int:
    cols = _columns(block)
    hdr, offsets, rel = _block_header(block, cols)
    data = _align(off + _BLOCK.size + len(hdr))
    payload_at = data + rel
    if payload_at > len(dst):
        raise _Full
    dst[off + _BLOCK.size : off + _BLOCK.size + len(hdr)] = hdr
    for (_, a), r in zip(cols, offsets):
        if a.nbytes:
            out = np.frombuffer(dst, dtype=np.uint8, count=a.nbytes, offset=data + r)
            out[:] = a.reshape(-1).view(np.uint8)
    payload = block.payload
    if payload is None:
        kind, plen = _NONE, 0
    elif isinstance(payload, pa.Table):
        kind, plen = _ARROW, _write_table(dst, payload_at, payload)
    else:
        kind, blob = _PICKLE, _dumps(payload)
        plen = len(blob)
        if payload_at + plen > len(dst):
            raise _Full
        dst[payload_at : payload_at + plen] = blob
    _BLOCK.pack_into(dst, off, len(hdr), kind, plen)
    return payload_at + plen


def _block_size(block: Block) -> int:
    cols = _columns(block)
    hdr, _, rel = _block_header(block, cols)
    size = _align(_BLOCK.size + len(hdr)) + rel
    payload = block.payload
    if isinstance(payload, pa.Table):
        sink = pa.MockOutputStream()  # counts the IPC bytes without writing them
        with pa.ipc.new_stream(sink, payload.schema) as writer:
            writer.write_table(payload)
        size += sink.size()
    elif payload is not None:
        size += len(_dumps(payload))
    return size + ALIGN


def _read_block(root: np.ndarray, off: int) -> Block:
    hlen, kind, plen = _BLOCK.unpack_from(root, off)
    start = off + _BLOCK.size
    n, is_batch, sparse, specs = pickle.loads(memoryview(root)[start : start + hlen])
    data = _align(start + hlen)
    arrays, end = {}, data
    for name, dt, shape, r in specs:
        dtype = np.dtype(dt)
        # an ndarray over ``root`` has ``root`` as its base: the view keeps the slot pinned
        arrays[name] = np.ndarray(shape, dtype, buffer=root, offset=data + r)
        end = _align(data + r + math.prod(shape) * dtype.itemsize)
    lineage = arrays.pop(_LINEAGE)
    if kind == _ARROW:
        payload = pa.ipc.open_stream(pa.py_buffer(root[end : end + plen])).read_all()
    elif kind == _PICKLE:
        payload = pickle.loads(memoryview(root)[end : end + plen])
    else:
        payload = None
    return Block(arrays, payload, lineage, frozenset(sparse), is_batch)


# -- frames -----------------------------------------------------------------------------------


def _write_part(dst: memoryview, off: int, kind: str, obj) -> int:
    if kind == "block":
        return _write_block(dst, off, obj)
    blob = _dumps(obj)
    if off + len(blob) > len(dst):
        raise _Full
    dst[off : off + len(blob)] = blob
    return off + len(blob)


class FrameWriter:
    """Appends parts to a frame in ``dst`` until one does not fit; ``finish`` seals it.

    The header is one pickle stream with a shared memo, so what consecutive tags share (the
    lane-state snapshot taken once per pulled block and carried by every unit made from it)
    is written once per frame. Tags are snapshots and never mutated, which makes that safe.
    """

    def __init__(self, dst: memoryview) -> None:
        self.dst = dst
        self.pos = ALIGN
        self.count = 0
        self.header = io.BytesIO()
        self.pickler = pickle.Pickler(self.header, protocol=5)
        self.sealed = False

    def __len__(self) -> int:
        return self.count

    def add(self, kind: str, obj, tag=None) -> bool:
        """Write one part (``kind`` "block" or "pickle"). False when it does not fit; the
        frame then takes no more parts (``finish`` it, or start over in a larger slot)."""
        if self.sealed:
            return False
        start = _align(self.pos)
        try:
            end = _write_part(self.dst, start, kind, obj)
        except _Full:
            self.sealed = True
            return False
        mark = self.header.tell()
        self.pickler.dump((kind, start, tag))
        if _align(end) + self.header.tell() > len(self.dst):
            # the memo now names objects of a part that is not in the frame: no more dumps
            self.header.truncate(mark)
            self.header.seek(mark)
            self.sealed = True
            return False
        self.count += 1
        self.pos = end
        return True

    def finish(self) -> int:
        """Write the header; returns the frame's length in bytes."""
        at = _align(self.pos)
        header = self.header.getbuffer()
        self.dst[at : at + len(header)] = header
        _FRAME.pack_into(self.dst, 0, MAGIC, self.count, at, len(header))
        n = at + len(header)
        del header
        return n


def frame_size(kind: str, obj, tag=None) -> int:
    """Bytes a frame holding just this part needs (to size a slot before writing)."""
    body = _block_size(obj) if kind == "block" else len(_dumps(obj))
    return ALIGN + _align(body) + len(pickle.dumps((kind, 0, tag), 5)) + ALIGN


def write_frame(parts: list[tuple[str, object, object]]) -> np.ndarray:
    """A frame in private memory (tests, and tasks too large for their slot)."""
    size = sum(frame_size(k, o, t) for k, o, t in parts) + ALIGN
    buf = private_copy(bytes(size), size)
    writer = FrameWriter(memoryview(buf))
    for k, o, t in parts:
        if not writer.add(k, o, t):
            raise AssertionError("frame sizing is inconsistent")
    return buf[: writer.finish()]


def read_frame(root: np.ndarray) -> list[tuple[str, object, object]]:
    """[(kind, object, tag)] of a frame; blocks are views into ``root``."""
    magic, count, at, size = _FRAME.unpack_from(root, 0)
    if magic != MAGIC:
        raise EngineError("shared-memory frame is corrupt (bad magic)")
    header = pickle.Unpickler(io.BytesIO(root[at : at + size]))
    mv = memoryview(root)
    out = []
    for _ in range(count):
        kind, start, tag = header.load()
        if kind == "block":
            out.append((kind, _read_block(root, start), tag))
        else:  # bytes after a pickle are ignored by loads
            out.append((kind, pickle.loads(mv[start:]), tag))
    return out
