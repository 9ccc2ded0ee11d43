"""The Ray runner on a local Ray cluster this module starts itself (a head and a second node
process on this machine, one CPU and a 100 MB object store each): the inline stream, actors and
nodes that die mid-run, checkpoints across runners, remote errors, settings reaching the actors,
and what metrics_snapshot() and explain() say. Without a cluster (and without Ray): options, and
that nothing imports Ray unless the runner is chosen."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from test_checkpoint import _make, _sig

from zephon import Pipeline
from zephon.errors import WorkerCrashedError
from zephon.io import Dataset
from zephon.work import StaticMixtureWorkSource

try:
    import ray
except ImportError:  # the optional extra: the cluster tests are skipped
    ray = None

MIX = "split+shuffle+mixture+best_fit"  # tokenize -> shuffle -> mixture -> pack -> batch
MB = 1 << 20


# -- without a cluster ---------------------------------------------------------------------------


def test_nothing_imports_ray_unless_the_runner_is_chosen(corpus_dir):
    code = textwrap.dedent(f"""
        import sys
        import zephon
        from zephon import Pipeline
        from zephon.io import Dataset
        from zephon.work import StaticMixtureWorkSource
        ws = StaticMixtureWorkSource([Dataset.from_path("code", {str(corpus_dir / "code")!r})],
                                     {{"code": 1.0}}, seed=1)
        p = Pipeline(ws).options(num_workers=1, runner="process").batch(microbatch_size=50)
        assert sum(len(b) for b in p) == 600
        p.explain()
        print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, ZEPHON_RUNNER=""))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_ray_options_are_checked_and_read_from_the_environment(monkeypatch, corpus_dir):
    from zephon.engine.ray.config import RayConfig
    from zephon.engine.session import engine_kind

    p = _make(corpus_dir, None, "batch")
    with pytest.raises(ValueError, match="unknown key"):
        p.options(ray_resources={"num_cpu": 1})
    with pytest.raises(ValueError, match="num_cpus"):
        p.options(ray_resources={"num_cpus": -1})
    with pytest.raises(TypeError, match="env_vars"):
        p.options(ray_runtime_env={"env_vars": {"A": 1}})
    monkeypatch.setenv("ZEPHON_RUNNER", "ray")
    monkeypatch.setenv("ZEPHON_RAY_WORKERS", "3")
    monkeypatch.setenv("ZEPHON_RAY_ADDRESS", "ray://head:10001")
    monkeypatch.setenv("ZEPHON_CACHE_DIR", "/scratch/zephon")
    assert engine_kind(p._options) == ("ray", 3)
    p.options(ray_resources={"num_cpus": 2, "resources": {"cpu_node": 1}},
              ray_runtime_env={"env_vars": {"ZEPHON_CACHE_LIMIT": "1gb"}}, shm_slots=3)
    cfg = RayConfig.from_options(p._options)
    assert (cfg.address, cfg.workers, cfg.inflight) == ("ray://head:10001", 3, 3)
    assert cfg.actor_options == {"num_cpus": 2, "resources": {"cpu_node": 1},
                                 "scheduling_strategy": "SPREAD"}
    env = cfg.runtime_env["env_vars"]
    assert env["ZEPHON_CACHE_DIR"] == "/scratch/zephon" and env["ZEPHON_CACHE_LIMIT"] == "1gb"
    assert "ZEPHON_RUNNER" not in env and "ZEPHON_RAY_ADDRESS" not in env
    text = p.explain()
    assert "runner=ray" in text and "runs_in=ray actors" in text
    assert "address=ray://head:10001 actors=3" in text


# -- on a local cluster ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    if ray is None:
        pytest.skip("ray is not installed (pip install 'zephon[ray]')")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": 100 * MB, "include_dashboard": False})
    try:
        c.add_node(num_cpus=1, object_store_memory=100 * MB)
        c.wait_for_nodes()
        ray.init(address=c.address, logging_level=logging.WARNING)
        yield c
    finally:
        # Ray's processes and the actors they started (not the process runner's fork server)
        procs = [p for p in psutil.Process().children(recursive=True) if not _multiprocessing(p)]
        ray.shutdown()
        c.shutdown()
        _, alive = psutil.wait_procs(procs, timeout=20)
        left = [(p.pid, _cmdline(p)) for p in alive]
        for p in alive:
            p.kill()
        assert not left, f"Ray left processes running: {left}"


def _cmdline(p) -> str:
    try:
        return " ".join(p.cmdline())[:200]
    except psutil.Error:
        return "?"


def _multiprocessing(p) -> bool:
    return "from multiprocessing" in _cmdline(p)


def _inline(corpus_dir, tok, mix=MIX, **opts):
    return [_sig(x) for x in _make(corpus_dir, tok, mix, **opts)]


def _ray(corpus_dir, tok, mix=MIX, **opts):
    opts.setdefault("ray_workers", 2)
    return _make(corpus_dir, tok, mix, runner="ray", **opts)


def _pool(p):
    return p._runtime.engine.scheduler.pool


