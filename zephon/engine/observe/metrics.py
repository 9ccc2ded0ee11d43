"""Per-operator counters: records and bytes in and out, busy time, calls.

Every process keeps its own registry (``LOCAL``); the process engine ships deltas of the
workers' and the coordinator's registries to the training process with its results, where
``Metrics`` adds them up. Counting costs two clock reads and a few additions per block.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from zephon import accounting
from zephon.block import Block, RowsOf
from zephon.io import fetch_timing


def block_bytes(block: Block | None) -> int:
    """Bytes of a block's payload, as the Arrow buffers it references (a slice counts its
    share of its parent's, rows of a ``RowsOf`` are not sliced to be counted). Arrow's own
    ``nbytes`` walks every buffer of every chunk: 40-60 us for a block of 2 KB texts, more than
    the rest of a batch's bookkeeping; buffer sizes cost under a microsecond."""
    if block is None:
        return 0
    if type(block) is RowsOf:
        parent = block.origin[0]
        n = len(parent)
        return block_bytes(parent) * len(block) // n if n else 0
    payload = block.payload
    if payload is None or isinstance(payload, list):
        return 0  # Python objects: unknown without walking them
    return int(payload.get_total_buffer_size())


@dataclass
class OpStats:
    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    busy_ns: int = 0
    calls: int = 0

    # plain loops over the field names: ``dataclasses.asdict`` deep-copies every value and was
    # the coordinator's largest single cost per worker result (a delta ships with each)
    def as_dict(self) -> dict[str, int]:
        return {f: getattr(self, f) for f in _FIELDS}

    def add_counts(self, counts: dict[str, int]) -> None:
        for f in _FIELDS:
            setattr(self, f, getattr(self, f) + int(counts.get(f, 0)))


_FIELDS = tuple(OpStats.__dataclass_fields__)


@dataclass
class Registry:
    ops: dict[str, OpStats] = field(default_factory=dict)
    wait_ns: int = 0  # serial stage waiting for worker-stage results
    # start-up events: name -> [first, last] ``time.monotonic()`` (one clock for every process
    # of the machine), e.g. "worker_ready" of each worker: when the first and the last was ready
    marks: dict[str, list[float]] = field(default_factory=dict)

    def mark(self, name: str, at: float | None = None) -> None:
        t = time.monotonic() if at is None else at
        m = self.marks.get(name)
        if m is None:
            self.marks[name] = [t, t]
        else:
            m[0], m[1] = min(m[0], t), max(m[1], t)

    def record(self, name: str, block_in: Block | None, block_out: Block | None,
               dt_ns: int) -> None:
        s = self.ops.get(name)
        if s is None:
            s = self.ops[name] = OpStats()
        s.records_in += len(block_in) if block_in is not None else 0
        s.records_out += len(block_out) if block_out is not None else 0
        s.bytes_in += block_bytes(block_in)
        s.bytes_out += block_bytes(block_out)
        s.busy_ns += dt_ns
        s.calls += 1

    def take_delta(self) -> dict[str, Any]:
        """The counts since the last call (what a worker ships), resetting them. Records lost
        under a policy (``accounting``) ride along."""
        out = {"ops": {k: v.as_dict() for k, v in self.ops.items()}, "wait_ns": self.wait_ns}
        losses = accounting.LOCAL.take_delta()
        if losses:
            out["losses"] = losses
        timing = fetch_timing.LOCAL.take_delta()
        if timing:
            out["fetch_timing"] = timing
        if self.marks:
            out["marks"] = self.marks
            self.marks = {}
        self.ops = {}
        self.wait_ns = 0
        return out

    def merge(self, delta: dict[str, Any]) -> None:
        for k, v in delta.get("ops", {}).items():
            self.ops.setdefault(k, OpStats()).add_counts(v)
        self.wait_ns += int(delta.get("wait_ns", 0))
        for name, (first, last) in delta.get("marks", {}).items():
            self.mark(name, first)
            self.mark(name, last)
        accounting.LOCAL.merge(delta.get("losses", ()))  # passed on with this process's delta
        fetch_timing.LOCAL.merge(delta.get("fetch_timing"))


LOCAL = Registry()


def now() -> int:
    return time.perf_counter_ns()


def mark(name: str) -> None:
    """Note a start-up event of this process (shipped with its counters)."""
    LOCAL.mark(name)
