"""The coordinator's output ring: frames are cut to fit their slot before they are written."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa

from zephon.block import Block
from zephon.engine.config import EngineConfig
from zephon.engine.process import shm
from zephon.engine.process.frames import FrameWriter, read_frame
from zephon.engine.process.output_ring import FRAME_UNITS, OutputRing
from zephon.engine.process.units import units_from_parts
from zephon.ops.batch import BatchLane
from zephon.types import SampleBatch


class _Conn:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, msg) -> None:
        self.sent.append(msg)


def _batches(n_batches: int, rows: int, text_bytes: int) -> list[SampleBatch]:
    n = n_batches * rows
    b = Block.from_pointers(np.zeros(n), np.zeros(n), np.arange(n), lane_id=0, chunk_id=0,
                            chunk_offset=np.arange(n))
    payload = pa.table({"text": [f"{i:08d}" + "x" * text_bytes for i in range(n)]})
    lane = BatchLane(rows, drop_last=False)
    return [SampleBatch._from_block(x) for x in lane.push(Block(b.meta, payload, b.lineage))]


def test_frames_are_cut_to_fit_their_slot_and_are_never_written_twice(monkeypatch):
    """Batches of ~33 KB into 256 KiB slots: the ring learns how many batches a frame holds
    from the first frames and cuts later ones there, instead of writing 64-batch frames into
    the slot and halving them each time they turn out too large (each failed attempt a copy
    of up to a slot's worth of bytes); every batch still arrives once, in order."""
    refused = []
    add = FrameWriter.add

    def counting_add(self, *args, **kw):
        ok = add(self, *args, **kw)
        if not ok:
            refused.append(1)
        return ok

    monkeypatch.setattr(FrameWriter, "add", counting_add)
    slot = 256 << 10
    cfg = EngineConfig(workers=1, deterministic=True, prefetch=4, slots=2, slot_bytes=slot,
                       start_method="spawn", log_level="WARNING", max_retries=0,
                       prefix=f"zephon_test_{uuid.uuid4().hex[:8]}_")
    conn = _Conn()
    got: list[int] = []
    ring = None

    def drain() -> None:  # the training process: read every frame sent, hand its slot back
        for msg in [m for m in conn.sent if m[0] == "frame"]:
            _, i, length, grown, _ = msg
            root = np.frombuffer(ring.pool.view(i), dtype=np.uint8)[:length].copy()
            for _, unit, _ in units_from_parts(read_frame(root)):
                got.extend(unit.block.meta["sample_idx"].tolist())
            ring.release([i])
        conn.sent[:] = [m for m in conn.sent if m[0] != "frame"]

    try:
        ring = OutputRing(conn, cfg, drain)
        batches = _batches(5 * FRAME_UNITS, rows=32, text_bytes=1024)
        for b in batches[:FRAME_UNITS]:
            ring.add(0, b, None)
        first = len(refused)  # the first frame may be halved: nothing is known yet
        assert ring.frame_units < FRAME_UNITS
        for b in batches[FRAME_UNITS:]:
            ring.add(0, b, None)
        ring.flush()
        drain()
    finally:
        shm.unlink_created()
        shm.sweep(cfg.prefix)
    assert len(refused) == first
    assert got == list(range(5 * FRAME_UNITS * 32))