def _records(corpus_dir, fn=None, batch=5, lanes=2, micro=37, chunk_size=90, op=None, **opts):
    """fetch -> [map_transform(fn)] -> [op] -> batch: all but batch run in the actors."""
    ds = [Dataset.from_path("code", str(corpus_dir / "code")),
          Dataset.from_path("web", str(corpus_dir / "web"))]
    ws = StaticMixtureWorkSource(ds, {"code": 0.25, "web": 0.75}, seed=7, chunk_size=chunk_size)
    p = Pipeline(ws).options(num_workers=0, canonical_replicas=lanes, micro_batch_size=micro,
                             **opts)
    if fn is not None:
        p = p.map_transform(fn)
    if op is not None:
        p = p.add_op(op)
    return p.batch(microbatch_size=batch)


@pytest.mark.slow
def test_ray_gives_the_inline_stream_and_reports_its_actors(cluster, corpus_dir,
                                                            tokenizer_path):
    want = _inline(corpus_dir, tokenizer_path)
    inline = _make(corpus_dir, tokenizer_path, "filter+batch")
    want_filtered = [_sig(x) for x in inline]
    p = _ray(corpus_dir, tokenizer_path, shm_slots=2)
    got, explained = [], None
    for unit in p:
        got.append(_sig(unit))
        assert max(len(a.inflight) for a in _pool(p).actors) <= 2  # bounded per actor
        if len(got) == 50:
            explained = p.explain()
    assert got == want
    snap = p.metrics_snapshot()
    actors = snap["ray"]["actors"]
    assert snap["engine"] == "ray" and snap["workers"] == 2 and len(actors) == 2
    assert len(snap["ray"]["nodes"]) == 2  # spread over the head and the second node
    assert all(a["blocks"] > 0 and a["busy_s"] > 0 for a in actors)
    assert snap["operators"]["tokenize"]["records_in"] == 2400  # counted in the actors
    assert explained.count("ray actor ") == 2 and "busy" in explained

    q = _ray(corpus_dir, None, "filter+batch")
    assert [_sig(x) for x in q] == want_filtered
    # records dropped in the actors are counted there and reach the driver's snapshot
    assert q.metrics_snapshot()["losses"] == inline.metrics_snapshot()["losses"]
    assert q.metrics_snapshot()["losses"]


@pytest.mark.slow
def test_finished_blocks_are_read_in_place_from_the_object_store(cluster, corpus_dir):
    # blocks of 600 records (~280 KB: above Ray's 100 KB limit for returning values inline),
    # cut into batches as slices of the returned table
    p = _records(corpus_dir, batch=300, lanes=1, micro=600, chunk_size=1200, runner="ray",
                 ray_workers=1)
    batches = list(p)
    plasma = []
    with open("/proc/self/maps") as f:
        for line in f:
            if "plasma" in line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                plasma.append((lo, hi))
    assert plasma, "no object store mapping in this process"
    addresses = [b.block.payload.column("text").chunks[0].buffers()[2].address
                 for b in batches[:4]]
    assert all(any(lo <= a < hi for lo, hi in plasma) for a in addresses)


@pytest.mark.slow
def test_a_killed_actor_is_replaced_and_its_blocks_redone(cluster, corpus_dir, tokenizer_path,
                                                          caplog):
    want = _inline(corpus_dir, tokenizer_path)
    p = _ray(corpus_dir, tokenizer_path)
    it = iter(p)
    got = [_sig(next(it)) for _ in range(60)]
    victim = _pool(p).actors[0]
    while not victim.inflight:  # kill it while it holds work
        got.append(_sig(next(it)))
    with caplog.at_level(logging.WARNING, logger="zephon.engine"):
        ray.kill(victim.handle)
        got += [_sig(x) for x in it]
    assert got == want
    assert p.metrics_snapshot()["ray"]["replaced"] == 1
    assert "Ray actor 0" in caplog.text and "redoing" in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("first,then", [("ray", "process"), ("process", "ray")])
def test_checkpoints_restore_across_runners(cluster, corpus_dir, tokenizer_path, first, then):
    want = _inline(corpus_dir, tokenizer_path)[:160]
    opts = {"ray": {"runner": "ray", "ray_workers": 2},
            "process": {"runner": "process", "num_workers": 2}}
    p = _make(corpus_dir, tokenizer_path, MIX).options(**opts[first])
    it = iter(p)
    head = [_sig(next(it)) for _ in range(61)]
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    q = _make(corpus_dir, tokenizer_path, MIX, micro=53).options(**opts[then]).restore(state)
    tail = [_sig(x) for _, x in zip(range(160 - 61), q)]
    q.close()
    assert head + tail == want


@pytest.mark.slow
def test_an_operator_error_in_an_actor_is_raised_where_inline_raises_it(cluster, corpus_dir):
    def boom(r):
        if r["doc_id"] == "web-417":
            raise RuntimeError("no such luck")
        return r

    def build(**opts):
        return _records(corpus_dir, boom, **opts)

    def until_error(p):
        got = []
        with pytest.raises(Exception) as info:
            for x in p:
                got.append(_sig(x))
        return got, info.value

    want, inline_error = until_error(build())
    got, error = until_error(build(runner="ray", ray_workers=2))
    assert got == want and len(got) > 0
    assert type(error) is type(inline_error) and str(error) == str(inline_error)
    assert "map_transform" in str(error)
    remote = str(error.__cause__)
    assert "in Ray actor pid" in remote and "no such luck" in remote


