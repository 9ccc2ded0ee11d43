"""The coordinator's output: finished units to the training process, as frames in a pool of
shared-memory slots (``prefetch_batches`` of them).

Units are gathered until a frame has ``FRAME_UNITS`` or the coordinator is about to wait, then
written together: consecutive batches of one layout as one merged block (one Arrow stream per
frame rather than per batch: that is most of the per-batch cost), records and lane ends as one
pickled list. Each part's tag lists (lane, state[, rows]) per unit. A frame too large for its
slot is split in two; a single unit too large grows the slot.

``prefetch_batches=0`` (the reference's "no read-ahead"): one slot, one unit per frame, and the
serial stage computes the next unit only once the training process has handed the slot back,
which it does when the loop asks for the unit after (``paced``). The worker stage still works
ahead up to its window, as the reference's stage queues do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from zephon.engine.config import OUTPUT_SLOT_BYTES, EngineConfig
from zephon.engine.observe import metrics
from zephon.engine.process import shm
from zephon.engine.process.frames import FrameWriter, frame_size
from zephon.engine.process.units import unit_parts

FRAME_UNITS = 64  # units per output frame at most: bounds what one held batch pins


class OutputRing:
    def __init__(self, conn, cfg: EngineConfig, wait) -> None:
        self.conn = conn
        self.frame_bytes = min(cfg.slot_bytes, OUTPUT_SLOT_BYTES)
        self.pool = shm.SlotPool(cfg.prefix, "o", cfg.output_slots, self.frame_bytes)
        self.free = list(range(cfg.output_slots))
        self.on_demand = cfg.prefetch == 0
        self.frame_units = 1 if self.on_demand else FRAME_UNITS
        self.unit_bytes = 0  # the largest bytes per unit of a frame so far (``_fit``)
        self.wait = wait
        self.pending: list[tuple[int, object, object]] = []
        self.held_fn = None  # set by the coordinator once its lanes exist
        conn.send(("ready", self.pool.names))

    def release(self, slots) -> None:
        self.free.extend(slots)

    def paced(self, items: Iterable) -> Iterator:
        """``items`` as they are needed: with ``on_demand``, the next one is pulled (computed)
        only when a slot is free to carry it."""
        it = iter(items)
        while True:
            if self.on_demand:
                while not self.free:
                    self.wait()
            item = next(it, None)
            if item is None:
                return
            yield item

    def add(self, lane: int, unit, state) -> None:
        """``unit`` None is a lane's end: it travels for the lane's final state only."""
        self.pending.append((lane, unit, state))
        if len(self.pending) >= self.frame_units:
            self.flush()

    def _fit(self, length: int, units: int) -> None:
        """Units per frame from the sizes seen: frames are cut where they fill a slot, not
        written and found too large (a 64-batch W1 frame of 4.5 MB halved twice down to 2 MiB
        slots was written three times over: most of what the smaller slots had cost)."""
        if self.on_demand or length * 2 < self.frame_bytes and units < FRAME_UNITS:
            return  # a frame flushed early (the coordinator was about to wait) tells little
        self.unit_bytes = max(self.unit_bytes, -(-length // units))
        self.frame_units = max(1, min(FRAME_UNITS, int(0.9 * self.frame_bytes) // self.unit_bytes))

    def flush(self) -> None:
        units, self.pending = self.pending, []
        if units:
            self._write(units)

    def _write(self, units: list) -> None:
        parts = unit_parts(units)
        while not self.free:  # every slot is in flight or held: backpressure
            self.wait()
        slot, grown = self.free.pop(), None
        writer = FrameWriter(self.pool.view(slot))
        while not all(writer.add(*part) for part in parts):
            writer = None  # drop the view of a segment that may be replaced
            if len(units) > 1:  # too big for one slot: two frames
                self.free.append(slot)
                half = len(units) // 2
                self._write(units[:half])
                self._write(units[half:])
                return
            grown = self.pool.grow(slot, frame_size(*parts[0]))
            writer = FrameWriter(self.pool.view(slot))
        delta = metrics.LOCAL.take_delta()
        if self.held_fn is not None:
            delta["held"] = self.held_fn()
        length = writer.finish()
        self._fit(length, len(units))
        self.conn.send(("frame", slot, length, grown, delta))
