"""Chaos: SIGKILLs of every process the engine starts, at seeded random points of a run.

Six runs iterate the same pipeline (Parquet data, two workers, two lanes, a shuffle; output
read-ahead of 0, 1 or 8 frames) and, at batches drawn from a seeded generator, applies a few
disturbances from ``DISTURBANCES``: kill a
worker, the coordinator's fork server (the helper that forks replacement workers), both at
once, the training process's fork server (the launcher of coordinators), or the coordinator.
Whatever happens, the run's delivered stream is an exact prefix of the undisturbed one — the
whole of it where recovery applies (everything but the coordinator) — and when the run is over
no process it started is left, no shared-memory segment of its prefix, nothing in its TMPDIR.

To add a disturbance (a truncated cache entry, say), add a function to ``DISTURBANCES`` with
whether the full stream must still arrive; ``make_pipeline`` is where the data comes from.
"""

from __future__ import annotations

import multiprocessing.util
import os
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import engine_fakes as F
import numpy as np
import pytest
from conftest import wait_released

from zephon import Pipeline, synthetic
from zephon.io import Dataset
from zephon.ops.errors import ZephonError
from zephon.work import StaticMixtureWorkSource

pytestmark = pytest.mark.slow

SEED = 1360
RUNS = 6


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("chaos")
    synthetic.write_dataset(root, "code", 300, n_shards=3, fmt="parquet", seed=1, mean_words=30)
    synthetic.write_dataset(root, "web", 900, n_shards=4, fmt="parquet", seed=2, mean_words=30)
    return root


def make_pipeline(corpus, **opts) -> Pipeline:
    ds = [Dataset.from_path("code", str(corpus / "code")),
          Dataset.from_path("web", str(corpus / "web"))]
    ws = StaticMixtureWorkSource(ds, {"code": 0.25, "web": 0.75}, seed=11, chunk_size=48)
    # slowed down, so that a kill meets work in flight
    return (Pipeline(ws).map_transform(F.SlowDown(0.001)).shuffle(buffer_size=24, seed=2)
            .batch(microbatch_size=8)
            .options(canonical_replicas=2, micro_batch_size=16, **opts))


def signature(batch) -> tuple:
    return batch.lane_ids[0], tuple(batch.ids)


@dataclass
class Run:
    """A pipeline being iterated, and every pid of ours seen in it."""

    pipeline: Pipeline
    seen: set[int] = field(default_factory=set)

    def roles(self) -> dict[str, list[int]]:
        roles = self.pipeline._runtime.engine.processes()
        self.seen.update(pid for role, pids in roles.items() if role != "launcher"
                         for pid in pids)
        return roles

    def wait_for(self, role: str, timeout: float = 20.0) -> list[int]:
        """The pids in ``role``, once there are some (the coordinator starts them meanwhile);
        none once the workers are gone: the coordinator has done all the work, read ahead."""
        deadline = time.monotonic() + timeout
        while not (pids := (roles := self.roles())[role]) and roles["workers"]:
            assert time.monotonic() < deadline, f"no {role} appeared: {roles}"
            time.sleep(0.05)
        return pids


