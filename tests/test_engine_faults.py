"""Faults: dead workers are replaced without changing the stream; errors reach the training
loop with their operator, record and original traceback."""

from __future__ import annotations

import os
import signal
import time

import engine_fakes as F
import numpy as np
import psutil
import pytest
from conftest import shm_entries

from zephon import Pipeline
from zephon.engine import wire
from zephon.engine.lane_plan import LanePlan
from zephon.engine.ownership import Ownership
from zephon.engine.plan import compile_plan
from zephon.engine.process import ProcessEngine
from zephon.engine.source import lane_pointer_blocks
from zephon.engine.worker import WorkerCrashedError
from zephon.ops.base import BaseOp, OpTraits
from zephon.ops.errors import ZephonError
from zephon.ops.fetch import FetchOp
from zephon.ops.map_transform import UserFunctionError
from zephon.options import RuntimeOptions


def ids(units) -> list:
    return [tuple(u.ids) for u in units]


def pipeline(fn, records=600, row_groups=None, **opts) -> Pipeline:
    return (Pipeline(F.make_source(records=records, datasets=1, shards=1, chunk=40, seed=0,
                                   row_group_rows=row_groups))
            .map_transform(fn).batch(10).options(micro_batch_size=20, **opts))


@pytest.mark.parametrize("row_groups", [None, 8], ids=["whole", "row-group-owners"])
def test_worker_killed_mid_block_is_replaced_and_stream_unchanged(tmp_path, row_groups):
    marker = str(tmp_path / "killed")
    want = ids(pipeline(F.add_length, num_workers=0))
    got = ids(pipeline(F.KillOnce(marker, at=333), num_workers=2, row_groups=row_groups))
    assert os.path.exists(marker)  # a worker really died on record 333
    assert got == want


def test_worker_killed_holding_one_part_of_a_split_micro_batch(tmp_path):
    """Two datasets with row groups: micro-batches go out in parts, one per row-group owner
    (ownership.py). The part whose worker dies is redone with the rest of its micro-batch."""
    marker = str(tmp_path / "killed")

    def make(fn, **opts):
        return (Pipeline(F.make_source(records=600, datasets=2, shards=2, chunk=60, seed=3,
                                       row_group_rows=6))
                .map_transform(fn).batch(10).options(micro_batch_size=20, **opts))

    ws = F.make_source(records=600, datasets=2, shards=2, chunk=60, seed=3, row_group_rows=6)
    own = Ownership(ws.datasets, 2)
    assert all(len(own.split(b)) == 2 for b in lane_pointer_blocks(ws, 0, 1, 20))
    want = ids(make(F.add_length, num_workers=0))
    got = ids(make(F.KillOnce(marker, at=233), num_workers=2))
    assert os.path.exists(marker)
    assert got == want


def test_worker_killed_from_outside_is_replaced():
    want = ids(pipeline(F.SlowDown(0.001), records=1200, num_workers=0))
    p = pipeline(F.SlowDown(0.001), records=1200, num_workers=2)
    it = iter(p)
    got = [tuple(next(it).ids)]
    engine = p._runtime.engine
    coordinator = psutil.Process(engine.pids()[0])
    workers = coordinator.children()
    assert len(workers) == 2  # forked by the coordinator itself (no fork server started yet)
    victim = workers[0]
    victim.send_signal(signal.SIGKILL)
    victim.wait(5)
    got += ids(it)
    assert got == want
    assert victim.pid not in engine.pids()


def test_a_block_that_keeps_killing_workers_ends_the_run():
    p = pipeline(F.KillAlways(at=95), num_workers=2, max_worker_retries=1)
    got = []
    with pytest.raises(WorkerCrashedError, match=r"SIGKILL.*\(0, 0, 80\)") as info:
        for b in p:
            got.append(tuple(b.ids))
    assert len(got) == 8  # everything before the bad micro-batch (records 80..99) arrived
    assert "max_worker_retries=1" in str(info.value)


@pytest.mark.parametrize("runner,row_groups", [("process", None), ("threads", None),
                                               ("process", 8)])
