"""Record-level accumulators: which records a user operator's ``process_many`` sees together.

They are the reference library's API (under its module path ``zephon.ops.accumulators``), so
operators written for it run unchanged. The engine never drives them itself: the adapter
``zephon.ops.record_accumulator.RecordLane`` turns one into a lane's block-level
``LaneAccumulator``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

from zephon.types import SampleBatch, SampleRecord

__all__ = ["Accumulator", "CountingAccumulator", "PassthroughAccumulator", "ReadyBatch"]

T = TypeVar("T")  # the element type: SampleRecord before ``batch``, SampleBatch after it
ReadyBatch = tuple[list[T], int]  # (elements, nanoseconds the first of them waited)
"""A group an ``Accumulator`` releases: ``(elements, nanoseconds the first of them waited)``."""


class Accumulator(ABC, Generic[T]):
    """Record-level accumulator: decides which records are processed together (per lane).

    Generic in the element type so typed operators can say ``Accumulator[SampleRecord]``."""

    @abstractmethod
    def push_many(self, elems: list[T]) -> list[ReadyBatch]:
        """Take records (of any lanes) and release the groups that are ready.

        Args:
            elems: The records, in stream order.

        Returns:
            Ready groups, each of one lane.
        """

    @abstractmethod
    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch]:
        """Release what is held (at the end of the stream, or of one lane).

        Args:
            reset: Also return the lane(s) to the fresh state.
            lane_id: Only this lane (None: every lane).

        Returns:
            The released groups.
        """

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        """Whether records are held (the reference's default says none; override it when
        yours holds any: the validator checks the answer).

        Args:
            lane_id: Only this lane (None: any lane).

        Returns:
            True when records are held.
        """
        return False

    def on_source_exhausted(self, lane_id: int, component_id: int) -> list[ReadyBatch]:
        """Called once per lane and component when the lane's data has ended, before
        ``flush``: release groups that wait for more of that component (default: none).

        Args:
            lane_id: The lane whose data ended.
            component_id: The component (dataset id) that will send no more records.

        Returns:
            Ready groups, each of one lane.
        """
        return []


class PassthroughAccumulator(Accumulator[T]):
    """Each pushed group is one ready group; nothing is ever held."""

    def push_many(self, elems: list) -> list[ReadyBatch]:
        """The pushed records, as one group.

        Args:
            elems: The records.

        Returns:
            One group (none for no records).
        """
        return [(list(elems), 0)] if elems else []

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch]:
        """Nothing to release.

        Args:
            reset: Ignored.
            lane_id: Ignored.

        Returns:
            An empty list.
        """
        return []

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        """Never holds anything.

        Args:
            lane_id: Ignored.

        Returns:
            False.
        """
        return False


class CountingAccumulator(Accumulator[T]):
    """Groups of at most ``max_batch`` records, buffered per lane (a group never mixes lanes).

    Args:
        max_batch: Records per group (at least 1).
        max_latency_ms: Accepted for the reference's API; groups are released by count only,
            so that they do not depend on timing.
    """

    def __init__(self, max_batch: int, max_latency_ms: float | None = None) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.max_batch = int(max_batch)
        self.max_latency_ms = max_latency_ms
        self._buf: dict[int, list] = {}

    def push_many(self, elems: list) -> list[ReadyBatch]:
        """Buffer records per lane; release each lane's buffer when it reaches ``max_batch``.

        Args:
            elems: The records.

        Returns:
            The full groups.
        """
        out: list[ReadyBatch] = []
        for e in elems:
            lane = _lane_of(e)
            buf = self._buf.setdefault(lane, [])
            buf.append(e)
            if len(buf) >= self.max_batch:
                out.append((buf, 0))
                self._buf[lane] = []
        return out

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch]:
        """Release the partial groups.

        Args:
            reset: The buffers are emptied either way.
            lane_id: Only this lane (None: every lane).

        Returns:
            One group per lane that held records.
        """
        lanes = [lane_id] if lane_id is not None else sorted(self._buf)
        out = [(self._buf.pop(lane), 0) for lane in lanes if self._buf.get(lane)]
        return out

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        """Whether records are buffered.

        Args:
            lane_id: Only this lane (None: any lane).

        Returns:
            True when records are buffered.
        """
        if lane_id is not None:
            return bool(self._buf.get(lane_id))
        return any(self._buf.values())


def _lane_of(elem: Any) -> int:
    if isinstance(elem, SampleRecord):
        return elem.meta.lane_id
    if isinstance(elem, SampleBatch):
        lanes = elem.lane_ids
        return lanes[0] if lanes else 0
    raise TypeError(f"Unsupported element type {type(elem).__name__}: expected SampleRecord")
