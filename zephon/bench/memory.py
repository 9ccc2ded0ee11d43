"""Memory of a benchmark run: PSS of the process tree (shared pages counted once, so that
worker processes forked from one parent and shared-memory slots are not counted per process),
sampled during the run; the run reports its peak."""

from __future__ import annotations

import time

INTERVAL_S = 2.0  # reading a process's smaps costs milliseconds: sample rarely


class PssSampler:
    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.last = 0.0
        self.peak = 0
        self.cpu_s = 0.0  # this process's CPU spent sampling: not the loader's

    def maybe(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.interval_s:
            self.last = now
            self.sample()

    def sample(self) -> int:
        from zephon.engine.plan.memory import tree_pss

        t0 = time.process_time()
        pss = tree_pss() or 0
        self.cpu_s += time.process_time() - t0
        self.peak = max(self.peak, pss)
        return pss

    def result(self) -> dict:
        self.sample()  # the end of the run too: the shortest runs have one sample besides
        return {"pss_peak_bytes": self.peak} if self.peak else {}
