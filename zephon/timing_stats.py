"""The summaries ``Pipeline.fetch_timing_snapshot()`` / ``prefetch_timing_snapshot()`` return.

Built from the counters ``zephon/io/fetch_timing.py`` collects in every process of a run. The
fetch operator is the first operator of the worker stage, stage 0. Each call returns new
objects (a snapshot never changes under the caller).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zephon.io.fetch_timing import FIELDS, PREFETCH_FIELDS, Counters


@dataclass
class FetchTimingTotals:
    """Counters of shard reads; a group is the rows of one shard in one fetch micro-batch."""

    samples: int = 0
    groups: int = 0
    group_ns: int = 0
    resolve_ns: int = 0  # making a remote shard local (download into the node cache)
    open_ns: int = 0  # opening readers (not counting resolve)
    read_ns: int = 0
    close_ns: int = 0  # closing readers pushed out of the open-reader cache
    retries: int = 0
    cache_hits: int = 0  # groups served by an already open reader
    cache_misses: int = 0  # groups that had to open their shard
    shard_reopens: int = 0  # opens of a shard this process had open before

    def _per(self, value: int, n: int) -> float:
        return value / n if n else 0.0

    @property
    def avg_group_ns(self) -> float:
        return self._per(self.group_ns, self.groups)

    @property
    def avg_resolve_ns(self) -> float:
        return self._per(self.resolve_ns, self.samples)

    @property
    def avg_open_ns(self) -> float:
        return self._per(self.open_ns, self.samples)

    @property
    def avg_read_ns(self) -> float:
        return self._per(self.read_ns, self.samples)

    @property
    def avg_close_ns(self) -> float:
        return self._per(self.close_ns, self.samples)

    @property
    def cache_hit_ratio(self) -> float:
        return self._per(self.cache_hits, self.cache_hits + self.cache_misses)

    def add(self, row: list[int]) -> None:
        for f, v in zip(FIELDS, row):
            setattr(self, f, getattr(self, f) + int(v))


@dataclass
class FetchStageSummary:
    index: int
    totals: FetchTimingTotals = field(default_factory=FetchTimingTotals)
    shard_totals: dict[tuple[int, int], FetchTimingTotals] = field(default_factory=dict)


@dataclass
class FetchTimingSummary:
    plan_id: str
    reporting_interval_s: float
    tracking_mode: str
    stages: dict[int, FetchStageSummary] = field(default_factory=dict)


@dataclass
class PrefetchTimingTotals:
    batches: int = 0
    samples: int = 0
    prefetch_requests: int = 0
    prefetch_succeeded: int = 0
    prefetch_failed: int = 0

    @property
    def success_rate(self) -> float:
        return self.prefetch_succeeded / self.prefetch_requests if self.prefetch_requests else 0.0


@dataclass
class PrefetchTimingSummary:
    plan_id: str
    reporting_interval_s: float
    tracking_mode: str
    stages: dict[int, PrefetchTimingTotals] = field(default_factory=dict)


def fetch_summary(counters: Counters, plan_id: str, interval: float,
                  mode: str) -> FetchTimingSummary:
    """Per shard and in total; only ``"nodes"`` tracking records (``"stages"``: no stages)."""
    out = FetchTimingSummary(plan_id, interval, mode)
    if mode != "nodes" or not counters.shards:
        return out
    stage = out.stages[0] = FetchStageSummary(0)
    for key, row in sorted(counters.shards.items()):
        t = stage.shard_totals[key] = FetchTimingTotals()
        t.add(row)
        stage.totals.add(row)
    return out


def prefetch_summary(counters: Counters, plan_id: str, interval: float,
                     mode: str) -> PrefetchTimingSummary:
    out = PrefetchTimingSummary(plan_id, interval, mode)
    if mode == "nodes" and any(counters.prefetch):
        out.stages[0] = PrefetchTimingTotals(**dict(zip(PREFETCH_FIELDS, counters.prefetch)))
    return out
