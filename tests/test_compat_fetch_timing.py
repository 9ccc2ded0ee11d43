"""fetch_timing_snapshot() / prefetch_timing_snapshot() (spec 7.6, addendum A.9): figures
measured on the reads a run made, in whichever process made them."""

from __future__ import annotations

import pytest

from zephon import Pipeline, synthetic
from zephon.io import Dataset
from zephon.observability import FetchTimingSummary, PrefetchTimingSummary
from zephon.work import StaticMixtureWorkSource

ROWS, SHARDS = 1200, 3


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("timing")
    synthetic.write_dataset(root, "d", ROWS, n_shards=SHARDS, fmt="parquet", seed=1,
                            mean_words=20)
    return str(root / "d")


def build(path: str, workers: int = 0, tracking: str | None = "nodes",
          prefetch: bool = False) -> Pipeline:
    ws = StaticMixtureWorkSource([Dataset.from_path("d", path)], {"d": 1.0}, chunk_size=256,
                                 seed=0)
    p = Pipeline(ws).options(num_workers=workers, micro_batch_size=128)
    if prefetch:
        p.prefetch(64)
    if tracking is not None:
        p.enable_observability(tracking)
    return p.batch(32, drop_last=False)


def check_totals(summary: FetchTimingSummary) -> None:
    stage = summary.stages[0]
    t = stage.totals
    assert t.samples == ROWS
    assert t.groups >= SHARDS and t.group_ns > 0 and t.read_ns > 0
    assert t.group_ns >= t.read_ns + t.open_ns + t.resolve_ns + t.close_ns
    assert t.avg_group_ns == pytest.approx(t.group_ns / t.groups)
    assert t.avg_read_ns == pytest.approx(t.read_ns / t.samples)
    assert t.cache_hits + t.cache_misses == t.groups
    assert {s for _, s in stage.shard_totals} == set(range(SHARDS))
    assert sum(x.samples for x in stage.shard_totals.values()) == ROWS
    assert sum(x.group_ns for x in stage.shard_totals.values()) == t.group_ns


@pytest.mark.parametrize("workers", [0, 2])
def test_fetch_timing_is_measured_where_the_reads_happen(parquet_dir, workers):
    p = build(parquet_dir, workers)
    assert p.fetch_timing_snapshot() is None  # no run yet
    assert sum(len(b) for b in p) == ROWS
    summary = p.fetch_timing_snapshot()  # still readable after the run
    assert summary.tracking_mode == "nodes" and summary.plan_id
    check_totals(summary)
    if workers:  # every read happened in a worker process; each opened what it read
        assert summary.stages[0].totals.cache_misses >= 1
        assert summary.stages[0].totals.open_ns > 0
    again = p.fetch_timing_snapshot()
    assert again is not summary and again.stages[0].totals == summary.stages[0].totals


def test_two_runs_measure_their_own_reads(parquet_dir):
    p = build(parquet_dir)
    list(p)
    first = p.fetch_timing_snapshot().stages[0].totals
    list(p)
    second = p.fetch_timing_snapshot().stages[0].totals
    assert second.samples == ROWS and second.group_ns != first.group_ns


def test_tracking_modes(parquet_dir):
    off = build(parquet_dir, tracking=None)
    list(off)
    assert off.fetch_timing_snapshot() is None and off.prefetch_timing_snapshot() is None
    stages = build(parquet_dir, tracking="stages")
    list(stages)
    summary = stages.fetch_timing_snapshot()
    assert summary.tracking_mode == "stages" and summary.stages == {}
    p = build(parquet_dir)
    list(p)
    assert p.fetch_timing_snapshot() is not None
    p.options(micro_batch_size=64)  # a change closes the run: nothing to report
    assert p.fetch_timing_snapshot() is None


def test_remote_shards_count_their_download_as_resolve(tmp_path):
    import fsspec

    mem = fsspec.filesystem("memory")
    for s in range(2):
        body = "".join(f'{{"text": "doc {s}-{i}"}}\n' for i in range(50))
        mem.pipe(f"/zephon-timing/ds/part-{s}.jsonl", body.encode())
    try:
        ws = StaticMixtureWorkSource([Dataset.from_path("m", "memory://zephon-timing/ds")],
                                     {"m": 1.0}, chunk_size=20, seed=0)
        p = Pipeline(ws).options(num_workers=0).enable_observability("nodes").batch(10)
        assert sum(len(b) for b in p) == 100
        t = p.fetch_timing_snapshot().stages[0].totals
        assert t.samples == 100 and t.resolve_ns > 0
    finally:
        mem.rm("/zephon-timing", recursive=True)


@pytest.mark.parametrize("workers", [0, 2])
def test_prefetch_timing(parquet_dir, workers):
    plain = build(parquet_dir, workers)
    list(plain)
    empty = plain.prefetch_timing_snapshot()
    assert isinstance(empty, PrefetchTimingSummary) and empty.stages == {}
    p = build(parquet_dir, workers, prefetch=True)
    list(p)
    t = p.prefetch_timing_snapshot().stages[0]
    assert t.samples == ROWS and t.batches >= ROWS // 128
    assert t.prefetch_requests == SHARDS
    assert t.prefetch_succeeded == SHARDS and t.prefetch_failed == 0
    assert t.success_rate == 1.0