def _kill(*pids: int) -> bool:
    """SIGKILL ``pids``; False if there were none."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # ended on its own meanwhile
            pass
    return bool(pids)


def kill_worker(run: Run, rng) -> bool:
    workers = run.wait_for("workers")
    return _kill(int(rng.choice(workers))) if workers else False


def kill_fork_server(run: Run, rng) -> bool:
    if not run.roles()["fork_server"]:  # started by the first replacement: make one
        kill_worker(run, rng)
    return _kill(*run.wait_for("fork_server"))


def kill_fork_server_and_worker(run: Run, rng) -> bool:
    """Both at once: the replacement worker then starts while its fork server is dying."""
    if not run.roles()["fork_server"]:
        kill_worker(run, rng)
    server, workers = run.wait_for("fork_server"), run.wait_for("workers")
    return bool(server and workers) and _kill(*server, int(rng.choice(workers)))


def kill_launcher(run: Run, rng) -> bool:
    return _kill(*run.roles()["launcher"])


def kill_coordinator(run: Run, rng) -> bool:
    return _kill(*run.roles()["coordinator"])


@dataclass(frozen=True)
class Disturbance:
    # does it to a running pipeline; False: there was nothing to do it to (a late kill of a
    # worker finds none: the coordinator has done all the work already)
    act: Callable[[Run, np.random.Generator], bool]
    recovers: bool  # the full stream must still arrive


DISTURBANCES: dict[str, Disturbance] = {
    "worker": Disturbance(kill_worker, True),
    "fork_server": Disturbance(kill_fork_server, True),
    "fork_server+worker": Disturbance(kill_fork_server_and_worker, True),
    "launcher": Disturbance(kill_launcher, True),
    "coordinator": Disturbance(kill_coordinator, False),
}


def plans(total: int) -> list[tuple[int, list[tuple[int, str]]]]:
    """Per run: the output read-ahead, and (batch index, disturbance) in order, an unrecoverable
    one only last."""
    rng = np.random.default_rng(SEED)
    recoverable = [k for k, d in DISTURBANCES.items() if d.recovers]
    fatal = [k for k, d in DISTURBANCES.items() if not d.recovers]
    out = []
    for _ in range(RUNS):
        n = int(rng.integers(1, 4))
        at = sorted(rng.choice(np.arange(1, total - 20), size=n, replace=False).tolist())
        kinds = [str(rng.choice(recoverable)) for _ in range(n)]
        if rng.random() < 0.3:
            kinds[-1] = str(rng.choice(fatal))
        out.append((int(rng.choice([0, 1, 8])), list(zip(at, kinds))))
    return out


def play(run: Run, plan: list[tuple[int, str]], applied: set[str]
         ) -> tuple[list, ZephonError | None]:
    """Iterate ``run``, disturbing it as ``plan`` says (``applied``: those that found their
    target): (what was delivered, the error)."""
    it = iter(run.pipeline)
    got: list = []

    def consume(until: float) -> None:
        while len(got) < until and (b := next(it, None)) is not None:
            got.append(signature(b))
            if len(got) % 10 == 1:
                run.roles()  # replacements too must be gone at the end

    try:
        for at, kind in plan:
            consume(at)
            if DISTURBANCES[kind].act(run, np.random.default_rng(SEED + len(got))):
                applied.add(kind)
        consume(float("inf"))
    except ZephonError as e:
        return got, e
    return got, None


@pytest.mark.timeout(90)
def test_random_sigkills_never_change_the_stream(corpus, tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # this process's own multiprocessing temp dir (its fork server's socket) lives as long as it
    # does: made before TMPDIR moves, so that what is left in ``tmp`` is the engine's
    multiprocessing.util.get_temp_dir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # reaches coordinator and workers (spawning.py)
    monkeypatch.setattr(tempfile, "tempdir", None)  # and this process: no cached answer
    want = [signature(b) for b in make_pipeline(corpus, num_workers=0)]
    all_plans = plans(len(want))
    # the seed covers every disturbance and read-ahead, and a run that recovers and then loses
    # its coordinator
    assert {k for _, plan in all_plans for _, k in plan} == set(DISTURBANCES)
    assert {prefetch for prefetch, _ in all_plans} == {0, 1, 8}
    assert any(len(plan) > 1 and not DISTURBANCES[plan[-1][1]].recovers for _, plan in all_plans)
    applied: set[str] = set()
    for prefetch, plan in all_plans:
        run = Run(make_pipeline(corpus, num_workers=2, prefetch_batches=prefetch))
        here: set[str] = set()
        got, error = play(run, plan, here)
        applied |= here
        prefix = run.pipeline._runtime.engine.config.prefix
        run.pipeline.close()
        assert got == want[:len(got)], plan
        if error is None:  # (a coordinator killed after it sent everything changes nothing)
            assert len(got) == len(want), plan
        else:
            assert not all(DISTURBANCES[k].recovers for k in here), (plan, error)
            assert "coordinator process ended unexpectedly" in str(error)
        wait_released(prefix, run.seen, timeout=15.0)
    assert not os.listdir(tmp)
    assert applied == set(DISTURBANCES)  # each found its target at least once