@pytest.mark.slow
def test_an_actor_dying_on_every_try_ends_the_run_naming_the_micro_batch(cluster, corpus_dir):
    def die(r):
        if r["doc_id"] == "web-417":
            os._exit(3)  # the actor's process ends: a crash, not an operator error
        return r

    p = _records(corpus_dir, die, runner="ray", ray_workers=2, max_worker_retries=1)
    with pytest.raises(WorkerCrashedError) as info:
        list(p)
    text = str(info.value)
    assert "a Ray actor died" in text and "2 times on the micro-batch of lane" in text
    assert "max_worker_retries=1" in text and "starting at sample" in text
    assert p.metrics_snapshot()["ray"]["replaced"] == 2


@pytest.mark.slow
def test_operators_are_set_up_once_per_actor_and_a_failed_setup_is_raised(cluster, corpus_dir,
                                                                          tmp_path):
    from zephon.ops.base import BaseOp, OpTraits

    class Marked(BaseOp):
        def __init__(self, fail: bool) -> None:
            self.fail = fail

        def traits(self):
            return OpTraits(preserves_cursor_order=True)

        def setup(self, ctx):
            super().setup(ctx)
            if self.fail:
                raise OSError("model weights not found on this node")
            (tmp_path / f"setup.{os.getpid()}.{ctx.get('worker_id')}").write_text(ctx.get("runner"))

        def process_many(self, elems):
            return elems

    p = _records(corpus_dir, op=Marked(False), runner="ray", ray_workers=2)
    assert sum(len(b) for b in p) == 2400
    marks = sorted(m.name.rsplit(".", 1)[1] for m in tmp_path.iterdir())
    assert marks == ["0", "1"] and {m.read_text() for m in tmp_path.iterdir()} == {"ray"}

    q = _records(corpus_dir, op=Marked(True), runner="ray", ray_workers=2)
    with pytest.raises(OSError, match="model weights not found on this node"):
        list(q)


@pytest.mark.slow
def test_storage_settings_reach_the_actors(cluster, corpus_dir, tmp_path, monkeypatch):
    cache = tmp_path / "node-cache"
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(cache))  # after the cluster started

    batches = list(_records(corpus_dir, lambda r: {**r, "cache": os.environ["ZEPHON_CACHE_DIR"]},
                            runner="ray", ray_workers=2))
    seen = {c for b in batches for c in b.block.payload.column("cache").to_pylist()}
    assert seen == {str(cache)}
    assert any(cache.rglob("*")), "the actors' reads used another shard cache"


@pytest.mark.slow
def test_a_pipeline_connects_to_ray_itself_and_disconnects_at_its_end(cluster, corpus_dir):
    want = [_sig(b) for b in _records(corpus_dir)]
    ray.shutdown()
    try:
        p = _records(corpus_dir, runner="ray", ray_workers=1, ray_address=cluster.address)
        it = iter(p)
        got = [_sig(next(it))]
        assert ray.is_initialized()
        got += [_sig(b) for b in it]
        assert got == want
        assert not ray.is_initialized()  # the connection was the pipeline's: closed with it
    finally:
        if not ray.is_initialized():
            ray.init(address=cluster.address, logging_level=logging.WARNING)


def _wait_gone(pid: int, timeout: float = 60.0) -> None:
    """Until process ``pid`` has ended (a zombie counts as ended)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        assert time.monotonic() < deadline, f"the removed node's actor (pid {pid}) lives on"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_removed_node_is_survived(cluster, corpus_dir, tokenizer_path, caplog):
    """Last in the module: the cluster keeps one node after it."""
    want = _inline(corpus_dir, tokenizer_path)
    # half a CPU each: the replacement fits on the head, beside the surviving actor
    p = _ray(corpus_dir, tokenizer_path, ray_resources={"num_cpus": 0.5})
    it = iter(p)
    got = [_sig(next(it)) for _ in range(60)]
    head_id = ray.get_runtime_context().get_node_id()
    doomed = next(n for n in cluster.list_all_nodes() if n.node_id != head_id)
    on_it = [a for a in _pool(p).actors if a.where["node_id"] == doomed.node_id]
    assert on_it, "no actor on the second node"
    while not on_it[0].inflight:
        got.append(_sig(next(it)))
    with caplog.at_level(logging.WARNING, logger="zephon.engine"):
        cluster.remove_node(doomed, allow_graceful=False)
        # the actor's process outlives its raylet for a moment, and serves calls that reach it
        # directly meanwhile: the stream goes on only once the node's actor is really gone
        _wait_gone(on_it[0].where["pid"])
        got += [_sig(x) for x in it]
    assert got == want
    assert p.metrics_snapshot()["ray"]["replaced"] >= 1
    assert "redoing" in caplog.text
