"""Counting what a loader delivers: records, real tokens, padding, time to the first batch.

Rates are steady-state rates: start-up (process spawn, imports, filling a shuffle buffer) is a
one-off cost that a short run would blow up, so it is reported apart as the time to the first
batch, and the rate is the units delivered in a window after it over the window's length.
Loaders deliver in bursts (Zephon inline turns a micro-batch of 1,024 records into a few dozen
batches at once; a tokenizing W2 burst takes about half a second here), so the window's ends
matter: it opens on a burst's first batch and closes on another's, right after the wait that
produced it. It then counts the rest of the first burst (made before it opened) and one batch
of the last (made inside it), which balance out when bursts are alike. With workers, batches
they made ahead while the first one was awaited arrive early in the window and are counted
too: short runs flatter a loader with deep queues, which is why W2 runs are longer.

This module imports only the standard library: ``ref_client.py`` loads it by file path inside
the reference's virtualenv, where our package is not importable.
"""

from __future__ import annotations

import time

BURST_GAP = 0.25    # a batch starts a burst when its wait is >= this share of the longest wait
MIN_GAP_S = 0.001   # ... and at least this long (a wait shorter than this is no wait at all)
SMOOTH = 0.5        # a stream whose burst waits fill less than this share of the time is smooth
MIN_BURSTS = 3      # bursts a window needs before a run may end (smooth: MIN_BATCHES batches)
MIN_BATCHES = 10


class Meter:
    """Accumulates one run; ``add`` says when the run has done enough work.

    The window opens at the first batch, or for a bursty stream at the second burst's first
    batch (the first burst is often a stub: a shuffle buffer still filling releases one batch).
    A run ends once ``seconds`` have passed in the window and it holds ``MIN_BURSTS`` bursts, on
    a batch that starts a burst (for a smooth stream: any batch, once there are ``MIN_BATCHES``),
    or after ``2.5 * seconds`` whatever it has. (A limit on work
    instead of time would end a fast loader inside its first burst.)
    """

    def __init__(self, unit: str, seconds: float) -> None:
        self.unit, self.seconds = unit, seconds
        self.t0 = time.perf_counter()
        self.times: list[float] = []
        self.units: list[int] = []
        self.records = self.tokens = self.padding = 0
        self.max_gap = 0.0

    def _theta(self) -> float:
        return max(MIN_GAP_S, BURST_GAP * self.max_gap)

    def _bursty(self) -> bool:
        theta, t = self._theta(), self.times
        waited = sum(b - a for a, b in zip(t[1:], t[2:]) if b - a >= theta)
        return waited >= SMOOTH * (t[-1] - t[1])

    def _start(self) -> int:
        """Index of the batch that opens the window."""
        if len(self.times) < 3 or not self._bursty():
            return 0
        theta, t = self._theta(), self.times
        return next((i for i in range(2, len(t)) if t[i] - t[i - 1] >= theta), 0)

    def add(self, records: int, tokens: int = 0, padding: int = 0) -> bool:
        now = time.perf_counter()
        self.records += records
        self.tokens += tokens
        self.padding += padding
        gap = now - self.times[-1] if self.times else 0.0
        self.times.append(now)
        self.units.append(records if self.unit == "records" else tokens)
        if len(self.times) > 2:  # the wait for the batch after the first is warm-up
            self.max_gap = max(self.max_gap, gap)
        if now - self.times[0] >= 2.5 * self.seconds:
            return True
        if now - self.times[0] < self.seconds:
            return False
        start = self._start()
        if now - self.times[start] < self.seconds:
            return False
        if not self._bursty():
            return len(self.times) - start > MIN_BATCHES
        theta = self._theta()
        bursts = sum(1 for a, b in zip(self.times[start:], self.times[start + 1:]) if b - a >= theta)
        return gap >= theta and bursts >= MIN_BURSTS

    def result(self, **extra) -> dict:
        end = time.perf_counter()
        out = {"records": self.records, "tokens": self.tokens, "padding": self.padding,
               "batches": len(self.times), "seconds": end - self.t0,
               "first_batch_s": (self.times[0] if self.times else end) - self.t0}
        start = self._start()
        if len(self.times) > start + 1 and self.times[-1] > self.times[start]:
            out["steady_units"] = sum(self.units[start + 1:])
            out["steady_seconds"] = self.times[-1] - self.times[start]
        out.update(extra)
        return out


def rate(run: dict, unit: str) -> float | None:
    """``unit`` ("records" or "tokens") per second of one run: in its steady window when it
    had one, else end to end (the limits, which have no start-up)."""
    if "error" in run:
        return None
    if run.get("steady_seconds", 0) > 0 and run.get("steady_units", 0) > 0:
        return run["steady_units"] / run["steady_seconds"]
    return run[unit] / run["seconds"] if run.get("seconds") and run.get(unit) else None
