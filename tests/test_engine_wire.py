"""Frames and slots: blocks survive the trip byte for byte, and reads are views, not copies."""

from __future__ import annotations

import mmap
import os
import pickle
import uuid

import numpy as np
import pyarrow as pa
import pytest

from zephon.block import Block
from zephon.engine.failures import RemoteTraceback, pack_exception, unpack_exception
from zephon.engine.process import shm
from zephon.engine.process.frames import (
    FrameWriter,
    frame_size,
    private_copy,
    read_frame,
    write_frame,
)
from zephon.engine.process.units import unit_parts, units_from_parts
from zephon.ops.map_transform import UserFunctionError
from zephon.types import SampleRecord, records_from_block


def _block(n: int = 5, payload="table") -> Block:
    b = Block.from_pointers(np.zeros(n), np.arange(n) % 2, np.arange(n) * 3, lane_id=1,
                            chunk_id=4, chunk_offset=np.arange(n))
    b.meta["comp_samples"] = np.arange(2 * n, dtype=np.int64).reshape(n, 2)
    b.lineage = np.arange(2 * n, dtype=np.int32).reshape(n, 2)
    if payload == "table":
        t = pa.table({"text": [f"t{i}" * i for i in range(n)],
                      "tokens": [list(range(i)) for i in range(n)],
                      "x": np.arange(n, dtype=np.float32)})
        return Block(b.meta, t, b.lineage, frozenset({"x"}), is_batch=True)
    if payload == "objects":
        return Block(b.meta, [{"a": {i}} for i in range(n)], b.lineage)
    return b


def _same(a: Block, b: Block) -> None:
    assert a.meta.keys() == b.meta.keys()
    for k in a.meta:
        np.testing.assert_array_equal(a.meta[k], b.meta[k])
        assert a.meta[k].dtype == b.meta[k].dtype
    np.testing.assert_array_equal(a.lineage, b.lineage)
    assert (a.sparse, a.is_batch) == (b.sparse, b.is_batch)
    if isinstance(a.payload, pa.Table):
        assert a.payload.equals(b.payload)
        assert a.payload.schema.metadata == b.payload.schema.metadata
    else:
        assert a.payload == b.payload


@pytest.mark.parametrize("payload", ["table", "objects", None])
def test_block_round_trip(payload):
    block = _block(payload=payload)
    ((kind, back, tag),) = read_frame(write_frame([("block", block, ("t", 1))]))
    assert (kind, tag) == ("block", ("t", 1))
    _same(block, back)


def test_sliced_and_empty_blocks():
    block = _block(12).slice(3, 9)  # Arrow slices carry offsets the IPC writer must honour
    empty = _block(4).slice(2, 2)
    frame = write_frame([("block", block, None), ("block", empty, None)])
    (_, a, _), (_, b, _) = read_frame(frame)
    _same(block, a)
    assert len(b) == 0 and b.payload.num_rows == 0


def test_frame_mixes_blocks_and_pickled_units_and_shares_tags():
    recs = records_from_block(_block(3))
    state = {"base": {"position": [1, 2], "ops": [np.arange(4)]}, "skip": 0}
    parts = [("pickle", recs[0], (0, state)), ("block", _block(3), (0, state)),
             ("pickle", recs[1], (1, None))]
    out = read_frame(write_frame(parts))
    assert [k for k, _, _ in out] == ["pickle", "block", "pickle"]
    assert isinstance(out[0][1], SampleRecord) and out[0][1].payload == recs[0].payload
    # one pickle memo per frame: what tags share is written (and rebuilt) once
    assert out[0][2][1] is out[1][2][1]
    np.testing.assert_array_equal(out[1][2][1]["base"]["ops"][0], np.arange(4))


def test_batches_cut_from_one_block_travel_as_its_rows_and_come_back_the_same():
    """Consecutive batches of one pushed block go as that block's rows (one Arrow record
    batch, no concatenation); a batch from elsewhere in the same run falls back to joining."""
    from zephon.ops.batch import BatchLane
    from zephon.types import SampleBatch

    lane = BatchLane(4, drop_last=True)
    first = lane.push(_block(12))  # 3 batches of one parent
    other = lane.push(_block(6))  # 1 batch, another parent; 2 rows stay held
    assert all(b.origin is not None for b in first + other)
    units = [(0, SampleBatch._from_block(b), {"skip": i}) for i, b in enumerate(first + other)]
    parts = unit_parts(units[:3])
    assert len(parts) == 1 and parts[0][1].payload.num_rows == 12
    assert parts[0][1].origin is None and parts[0][1].is_batch
    for chunk in (units[:3], units):
        frame = write_frame(unit_parts(chunk))
        if chunk is units[:3]:  # the contiguous run is one record batch in the stream
            assert read_frame(frame)[0][1].payload.column("text").num_chunks == 1
        back = units_from_parts(read_frame(frame))
        assert [(lane_id, state) for lane_id, _, state in back] == \
            [(lane_id, state) for lane_id, _, state in chunk]
        for (_, got, _), (_, sent, _) in zip(back, chunk):
            _same(sent.block, got.block)


