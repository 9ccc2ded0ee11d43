"""``num_workers="auto"`` (the default): choose the runner and worker count by measuring.

The one figure that matters on a training node is whether the training loop ever waits for
data. A training step holds its core (it launches kernels, then synchronizes), so the tuner
never takes that core: worker processes number at most one fewer than the cores while the
caller's loop keeps a core busy, and an inline engine, which can only compute between the
loop's steps, gives way to processes as soon as the loop is seen waiting for it.

The start is a guess from the plan and the machine:

- one core, or a daemonic process (a DataLoader worker): inline, settled;
- a stateless stage that runs Python or tokenizes: worker processes, one per core but the
  training loop's (``default_workers``);
- a stage that only reads and decodes: inline on up to ``LIGHT_INLINE_CORES`` cores (the inline
  engine overlaps Arrow decoding on read-ahead threads; on 2 cores it beat worker processes
  2-3x on Parquet), worker processes on more.

It then measures a window of the real stream after the first batch: the stateless stage's CPU
per record (the operators' own busy time, from whichever processes ran them, over the window or,
when a slow loop left the workers idle in it, over the run; inline, scaled by
the share of a core the training thread got, so that other jobs on the machine do not make a
stage look heavier than its CPU), the share of wall time the caller's loop kept between batches
(``consumer``) and the share it spent waiting for them (``wait``). It decides:

- inline, the loop busy and waiting more than ``WAIT_OK`` of its time -> processes
  (``default_workers``): inline work happens between the loop's steps, never beside them;
- inline, the loop idle, the stage heavier than ``heavy_us()`` per record (twice that when it
  only reads and decodes) -> processes on every core;
- processes, the loop idle, the stage lighter than half of that -> inline (on up to
  ``LIGHT_INLINE_CORES`` cores).

A switch of runner never stalls the stream: the new engine starts beside the running one from
the lanes' states at the unit where the decision was taken (``restore()`` from a checkpoint
taken there would do the same), drops every unit the running engine delivers meanwhile, and
takes over at the first unit it has ready before the running engine (``session.EngineRace``);
a candidate that does not catch up within ``RACE_S`` was not faster, and is dropped. Either way
the stream is the same, unit for unit. Each new engine is measured in turn, up to
``MAX_DECISIONS`` decisions; then the tuner is settled. What was chosen and why is in
``explain()`` and ``metrics_snapshot()["autotune"]``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

WINDOW_S = 1.0  # wall time measured after the first batch (or a switch) before deciding
MIN_UNITS = 4
MIN_STAGE_RECORDS = 256  # fewer through the stage in a window: its cost is read over the run
BUSY = 0.5  # the loop kept at least this share of the wall time: it holds a core
WAIT_OK = 0.02  # a loop that waits less than this share of its time for data is fed
LIGHT_INLINE_CORES = 4  # a decode-only stage starts inline on up to this many cores
RACE_S = 30.0  # a candidate engine that has not caught up by then is dropped
MAX_DECISIONS = 3


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


def tokenizer_threads(workers: int, cores: int | None = None) -> int:
    """Threads each worker process's tokenizer may run: the cores the workers leave the
    training loop, shared out (one per worker when there is a worker per core). A tokenizer
    that parallelises a call over its own threads then uses the cores a smaller pool leaves
    idle, as a DataLoader's workers do."""
    n = usable_cores() if cores is None else cores
    return max(1, round((n - 1) / max(1, workers)))


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


@dataclass(frozen=True)
class Window:
    """What one measured window saw."""

    wall: float  # seconds
    rate: float  # records delivered per second
    stage_us: float  # CPU per record of the stateless stage, wherever it ran
    consumer: float  # share of the wall time the caller's loop kept between batches
    wait: float  # share of the wall time the caller's loop waited for batches

    @property
    def starved(self) -> float:
        """Share of the loop's own time (its work plus its waits) spent waiting for data."""
        return self.wait / max(1e-9, self.wait + self.consumer)

    def facts(self) -> str:
        return (f"over {self.wall:.1f}s: {self.rate:,.0f} records/s, stateless stage "
                f"{self.stage_us:.1f} us of CPU/record, loop busy {self.consumer:.0%}, "
                f"waiting {self.wait:.0%}")


