"""``num_workers="auto"`` (the default): choose the runner and worker count by measuring.

Where a pipeline's time goes decides what runs it fastest. Worker processes pay for every
record they move (the coordinator's ordering and batching, frames through shared memory: a few
microseconds of CPU per record) and take cores from the training loop; they win when the
stateless stage is heavy (tokenizing, Python maps) and lose when it is only Arrow decoding,
which the inline engine already overlaps on read-ahead threads, or when the training loop itself
is busy (reading ``batch.records``, a step on the CPU). On 2 cores the seed's own loop over
Parquet ran 2-3x slower with 2 worker processes than inline.

So the tuner starts with a guess from the plan (fetch/decode only: inline; anything else:
processes on every core), then measures a window of the real stream after the first batch:
the stateless stage's busy time per record (the operators' own counters, from whichever
process ran them; inline, scaled by the share of a core the training thread got, so that
other jobs on the machine do not make a stage look heavier than its CPU), and how much of the wall time the consumer (the caller's loop, between two
batches) kept to itself. It then decides:

- inline, stateless stage heavier than ``heavy_us()`` per record (twice that when it only
  reads and decodes) -> processes;
- processes, stateless stage lighter than half of that -> inline;
- processes on every core while the consumer is busy more than half the time -> one worker
  fewer, so the training process keeps its core.

A switch is then measured in turn, and undone when the new engine delivers less than 90% of
the records per second the old one did (a stage's wall time per record, which the decision
rests on, inflates on a machine shared with other jobs); after that the tuner is settled.

A switch never changes the data: it happens between two batches the caller has received, and
the next engine starts from the lanes' states at exactly that point, as ``restore()`` from a
checkpoint taken there would (the records a stateful operator held are fetched again, and the
operators' counters count the few blocks redone). What was chosen and why is in ``explain()``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

WINDOW_S = 1.0  # wall time measured after the first batch before deciding
MIN_UNITS = 4
REVERT_BELOW = 0.9  # a switch that delivers less than this share of the rate before is undone


def usable_cores() -> int:
    """CPUs this process may run on, counting physical cores where psutil can tell."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        import psutil

        phys = psutil.cpu_count(logical=False)
        logical = psutil.cpu_count(logical=True)
        if phys and logical and phys < logical:  # hyperthreads: count cores, not threads
            n = max(1, n * phys // logical)
    except Exception:  # psutil missing or unable to tell
        pass
    return max(1, n)


def default_workers(cores: int | None = None) -> int:
    """Worker processes that leave the training process a core of its own."""
    n = usable_cores() if cores is None else cores
    return max(1, n - 1)


def heavy_us(cores: int) -> float:
    """Stateless-stage CPU per record above which worker processes beat inline. Calibrated on
    2 cores (fetch of 2 KB Parquet or JSONL records: 3-6 us, inline faster; tokenizing them:
    30-60 us, processes faster); more cores pay back the per-record cost of moving records
    sooner."""
    return 20.0 / max(2, cores)


@dataclass(frozen=True)
class Choice:
    runner: str  # "inline" | "process"
    workers: int
    why: str

    def label(self) -> str:
        return "inline" if self.runner == "inline" else f"{self.runner} x{self.workers}"


class AutoTuner:
    """Decides the engine of one session: ``first()`` before the stream, then ``observe()``
    after every delivered unit until it returns a switch (or settles)."""

    def __init__(self, worker_ops: list, fixed_runner: str | None, cores: int | None = None,
                 window_s: float = WINDOW_S, cpu_clock=time.thread_time_ns) -> None:
        import multiprocessing

        self.cores = usable_cores() if cores is None else cores
        # a DataLoader worker (daemonic) may not start processes
        self.daemonic = multiprocessing.current_process().daemon
        self.fixed_runner = fixed_runner  # "process" when the user chose it: tune the count only
        self.worker_names = {op.op_name for op in worker_ops}
        self.first_op = worker_ops[0].op_name if worker_ops else None
        # GIL-free Arrow/kernel decoding only
        self.light = all(op.traits().cost == "decode" for op in worker_ops)
        self.window_s = window_s
        self.cpu_clock = cpu_clock  # this thread's CPU time, ns
        self.history: list[str] = []
        self.current: Choice | None = None
        self.settled = False
        self._start: tuple | None = None  # (t, consumer_ns, records, busy_ns, records_in)
        self._before: tuple[Choice, float] | None = None  # (engine, rate) before a switch

    def first(self) -> Choice:
        n = self.cores
        if self.fixed_runner is None and (n == 1 or self.daemonic):
            why = ("one core: nothing to run beside the training loop" if n == 1 else
                   "this process is daemonic (a DataLoader worker) and may not start processes")
            choice, self.settled = Choice("inline", 0, why), True
        elif self.fixed_runner is None and self.light:
            choice = Choice("inline", 0, "the stateless stage only reads and decodes, which "
                            "inline overlaps on read-ahead threads")
        else:
            what = "runner='process' chosen" if self.fixed_runner else "the stateless stage " \
                "runs Python or tokenizes"
            choice = Choice("process", n, f"{what}: one worker per core to start")
        self.current = choice
        self.history.append(f"start {choice.label()}: {choice.why}")
        return choice

    def observe(self, now: float, consumer_ns: int, units: int, counters) -> Choice | None:
        """Called after each delivered unit with running totals: monotonic seconds, the
        consumer's time (ns) and units delivered so far; ``counters()`` gathers the session's
        (operator registry, records delivered), called only at the window's ends. Returns the
        engine to switch to, once, when measurement says so."""
        if self.settled:
            return None
        if self._start is None:  # the first unit: start-up is not a rate
            registry, records = counters()
            self._start = (now, consumer_ns, units, records, *self._worker_stage(registry),
                           self.cpu_clock())
            return None
        t0, c0, u0, r0, b0, i0, cpu0 = self._start
        wall = now - t0
        if wall < self.window_s or units - u0 < MIN_UNITS:
            return None
        registry, records = counters()
        if self._before is not None:
            return self._verify((records - r0) / wall, wall)
        self.settled = True
        busy, rin = self._worker_stage(registry)
        per_rec_us = (busy - b0) / 1e3 / max(1, rin - i0)
        if self.current.runner == "inline":
            # the stage ran on this thread: on a machine shared with other jobs its wall time
            # overstates its CPU by the share of a core the thread got
            share = min(1.0, (self.cpu_clock() - cpu0) / 1e9 / wall)
            per_rec_us *= share
        consumer = (consumer_ns - c0) / 1e9 / wall
        rate = (records - r0) / wall
        cur = self.current
        limit = heavy_us(self.cores)
        facts = (f"over {wall:.1f}s: {rate:,.0f} records/s, stateless stage "
                 f"{per_rec_us:.1f} us of CPU/record, consumer busy {consumer:.0%}")
        new = None
        if self.light:  # Arrow decoding: processes rarely pay on few cores (see the docstring)
            limit *= 2
        if cur.runner == "inline" and self.fixed_runner is None and per_rec_us > limit:
            new = Choice("process", default_workers(self.cores) if consumer > 0.5 else
                         self.cores, f"{facts}: the stateless stage is heavier than "
                         f"{limit:.0f} us/record")
        elif cur.runner == "process" and self.fixed_runner is None \
                and per_rec_us < limit / 2:
            new = Choice("inline", 0, f"{facts}: the stateless stage is lighter than "
                         f"{limit / 2:.0f} us/record, not worth moving records between "
                         "processes")
        elif cur.runner == "process" and cur.workers >= 2 and cur.workers >= self.cores \
                and consumer > 0.5:
            new = Choice("process", cur.workers - 1, f"{facts}: the consumer needs its core")
        if new is None:
            self.history.append(f"kept {cur.label()} ({facts})")
            return None
        self.history.append(f"switched to {new.label()}: {new.why}")
        self.current, self._before = new, (cur, rate)
        self.settled, self._start = False, None  # measure the new engine too
        return new

    def _verify(self, rate: float, wall: float) -> Choice | None:
        """After a switch: keep the new engine unless it delivers less than the one before
        (the estimates a switch rests on are only estimates: on a machine shared with other
        jobs a stage's time per record inflates), in which case go back to it. Settled."""
        self.settled = True
        before, before_rate = self._before
        if rate >= REVERT_BELOW * before_rate:
            self.history.append(f"kept {self.current.label()} ({rate:,.0f} records/s over "
                                f"{wall:.1f}s against {before_rate:,.0f} before)")
            return None
        back = Choice(before.runner, before.workers, f"{self.current.label()} delivered "
                      f"{rate:,.0f} records/s over {wall:.1f}s against {before_rate:,.0f}")
        self.history.append(f"switched back to {back.label()}: {back.why}")
        self.current = back
        return back

    def _worker_stage(self, registry) -> tuple[int, int]:
        """(busy ns of the stateless stage's operators, records into its first one)."""
        busy = sum(s.busy_ns for name, s in registry.ops.items() if name in self.worker_names)
        first = registry.ops.get(self.first_op)
        return busy, first.records_in if first is not None else 0

    def describe(self) -> str:
        return "; ".join(self.history)
