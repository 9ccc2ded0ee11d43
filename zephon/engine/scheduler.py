"""Scheduling: pointer blocks out under global sequence numbers, results back in lane order.

``LaneScheduler`` is what the threads runner, the process engine's coordinator and the Ray
runner share; each supplies only the transport (``free_capacity``, ``send``, ``wait``) and
reports results with ``complete`` (or asks for blocks again with ``resend``).

Order. Every pointer block issued gets a global sequence number, and each lane keeps its
sequence numbers in lane order. A lane's runner pulls its next result only when that one has
arrived, so the serial operators see exactly the inline order whatever the number of workers,
their speed or the queue depths; with ``deterministic=False`` a lane takes whichever of its
results arrived first. Blocks are issued ahead (up to ``window`` outstanding, spread over the
lanes that have the fewest in hand) and the block a lane is waiting for is always issued, so no
lane can starve. A transport may also pull blocks ahead of issuing them (``pull_ahead`` per
lane) to look at them first (``seen``): the coordinator tells row-group owners what is coming.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator

from zephon.engine.failures import Failure
from zephon.engine.lanes.lane import Prepared, pointer_end


class LaneScheduler(ABC):
    """Issues each lane's pointer blocks under global sequence numbers and hands every lane its
    worker-stage results back in lane order. Subclasses supply the transport."""

    def __init__(self, lane_plan, window: int, deterministic: bool, pull_ahead: int = 0) -> None:
        self.lanes = list(lane_plan.lanes)
        self.feeds: dict[int, Iterator | None] = {
            lane: iter(lane_plan.pointer_blocks(lane)) for lane in self.lanes}
        # pointer blocks pulled from a feed but not issued yet: ``seen`` has looked at them
        self.ahead: dict[int, deque] = {lane: deque() for lane in self.lanes}
        self.pull_ahead = pull_ahead  # blocks per lane to pull ahead of issuing them
        self.pending: dict[int, deque] = {lane: deque() for lane in self.lanes}
        self.blocks: dict[int, object] = {}  # seq -> pointer block, until its lane consumes it
        self.results: dict[int, object] = {}
        self.unsent: list[int] = []  # heap: issued (or lost) but not handed to a worker yet
        self.next_seq = 0
        self.window = max(1, window)
        self.deterministic = deterministic

    @abstractmethod
    def free_capacity(self) -> bool:
        """Can a block be handed to a worker right now?"""

    @abstractmethod
    def send(self, seq: int, block) -> None: ...

    @abstractmethod
    def wait(self) -> None:
        """Block until at least one event (a result, a death) has been handled."""

    def complete(self, seq: int, result) -> None:
        if seq in self.blocks:
            self.results[seq] = result

    def resend(self, seqs) -> None:
        for seq in seqs:
            if seq in self.blocks and seq not in self.results:
                heapq.heappush(self.unsent, seq)

    def seen(self, block) -> None:  # noqa: B027 - optional: a transport may ignore it
        """A pointer block has been pulled from its lane's feed; it is issued later."""

    def _pull(self, lane: int):
        feed = self.feeds[lane]
        block = next(feed, None) if feed is not None else None
        if block is None:
            self.feeds[lane] = None
        else:
            self.seen(block)
        return block

    def _pull_ahead(self) -> None:
        for lane in self.lanes:
            ahead = self.ahead[lane]
            while len(ahead) < self.pull_ahead and self.feeds[lane] is not None:
                try:
                    block = self._pull(lane)
                except Exception as e:  # raised when the lane gets there, as without looking
                    self.feeds[lane] = None
                    ahead.append(Failure(e))
                    break
                if block is not None:
                    ahead.append(block)

    def _issue(self, lane: int) -> bool:
        ahead = self.ahead[lane]
        block = ahead.popleft() if ahead else self._pull(lane)
        if isinstance(block, Failure):
            raise block.error
        if block is None:
            return False
        seq = self.next_seq
        self.next_seq += 1
        self.blocks[seq] = block
        self.pending[lane].append(seq)
        heapq.heappush(self.unsent, seq)
        return True

    def _fill(self) -> None:
        while True:
            while self.unsent and self.free_capacity():
                seq = heapq.heappop(self.unsent)
                self.send(seq, self.blocks[seq])
            if len(self.blocks) >= self.window or not self.free_capacity():
                break
            live = [lane for lane in self.lanes
                    if self.ahead[lane] or self.feeds[lane] is not None]
            if not live:
                break
            self._issue(min(live, key=lambda lane: len(self.pending[lane])))
        if self.pull_ahead:
            self._pull_ahead()

    def _ready(self, pend: deque) -> int | None:
        if self.deterministic:
            return pend[0] if pend[0] in self.results else None
        return next((s for s in pend if s in self.results), None)

    def prepared(self, lane: int) -> Iterator[Prepared]:
        pend = self.pending[lane]
        while True:
            if not pend and not self._issue(lane):
                return
            self._fill()
            seq = self._ready(pend)
            while seq is None:
                self.wait()
                self._fill()
                seq = self._ready(pend)
            pend.remove(seq)
            result = self.results.pop(seq)
            block = self.blocks.pop(seq)
            if isinstance(result, Failure):
                raise result.error
            yield Prepared(pointer_end(block), result)