def test_writer_refuses_what_does_not_fit_and_frame_size_is_enough():
    block = _block(50)
    need = frame_size("block", block)
    small = memoryview(bytearray(need // 2))
    w = FrameWriter(small)
    assert not w.add("block", block) and len(w) == 0
    assert not w.add("block", _block(1))  # sealed after a refusal
    roomy = private_copy(bytes(need), need)
    w = FrameWriter(memoryview(roomy))
    assert w.add("block", block)
    n = w.finish()
    assert n <= need
    _same(block, read_frame(roomy[:n])[0][1])


def test_reads_are_views_of_the_slot_and_the_slot_stays_pinned():
    name = f"zephon_test_{uuid.uuid4().hex[:8]}"
    mm = shm.create(name, 1 << 20)
    try:
        w = FrameWriter(memoryview(mm))
        assert w.add("block", _block(20))
        n = w.finish()
        root = np.frombuffer(shm.attach(name), np.uint8, count=n)
        lo, hi = root.ctypes.data, root.ctypes.data + n
        ((_, block, _),) = read_frame(root)
        assert lo <= block.meta["sample_idx"].ctypes.data < hi
        assert block.meta["sample_idx"].base is root
        buf = block.payload.column("tokens").chunk(0).values.buffers()[1]
        assert lo <= buf.address < hi
        import weakref

        fired = []
        weakref.finalize(root, fired.append, True)
        del root
        tokens = block.payload.column("tokens")
        del block
        assert not fired  # an Arrow column still points into the slot
        del tokens, buf
        assert fired
    finally:
        shm.unlink(name)
    assert name not in os.listdir("/dev/shm")


def test_slot_pool_grows_and_peer_unlinks_on_attach():
    prefix = f"zephon_test_{uuid.uuid4().hex[:8]}_"
    pool = shm.SlotPool(prefix, "w0_", 2, 4096)
    try:
        assert {n for n in os.listdir("/dev/shm") if n.startswith(prefix)} == set(pool.names)
        views = shm.SlotViews()
        views.attach_all(pool.names)
        assert not [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]
        pool.view(1)[:5] = b"hello"
        assert bytes(views.map(1)[:5]) == b"hello"
        new = pool.grow(1, 3 * 4096 + 1)
        assert pool.capacity(1) >= 4 * 4096 and new != pool.names[0]
        views.attach(1, new)
        pool.view(1)[-3:] = b"end"
        assert bytes(views.map(1)[-3:]) == b"end"
        assert isinstance(views.map(1), mmap.mmap)
    finally:
        shm.sweep(prefix)
        shm.unlink_created()
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]


def test_exceptions_travel_with_their_remote_traceback():
    def user_fn():
        raise KeyError("missing field")

    try:
        try:
            user_fn()
        except KeyError as e:
            raise UserFunctionError("map_transform[f]", (0, 0, 57), e) from e
    except UserFunctionError as e:
        packed = pack_exception(e)
    back = unpack_exception(pickle.loads(pickle.dumps(packed)))
    assert isinstance(back, UserFunctionError) and back.sample_id == (0, 0, 57)
    assert isinstance(back.__cause__, RemoteTraceback)
    assert "user_fn" in back.__cause__.text and "missing field" in back.__cause__.text

    class Unpicklable(Exception):
        def __init__(self, a, b):
            super().__init__(a)

    try:
        raise Unpicklable("x", 1)
    except Unpicklable as e:
        back = unpack_exception(pack_exception(e))
    assert "Unpicklable: x" in str(back)


def test_a_dying_view_runs_no_python_code():
    """Slots and private buffers come back when their last view dies, noted without running any
    Python code then: a Ctrl-C that arrived inside a Python finalizer was reported as "Exception
    ignored" and lost, and the training loop went on (seen in the Ctrl-C cleanup test)."""
    import sys

    leases, buffers = shm.Leases(), shm.PrivateBuffers(keep=2)
    root = np.zeros(64, dtype=np.uint8)
    leases.lend(root, "slot-3")
    copy = buffers.copy(bytes(100), 100)
    calls: list[str] = []

    def spy(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(spy)
    try:
        del root, copy
    finally:
        sys.setprofile(None)
    assert calls == []
    assert leases.returned() == ["slot-3"] and len(leases) == 0
    again = buffers.copy(bytes(100), 100)  # the dead copy's buffer is reused
    assert len(again) == 100 and sum(len(v) for v in buffers.free.values()) == 0
