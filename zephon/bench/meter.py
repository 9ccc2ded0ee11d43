"""Counting what a loader delivers: records, real tokens, padding, time to the first batch.

Rates are taken over the steady state, from the first batch to the last, because worker start-up
(process spawn, imports, filling a shuffle buffer) is a one-off cost that a short run would
otherwise blow up; the time to the first batch is reported beside them. ``ref_client.py`` keeps
a copy of this logic because it runs inside the reference's virtualenv, where our package is
not importable.
"""

from __future__ import annotations

import time


class Meter:
    """Accumulates one run; ``add`` says when the run has done enough work."""

    def __init__(self, unit: str, limit: int, seconds: float) -> None:
        self.unit, self.limit, self.seconds = unit, limit, seconds
        self.t0 = time.perf_counter()
        self.t_first: float | None = None
        self.records = self.tokens = self.padding = self.batches = 0
        self.first = {"records": 0, "tokens": 0}

    def add(self, records: int, tokens: int = 0, padding: int = 0) -> bool:
        now = time.perf_counter()
        self.records += records
        self.tokens += tokens
        self.padding += padding
        self.batches += 1
        if self.t_first is None:
            self.t_first = now
            self.first = {"records": self.records, "tokens": self.tokens}
        done_work = (self.records if self.unit == "records" else self.tokens) >= self.limit
        return done_work or now - self.t_first >= self.seconds

    def result(self, **extra) -> dict:
        end = time.perf_counter()
        first = (self.t_first or end) - self.t0
        out = {"records": self.records, "tokens": self.tokens, "padding": self.padding,
               "batches": self.batches, "seconds": end - self.t0, "first_batch_s": first,
               "steady_records": self.records - self.first["records"],
               "steady_tokens": self.tokens - self.first["tokens"],
               "steady_seconds": end - (self.t_first or end)}
        out.update(extra)
        return out


def rate(run: dict, unit: str) -> float | None:
    """Units per second of one run: steady state when there was one, else end to end."""
    if "error" in run:
        return None
    if run.get("steady_seconds", 0) > 0 and run.get(f"steady_{unit}", 0) > 0:
        return run[f"steady_{unit}"] / run["steady_seconds"]
    if run.get("seconds"):
        return run.get(unit, 0) / run["seconds"] or None
    return None
