"""Faults: dead workers are replaced without changing the stream; errors reach the training
loop with their operator, record and original traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import engine_fakes as F
import numpy as np
import psutil
import pytest
from conftest import shm_entries

from zephon import Pipeline
from zephon.engine.failures import RemoteTraceback
from zephon.engine.lanes.lane_plan import LanePlan
from zephon.engine.lanes.pointer_blocks import lane_pointer_blocks
from zephon.engine.plan.stages import compile_plan
from zephon.engine.process.engine import ProcessEngine
from zephon.engine.process.ownership import Ownership
from zephon.errors import WorkerCrashedError
from zephon.ops.base import BaseOp, OpTraits
from zephon.ops.errors import ZephonError
from zephon.ops.fetch import FetchOp
from zephon.ops.map_transform import UserFunctionError
from zephon.options import RuntimeOptions

ROOT = str(Path(__file__).resolve().parent.parent)


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


@pytest.mark.parametrize("coordinator", ["process", "training"])
def test_worker_killed_from_outside_is_replaced(coordinator):
    want = ids(pipeline(F.SlowDown(0.001), records=1200, num_workers=0))
    p = pipeline(F.SlowDown(0.001), records=1200, num_workers=2, coordinator=coordinator)
    it = iter(p)
    got = [tuple(next(it).ids)]
    engine = p._runtime.engine
    workers = [psutil.Process(pid) for pid in engine.processes()["workers"]]
    assert len(workers) == 2
    if coordinator == "process":  # forked by the coordinator itself (no fork server yet)
        assert psutil.Process(engine.pids()[0]).children() == workers
    victim = workers[0]
    victim.send_signal(signal.SIGKILL)
    victim.wait(5)
    got += ids(it)
    assert got == want
    assert victim.pid not in engine.pids()


def _wait_until(condition, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def test_fork_server_killed_its_workers_run_on_and_a_new_one_starts_the_next():
    """The coordinator's fork server (started for the first replacement worker) is killed: the
    worker it forked runs on (its sentinel fires, yet it is alive), the next replacement comes
    from a new fork server, and the stream is unchanged. Processes say what they are."""
    want = ids(pipeline(F.SlowDown(0.001), records=1200, num_workers=0))
    p = pipeline(F.SlowDown(0.001), records=1200, num_workers=2, prefetch_batches=1,
                 coordinator="process")
    it = iter(p)
    got = [tuple(next(it).ids)]
    engine = p._runtime.engine
    roles = p.metrics_snapshot()["processes"]
    assert roles == engine.processes()
    assert roles["fork_server"] == [] and len(roles["workers"]) == 2
    assert psutil.Process(roles["coordinator"][0]).name() == "zephon-coord"
    assert {psutil.Process(w).name() for w in roles["workers"]} == {"zephon-worker"}
    os.kill(roles["workers"][0], signal.SIGKILL)
    server = _wait_until(lambda: engine.processes()["fork_server"])[0]
    assert psutil.Process(server).name() == "zephon-forksrv"
    replacement = _wait_until(lambda: set(engine.processes()["workers"]) - set(roles["workers"]))
    (replacement,) = replacement
    os.kill(server, signal.SIGKILL)
    got += [tuple(next(it).ids) for _ in range(10)]
    time.sleep(0.5)  # the coordinator has seen the fork server's children's sentinels fire
    got += [tuple(next(it).ids) for _ in range(5)]
    assert replacement in engine.processes()["workers"]  # not taken for dead, not replaced
    os.kill(replacement, signal.SIGKILL)
    got += ids(it)
    assert got == want
    assert replacement not in engine.pids()


def test_a_dead_fork_server_is_replaced_when_a_process_starts(tmp_path):
    """A fork server that refuses connections (dying, not yet reaped, as right after a
    SIGKILL) is replaced, and the start succeeds; one that keeps dying ends the start with an
    error naming it. In a fresh process, whose fork server this is."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import json, multiprocessing, os, socket, sys
        from multiprocessing import forkserver
        from zephon.engine.process import spawning

        ctx = multiprocessing.get_context("forkserver")

        def make():
            here, there = ctx.Pipe()
            return ctx.Process(target=spawning.adopt_environment, args=(None,)), here, there

        first, _ = spawning.start_retrying(make, "first child")
        first.proc.join()
        old = forkserver._forkserver._forkserver_pid
        refusing = os.path.join(sys.argv[1], "refusing.sock")
        socket.socket(socket.AF_UNIX).bind(refusing)  # bound, never listening: refused
        forkserver._forkserver._forkserver_address = refusing
        child, _ = spawning.start_retrying(make, "second child")
        child.proc.join()

        def refused(fds):  # a fork server that dies again and again
            raise ConnectionRefusedError(111, "Connection refused")

        forkserver.connect_to_new_process = refused
        try:
            spawning.start_retrying(make, "third child")
            error = None
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        print(json.dumps({"exit": child.proc.exitcode, "old": old, "new":
                          forkserver._forkserver._forkserver_pid,
                          "old_alive": os.path.exists(f"/proc/{old}"), "error": error}))
    """))
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["exit"] == 0 and got["new"] != got["old"] and not got["old_alive"]
    # and when no fork server will do, the start fails at once, saying what died
    assert got["error"].startswith("EngineError: zephon could not start the third child: its "
                                   "fork server died 3 times in a row")


def test_a_block_that_keeps_killing_workers_ends_the_run():
    p = pipeline(F.KillAlways(at=95), num_workers=2, max_worker_retries=1)
    got = []
    with pytest.raises(WorkerCrashedError, match=r"SIGKILL.*\(0, 0, 80\)") as info:
        for b in p:
            got.append(tuple(b.ids))
    assert len(got) == 8  # everything before the bad micro-batch (records 80..99) arrived
    assert "max_worker_retries=1" in str(info.value)


@pytest.mark.parametrize("runner,row_groups,coordinator", [
    ("process", None, "training"), ("process", None, "process"), ("threads", None, "auto"),
    ("process", 8, "training"), ("process", 8, "process")])
def test_exception_at_record_57_reaches_the_loop(runner, row_groups, coordinator):
    got, inline, errors = [], [], []
    for out, opts in ((got, dict(num_workers=2, runner=runner, row_groups=row_groups,
                                 coordinator=coordinator)),
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
        assert isinstance(remote, RemoteTraceback)
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
    p = pipeline(F.SlowDown(0.001), records=1200, num_workers=2, coordinator="process")
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
