"""The multiprocess engine yields the inline stream: any worker count, queue depth or runner."""

from __future__ import annotations

import mmap
import multiprocessing
import time
import warnings

import engine_fakes as F
import numpy as np
import pytest

from zephon import Pipeline
from zephon.engine.config import EngineConfig
from zephon.options import RuntimeOptions
from zephon.types import SampleBatch


def build(records: bool = False, row_groups: int | None = None, **opts) -> Pipeline:
    p = (Pipeline(F.make_source(records=600, chunk=50, seed=5, row_group_rows=row_groups))
         .map_transform(F.add_length).map_transform(F.drop_sevens))
    if not records:
        p = p.batch(7)
    return p.options(canonical_replicas=2, micro_batch_size=25, **opts)


def signature(unit) -> tuple:
    if isinstance(unit, SampleBatch):
        b = unit.block
        return ("batch", tuple(unit.ids), tuple(unit.lane_ids), tuple(unit.lineage_paths),
                tuple(b.meta["chunk_offset"].tolist()), repr(b.payload_list()))
    m = unit.meta
    return ("record", m.sample_id, m.lane_id, m.chunk_id, m.chunk_offset, m.lineage,
            repr(unit.payload))


_reference: dict[bool, list] = {}


def reference(records: bool = False) -> list:
    if records not in _reference:
        _reference[records] = [signature(u) for u in build(records, num_workers=0)]
    return _reference[records]


