"""Counting what a loader delivers: records, real tokens, padding, time to the first batch.

Rates are steady-state rates: start-up (process spawn, imports, filling a shuffle buffer) is a
one-off cost that a short run would blow up, so it is reported apart as the time to the first
batch. Loaders deliver in bursts (Zephon inline turns one micro-batch of 1,024 records into a
few dozen batches at once; a tokenizing W2 burst takes about half a second here), and a window that starts at a
burst but ends in the middle of one counts work done before it began. So the steady window is
cut at burst starts (see ``steady_window``).

This module imports only the standard library: ``ref_client.py`` loads it by file path inside
the reference's virtualenv, where our package is not importable.
"""

from __future__ import annotations

import time

BURST_GAP = 0.25    # a batch starts a burst when its wait is >= this share of the longest wait
MIN_GAP_S = 0.001   # ... and at least this long (a wait shorter than this is no wait at all)
MIN_BURSTS = 4      # burst starts needed after the first batch for a steady window
SMOOTH_BATCHES = 10  # batches needed to call a stream without bursts smooth


def burst_starts(times: list[float]) -> list[int]:
    """Indices ``i >= 1`` of batches whose wait ``times[i] - times[i-1]`` starts a burst."""
    gaps = [b - a for a, b in zip(times, times[1:])]
    if not gaps:
        return []
    theta = max(MIN_GAP_S, BURST_GAP * max(gaps))
    return [i + 1 for i, g in enumerate(gaps) if g >= theta]


def steady_window(times: list[float], units: list[int]) -> tuple[int, float] | None:
    """(units, seconds) of the steady state, or None when the run cannot tell it yet.

    Smooth stream (the long waits take less than half the time; at least ``SMOOTH_BATCHES``
    batches): the batches after the first, over the time after it. Bursty stream: from the
    second burst start after the first batch (the first burst may still be warm-up, a shuffle
    buffer half full) to the last one, the units delivered in between over the time in between.
    Both ends sit at a burst start, so the window holds whole bursts, made while the loader
    worked inside it, give or take one burst's difference in size. (With workers, results are
    released in sequence order, so a slow unit holds back the ones behind it and they arrive
    together: the window must span many bursts, which is why W2 runs are longer.)
    """
    if len(times) < 2 or times[-1] <= times[0]:
        return None
    s = burst_starts(times)
    waited = sum(times[i] - times[i - 1] for i in s)
    if waited < 0.5 * (times[-1] - times[0]):
        return (sum(units[1:]), times[-1] - times[0]) if len(times) >= SMOOTH_BATCHES else None
    if len(s) < MIN_BURSTS:
        return None
    return sum(units[s[1]:s[-1]]), times[s[-1]] - times[s[1]]


class Meter:
    """Accumulates one run; ``add`` says when the run has done enough work.

    A run ends once ``seconds`` have passed since the first batch and a steady window of at
    least half that exists, or after ``2.5 * seconds`` whatever it has. (A limit on work instead
    of time would end a fast loader inside its first burst, where a burst and a smooth stream
    look alike.)
    """

    def __init__(self, unit: str, seconds: float) -> None:
        self.unit, self.seconds = unit, seconds
        self.t0 = time.perf_counter()
        self.times: list[float] = []
        self.units: list[int] = []
        self.records = self.tokens = self.padding = 0

    def add(self, records: int, tokens: int = 0, padding: int = 0) -> bool:
        now = time.perf_counter()
        self.records += records
        self.tokens += tokens
        self.padding += padding
        self.times.append(now)
        self.units.append(records if self.unit == "records" else tokens)
        steady = now - self.times[0]
        if steady >= 2.5 * self.seconds:
            return True
        if steady < self.seconds:
            return False
        window = steady_window(self.times, self.units)
        return window is not None and window[1] >= self.seconds / 2

    def result(self, **extra) -> dict:
        end = time.perf_counter()
        out = {"records": self.records, "tokens": self.tokens, "padding": self.padding,
               "batches": len(self.times), "seconds": end - self.t0,
               "first_batch_s": (self.times[0] if self.times else end) - self.t0}
        window = steady_window(self.times, self.units)
        if window is None and len(self.times) > 1 and self.times[-1] > self.times[0]:
            # too few bursts to cut at: everything after the first batch, ends not aligned
            window = sum(self.units[1:]), self.times[-1] - self.times[0]
            out["steady_window"] = "unaligned"
        if window is not None:
            out["steady_units"], out["steady_seconds"] = window
        else:  # a single batch: ``rate`` falls back to end to end, start-up included
            out["steady_window"] = "none"
        out.update(extra)
        return out


def rate(run: dict, unit: str) -> float | None:
    """``unit`` ("records" or "tokens") per second of one run: steady state when there was
    one, else end to end (the limits, which have no start-up)."""
    if "error" in run:
        return None
    if run.get("steady_seconds", 0) > 0 and run.get("steady_units", 0) > 0:
        return run["steady_units"] / run["steady_seconds"]
    return run[unit] / run["seconds"] if run.get("seconds") and run.get(unit) else None