class AutoTuner:
    """Decides the engine of one session: ``first()`` before the stream, then ``observe()``
    after every delivered unit; a returned ``Choice`` is the engine to move to (the session
    races it against the running one), and ``concluded()`` says how that went."""

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
        self.pending: Choice | None = None  # a choice the session is trying (a race)
        self.decisions = 0
        self.last: Window | None = None
        self._start: tuple | None = None

    def first(self) -> Choice:
        n = self.cores
        if self.fixed_runner is None and (n == 1 or self.daemonic):
            why = ("one core: nothing to run beside the training loop" if n == 1 else
                   "this process is daemonic (a DataLoader worker) and may not start processes")
            choice, self.settled = Choice("inline", 0, why), True
        elif self.fixed_runner is None and self.light and n <= LIGHT_INLINE_CORES:
            choice = Choice("inline", 0, "the stateless stage only reads and decodes, which "
                            "inline overlaps on read-ahead threads")
        else:
            what = ("runner='process' chosen" if self.fixed_runner else
                    "the stateless stage only reads and decodes, on many cores" if self.light
                    else "the stateless stage runs Python or tokenizes")
            choice = Choice("process", default_workers(n),
                            f"{what}: one worker per core but the training loop's")
        self.current = choice
        self.history.append(f"start {choice.label()}: {choice.why}")
        return choice

    def restart_window(self) -> None:
        """Measure afresh from the next unit (a new engine took over)."""
        self._start = None

    def observe(self, now: float, consumer_ns: int, wait_ns: int, units: int,
                counters) -> Choice | None:
        """Called after each delivered unit with running totals: monotonic seconds, the
        caller's time between batches and its time waiting for them (ns), units delivered;
        ``counters()`` gathers the session's (operator registry, records delivered), called
        only at the window's ends. Returns the engine to move to, when measurement says so."""
        if self.settled or self.pending is not None:
            return None
        if self._start is None:  # the first unit: start-up is not a rate
            registry, records = counters()
            self._start = (now, consumer_ns, wait_ns, units, records,
                           *self._worker_stage(registry), self.cpu_clock())
            return None
        t0, c0, w0, u0, r0, b0, i0, cpu0 = self._start
        wall = now - t0
        if wall < self.window_s or units - u0 < MIN_UNITS:
            return None
        registry, records = counters()
        busy, rin = self._worker_stage(registry)
        if rin - i0 >= MIN_STAGE_RECORDS:
            stage_us = (busy - b0) / 1e3 / (rin - i0)
        else:  # a loop slower than the stage: the workers idled, their buffers full
            stage_us = busy / 1e3 / max(1, rin)
        if self.current.runner == "inline":
            # the stage ran on this thread: on a machine shared with other jobs its wall time
            # overstates its CPU by the share of a core the thread got
            stage_us *= min(1.0, (self.cpu_clock() - cpu0) / 1e9 / wall)
        w = self.last = Window(wall, (records - r0) / wall, stage_us,
                               (consumer_ns - c0) / 1e9 / wall, (wait_ns - w0) / 1e9 / wall)
        self.decisions += 1
        new = self._decide(w)
        if new is None or self.decisions >= MAX_DECISIONS:
            self.settled = True
        if new is None:
            self.history.append(f"kept {self.current.label()} ({w.facts()})")
            return None
        self.pending = new
        self._start = None
        return new

    def _decide(self, w: Window) -> Choice | None:
        cur, n, free = self.current, self.cores, self.fixed_runner is None
        limit = heavy_us(n) * (2 if self.light else 1)
        busy = w.consumer >= BUSY
        if cur.runner == "inline" and free and n >= 2:
            if busy and w.starved > WAIT_OK:
                return Choice("process", default_workers(n), f"{w.facts()}: the loop holds its "
                              f"core and waited {w.starved:.1%} of its time; inline work runs "
                              "between its steps only")
            if not busy and w.stage_us > limit:
                return Choice("process", n, f"{w.facts()}: the stateless stage is heavier "
                              f"than {limit:.1f} us/record")
            return None
        if cur.runner != "process":
            return None
        if free and not busy and w.stage_us < limit / 2 and n <= LIGHT_INLINE_CORES:
            return Choice("inline", 0, f"{w.facts()}: the stateless stage is lighter than "
                          f"{limit / 2:.1f} us/record, not worth moving records between "
                          "processes")
        return None

    def concluded(self, took_over: bool, facts: str) -> None:
        """The session tried ``pending``: it took over (``True``) or was dropped."""
        choice, self.pending = self.pending, None
        if choice is None:
            return
        if took_over:
            self.history.append(f"switched to {choice.label()}: {choice.why} ({facts})")
            self.current = choice
        else:
            self.history.append(f"stayed {self.current.label()}: {choice.label()} {facts}")
            self.settled = True

    def _worker_stage(self, registry) -> tuple[int, int]:
        """(busy ns of the stateless stage's operators, records into its first one)."""
        busy = sum(s.busy_ns for name, s in registry.ops.items() if name in self.worker_names)
        first = registry.ops.get(self.first_op)
        return busy, first.records_in if first is not None else 0

    def describe(self) -> str:
        return "; ".join(self.history)