CASES = {
    "process-1": dict(num_workers=1),
    "process-2": dict(num_workers=2),
    "process-3": dict(num_workers=3),
    # one slot per worker, one output slot, 4 KiB slots: every block grows its slot
    "process-2-tiny-queues": dict(num_workers=2, shm_slots=1, prefetch_batches=1,
                                  shm_slot_bytes=4096),
    "process-3-deep-queues": dict(num_workers=3, shm_slots=8, prefetch_batches=32),
    "process-2-spawn": dict(num_workers=2, start_method="spawn"),
    # datasets with row groups: micro-batches go out cut by row-group owner (ownership.py)
    "process-2-row-groups": dict(num_workers=2, row_groups=8),
    "process-3-row-groups-tiny-queues": dict(num_workers=3, row_groups=4, shm_slots=1,
                                             prefetch_batches=1),
    "threads-2": dict(num_workers=2, runner="threads"),
    "threads-3-tiny-queues": dict(num_workers=3, runner="threads", shm_slots=1),
    # no read-ahead (the reference's prefetch_batches=0; below 0 acts the same)
    "process-2-no-prefetch": dict(num_workers=2, prefetch_batches=0),
    "process-2-row-groups-no-prefetch": dict(num_workers=2, row_groups=8, prefetch_batches=-1),
    "threads-2-no-prefetch": dict(num_workers=2, runner="threads", prefetch_batches=0),
    "inline-no-prefetch": dict(num_workers=0, prefetch_batches=0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_batches_identical_to_inline(case):
    got = [signature(u) for u in build(**CASES[case])]
    assert len(got) > 40
    assert got == reference()


@pytest.mark.parametrize("case", ["process-2", "process-2-tiny-queues", "threads-2",
                                  "process-2-row-groups", "process-2-no-prefetch"])
def test_records_identical_to_inline(case):
    got = [signature(u) for u in build(records=True, **CASES[case])]
    assert len(got) > 400
    assert got == reference(records=True)


def test_checkpoints_identical_to_inline():
    inline, proc = build(num_workers=0), build(num_workers=2, prefetch_batches=3)
    a_it, b_it = iter(inline), iter(proc)
    for k, a in enumerate(a_it):
        assert signature(a) == signature(next(b_it))
        if k % 9 == 4:  # the lane states shipped with each unit are the delivered position
            assert proc.checkpoint() == inline.checkpoint()
    assert next(b_it, None) is None
    assert proc.checkpoint() == inline.checkpoint()  # lanes' final states too


def test_restore_through_the_process_engine_resumes_the_stream():
    want = reference()
    p = build(num_workers=2)
    it = iter(p)
    head = [signature(next(it)) for _ in range(17)]
    state = p.checkpoint()
    p.close()
    resumed = build(num_workers=3, prefetch_batches=2).restore(state)
    assert head + [signature(u) for u in resumed] == want


def test_batches_are_views_of_shared_memory():
    """With a coordinator process, every batch is a view of the frame it sent. (The training
    process as coordinator slices batches out of the workers' slots: test_engine_direct.py.)"""
    p = build(num_workers=2, coordinator="process")
    seen = 0
    for batch in p:
        arr = batch.block.meta["sample_idx"]
        root = arr.base
        assert isinstance(root.base, memoryview) and isinstance(root.base.obj, mmap.mmap)
        lo, hi = root.ctypes.data, root.ctypes.data + root.nbytes
        col = batch.block.payload.column("score").chunk(0)
        assert lo <= col.buffers()[1].address < hi
        assert np.shares_memory(col.to_numpy(), root)
        seen += 1
    assert seen > 40
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(arr)
    assert t.data_ptr() == arr.ctypes.data  # still valid after the engine closed


def test_no_prefetch_computes_each_batch_when_the_loop_asks(tmp_path):
    """prefetch_batches=0: the serial stage (in the coordinator) makes the next batch only once
    the loop has asked for it; the worker stage may still work ahead."""
    log = tmp_path / "made"

    def made() -> int:
        return len(log.read_text()) if log.exists() else 0

    for prefetch, ahead in ((0, 0), (8, None)):
        log.unlink(missing_ok=True)
        p = build(num_workers=2, prefetch_batches=prefetch).map_batch(F.CountBatches(str(log)))
        it = iter(p)
        got = [signature(next(it)) for _ in range(5)]
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # give the coordinator time to run ahead, if it may
            time.sleep(0.05)
        if ahead is not None:
            assert made() == 5 + ahead
        else:
            assert made() > 5 + 5
        got += [signature(u) for u in it]
        assert len(got) == made() and len(got) > 40
    # and the stream is the one any other setting gives
    assert [signature(b) for b in build(num_workers=0).map_batch(F.CountBatches(str(log)))] == got


def test_kept_batches_stay_intact_with_a_tiny_ring():
    # the user keeps every batch: held slots are capped, later frames are copied, no deadlock
    kept = list(build(num_workers=2, prefetch_batches=2))
    assert [signature(b) for b in kept] == reference()


def test_completion_order_keeps_the_records():
    got = [signature(u) for u in build(records=True, num_workers=3, deterministic=False)]
    assert sorted(got) == sorted(reference(records=True))


def test_several_pipelines_at_once():
    a = build(num_workers=2)
    b = build(records=True, num_workers=1)
    ia, ib = iter(a), iter(b)
    got_a, got_b = [], []
    for x, y in zip(ia, ib):
        got_a.append(signature(x))
        got_b.append(signature(y))
    got_a += [signature(x) for x in ia]
    got_b += [signature(y) for y in ib]
    assert got_a == reference() and got_b == reference(records=True)


def test_daemonic_process_falls_back_to_inline():
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=F.run_in_daemon, args=(q,), daemon=True)
    proc.start()
    warned, runner, n = q.get(timeout=60)
    proc.join(10)
    assert warned and runner == "inline" and n == len(reference())


def test_environment_and_options_precedence(monkeypatch):
    for var, value in {"ZEPHON_SHM_SLOTS": "3", "ZEPHON_SHM_SLOT_BYTES": "1MB",
                       "ZEPHON_PREFETCH_BATCHES": "5", "ZEPHON_START_METHOD": "spawn",
                       "ZEPHON_LOG_LEVEL": "debug"}.items():
        monkeypatch.setenv(var, value)
    cfg = EngineConfig.from_options(RuntimeOptions(), 2)
    assert (cfg.slots, cfg.slot_bytes, cfg.prefetch) == (3, 1 << 20, 5)
    # window: a slot of each worker stays out of it (EngineConfig.window)
    assert (cfg.start_method, cfg.log_level, cfg.window) == ("spawn", "DEBUG", 2 * (3 - 1))
    opts = RuntimeOptions()
    opts.update(shm_slots=2, start_method="forkserver", deterministic=False)
    cfg = EngineConfig.from_options(opts, 2)
    assert (cfg.slots, cfg.start_method, cfg.deterministic) == (2, "forkserver", False)
    opts.update(start_method="fork")
    with pytest.warns(RuntimeWarning, match="unsafe"):
        assert EngineConfig.from_options(opts, 1).start_method == "forkserver"
    opts.update(start_method="threads")
    with pytest.raises(ValueError, match="start_method"):
        EngineConfig.from_options(opts, 1)
    below_zero = RuntimeOptions({"prefetch_batches": -3})  # the reference: no read-ahead, as 0
    cfg = EngineConfig.from_options(below_zero, 1)
    assert (cfg.prefetch, cfg.output_slots) == (0, 1)
    with pytest.raises(ValueError, match=r"options\(shm_slots=\.\.\.\) must be >= 1"):
        opts.update(start_method=None, shm_slots=0)  # refused when given (option_values.py)
    opts.update(start_method=None)
    opts.explicit["shm_slots"] = 0  # set past options(): the engine still refuses it
    with pytest.raises(ValueError, match="slots"):
        EngineConfig.from_options(opts, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EngineConfig.from_options(RuntimeOptions(), 1)


def test_runner_from_the_environment(monkeypatch):
    from zephon.engine.session import engine_kind

    p = build().options(num_workers=2)
    assert engine_kind(p._options) == ("process", 2)
    monkeypatch.setenv("ZEPHON_RUNNER", "Threads")
    assert engine_kind(p._options) == ("threads", 2)
    assert "runner='threads' (environment)" in p.explain()
    monkeypatch.setenv("ZEPHON_RUNNER", "inline")
    assert engine_kind(p._options) == ("inline", 0)
    assert engine_kind(build().options(num_workers=2, runner="process")._options) == ("process", 2)
    monkeypatch.setenv("ZEPHON_RUNNER", "Ray")
    assert engine_kind(p._options) == ("ray", 0)  # 0: as many actors as the cluster's CPUs allow
    monkeypatch.setenv("ZEPHON_RUNNER", "dask")
    with pytest.raises(ValueError, match="ZEPHON_RUNNER='dask'.*process, threads, inline, ray"):
        engine_kind(p._options)