def test_exception_at_record_57_reaches_the_loop(runner, row_groups):
    got, inline, errors = [], [], []
    for out, opts in ((got, dict(num_workers=2, runner=runner, row_groups=row_groups)),
                      (inline, dict(num_workers=0))):
        with pytest.raises(UserFunctionError) as info:
            for b in pipeline(F.boom_at_57, **opts):
                out.append(tuple(b.ids))
        errors.append(info.value)
    e = errors[0]
    assert e.op_name == "map_transform[boom_at_57]" and e.sample_id == (0, 0, 57)
    assert "(0, 0, 57)" in str(e) and "cannot handle record 57" in str(e)
    assert got == inline and len(got) == 4  # what precedes record 57's micro-batch arrived
    if runner == "process":
        remote = e.__cause__
        assert isinstance(remote, wire.RemoteTraceback)
        assert 'in boom_at_57\n    raise ValueError' in remote.text
    else:  # same process: the original traceback object itself
        assert any(f.co_name == "boom_at_57" for f in _frames(e.__cause__.__traceback__))


def test_a_split_micro_batch_fails_on_the_record_inline_fails_on():
    """Several bad records in one micro-batch cut into parts by row-group owner: the parts (each
    read in shard order) meet another bad record first, so the block is redone whole and in
    order, and the error names the record the inline engine names."""
    def source():
        return F.make_source(records=600, datasets=2, shards=2, chunk=60, seed=3,
                             row_group_rows=6)

    def first_error(**opts):
        p = (Pipeline(source()).map_transform(F.boom_on_every_fifth).batch(10)
             .options(micro_batch_size=20, **opts))
        with pytest.raises(UserFunctionError) as info:
            list(p)
        return info.value.sample_id

    def bad(meta):  # what boom_on_every_fifth rejects (a fake record's id: shard * 150 + row)
        return (meta["shard_id"] * 150 + meta["sample_idx"]) % 5 == 0

    # the case at hand: the first part, read in shard order, meets another bad record first
    ws = source()
    block = next(b for b in lane_pointer_blocks(ws, 0, 1, 20) if bad(b.meta).any())
    (_, part), *_ = Ownership(ws.datasets, 2).split(block)
    order = np.lexsort((part.meta["shard_id"], part.meta["dataset_id"]))
    in_shard_order = bad(part.meta)[order]
    assert in_shard_order.any()
    assert (part.ids()[int(order[np.argmax(in_shard_order)])]
            != block.ids()[int(np.argmax(bad(block.meta)))])
    assert first_error(num_workers=2) == first_error(num_workers=0)


def _frames(tb):
    while tb is not None:
        yield tb.tb_frame.f_code
        tb = tb.tb_next


def test_exception_in_the_serial_stage_reaches_the_loop():
    p = (Pipeline(F.make_source(records=300, datasets=1, shards=1, chunk=40, seed=0))
         .batch(10).map_batch(F.fail_on_third_batch).options(num_workers=2, micro_batch_size=20))
    got = []
    with pytest.raises(UserFunctionError, match="third batch") as info:
        for b in p:
            got.append(b)
    assert len(got) == 2
    assert "fail_on_third_batch" in info.value.__cause__.text


class _BadSetup(BaseOp):
    name = "bad_setup"

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True)

    def process_many(self, elems: list) -> list:
        return elems

    def setup(self, ctx) -> None:
        raise RuntimeError(f"no tokenizer in worker {ctx.get('worker_id')}")


def test_operator_setup_failure_reaches_the_loop():
    ws = F.make_source(records=100)
    ops = [FetchOp([ws.datasets_by_id[0], ws.datasets_by_id[1]]), _BadSetup()]
    lane_plan = LanePlan(compile_plan(ops), ws, (0,), 1, 20)
    engine = ProcessEngine(lane_plan, 2, RuntimeOptions())
    try:
        with pytest.raises(RuntimeError, match="no tokenizer in worker"):
            list(engine)
    finally:
        engine.close()


def test_coordinator_killed_is_reported_and_cleaned_up():
    p = pipeline(F.SlowDown(0.001), records=1200, num_workers=2)
    it = iter(p)
    next(it)
    engine = p._runtime.engine
    prefix, pids = engine.config.prefix, engine.pids()
    os.kill(pids[0], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(ZephonError, match="coordinator process ended unexpectedly.*SIGKILL"):
        for _ in it:
            pass
    assert time.monotonic() - t0 < 5
    _wait_gone(pids)
    assert not {n for n in shm_entries() if n.startswith(prefix)}


def _wait_gone(pids, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not left:
            return
        time.sleep(0.05)
    raise AssertionError(f"processes still running: {left}")
