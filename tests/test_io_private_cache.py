"""Private temporary caches (node cache disabled or unwritable) go with their process, however it
goes: the training process's, the coordinator's and every worker's, killed ones included."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import psutil
import pytest

TESTS = Path(__file__).resolve().parent


def _dirs(base: Path) -> list[str]:
    return sorted(n for n in os.listdir(base) if "zephon-cache" in n)


# -- the lock that tells whether a directory is still wanted --------------------------------


def _own_cache_then_wait(base: str, ready, stop) -> None:
    from zephon.io.storage import private_cache

    tempfile.tempdir = base
    (private_cache.private_root() / "shards").mkdir()
    ready.set()
    stop.wait(60)


def test_a_dead_owners_cache_is_swept_and_a_live_ones_kept(tmp_path, monkeypatch):
    from zephon.io.storage import private_cache

    ctx = mp.get_context("fork")
    procs = []
    for _ in range(2):
        ready, stop = ctx.Event(), ctx.Event()
        p = ctx.Process(target=_own_cache_then_wait, args=(str(tmp_path), ready, stop))
        p.start()
        assert ready.wait(30)
        procs.append((p, stop))
    assert len(_dirs(tmp_path)) == 2
    (tmp_path / "zephon-cache-legacy").mkdir()  # an older zephon's: owner unknown, left alone
    (killed, _), (alive, stop) = procs
    os.kill(killed.pid, signal.SIGKILL)
    killed.join(10)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    removed = private_cache.sweep()
    assert len(removed) == 1 and len(_dirs(tmp_path)) == 2  # the live one and the legacy one
    stop.set()  # the live one ends normally: its exit removes its own cache
    alive.join(10)
    assert alive.exitcode == 0
    assert _dirs(tmp_path) == ["zephon-cache-legacy"]


def test_a_forked_child_does_not_keep_its_parents_cache_alive(tmp_path, monkeypatch):
    """The child closes its copy of the lock's descriptor: when the owner dies, its cache can
    be swept even while children it forked still run."""
    from zephon.io.storage import private_cache

    ctx = mp.get_context("fork")
    ready, stop = ctx.Event(), ctx.Event()
    owner = ctx.Process(target=_fork_a_child_then_die, args=(str(tmp_path), ready, stop))
    owner.start()
    assert ready.wait(30)
    owner.join(10)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    try:
        assert len(private_cache.sweep()) == 1
    finally:
        stop.set()


def _fork_a_child_then_die(base: str, ready, stop) -> None:
    from zephon.io.storage import private_cache

    tempfile.tempdir = base
    private_cache.private_root()
    pid = os.fork()
    if pid == 0:
        stop.wait(30)
        os._exit(0)
    ready.set()
    os._exit(0)  # like a worker leaving on SIGTERM: no clean-up ran


# -- whole pipelines in a fresh process -------------------------------------------------------


class Scenario:
    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        cache_dir = tmp_path / "shared-cache"
        if kind == "unwritable":
            (tmp_path / "a-file").write_text("")
            cache_dir = tmp_path / "a-file" / "cache"
        self.env = dict(os.environ, TMPDIR=str(self.tmp), ZEPHON_CACHE_DIR=str(cache_dir),
                        PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS)]))
        self.proc = subprocess.Popen(
            [sys.executable, str(TESTS / "private_cache_scenario.py"), kind,
             str(tmp_path / "data")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, cwd=TESTS, env=self.env)
        self.pids = self.read()["pids"]
        assert len(self.pids) >= 2  # two workers (and a coordinator process, if the run has one)

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"scenario died: {self.proc.wait()} {self.proc.stderr.read()}")
        return json.loads(line)

    def finish(self) -> str:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.wait(30) == 0
        return self.proc.stderr.read()


@pytest.mark.parametrize("kind", ["normal", "exception", "sigkill-worker", "unwritable"])
def test_no_private_cache_outlives_a_pipeline(kind, tmp_path):
    s = Scenario(kind, tmp_path)
    if kind == "sigkill-worker":
        assert len(s.read()["before_kill"]) >= 2  # both workers had made theirs
    if kind == "exception":
        assert s.read() == {"raised": "UserFunctionError"}
    end = s.read()  # the pipeline is over; the training process still runs
    assert end["left"] == []
    assert (end["own"] is not None) == (kind == "unwritable")  # its discovery read shards
    stderr = s.finish()
    assert _dirs(s.tmp) == []
    if kind == "unwritable":
        assert f"the shard cache directory {tmp_path / 'a-file' / 'cache'} cannot be" in stderr
        assert "uses a private temporary cache" in stderr


@pytest.mark.parametrize("how", ["sigterm", "sigkill", "sigkill-everyone"])
def test_caches_of_a_run_ended_by_a_signal_are_gone_after_the_next(how, tmp_path):
    """SIGTERM: the training process closes its engine. SIGKILL: its coordinator and workers
    see it gone and end. SIGKILL of every process at once: nothing of theirs runs, the caches
    are nobody's, and the next zephon process removes them."""
    s = Scenario("signal", tmp_path)
    assert s.read()["running"] >= 2  # both workers' caches
    family = [psutil.Process(p) for p in
              [c.pid for c in psutil.Process(s.proc.pid).children(recursive=True)]]
    if how == "sigkill-everyone":
        for p in family:
            p.kill()
    s.proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    s.proc.wait(20)
    psutil.wait_procs(family, timeout=20)
    left = _dirs(s.tmp)
    subprocess.run([sys.executable, "-c", "import zephon.io"], env=s.env, check=True,
                   timeout=60)  # a later zephon process, here one that only imports it
    assert _dirs(s.tmp) == []
    if how == "sigkill-everyone":
        assert len(left) >= 2  # the workers' caches waited for the next process to sweep them
    else:
        assert left == []  # nothing waited for anyone


# -- an unwritable cache directory ------------------------------------------------------------


def test_an_unwritable_cache_dir_warns_once_naming_it_and_the_fallback(tmp_path, monkeypatch):
    import gzip

    from zephon.io import Dataset
    from zephon.io.storage import private_cache

    (tmp_path / "a-file").write_text("")
    bad = tmp_path / "a-file" / "cache"
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(bad))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl.gz").write_bytes(gzip.compress(b'{"a": 1}\n{"a": 2}\n'))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = Dataset.from_path("x", tmp_path / "d")
        assert Dataset.from_path("x", tmp_path / "d").read_payloads(0, [1]) == [{"a": 2}]
    messages = [str(w.message) for w in caught if "cannot be written" in str(w.message)]
    private = first._rt().res.cache.root
    assert len(messages) == 1, messages
    assert str(bad) in messages[0] and str(private) in messages[0]
    assert private.name.startswith(private_cache.PREFIX)


def test_a_read_only_cache_dir_is_noticed_before_the_first_download(tmp_path, monkeypatch):
    """As root, or on a read-only mount, the directories exist and mkdir says nothing: only
    creating a file tells."""
    import errno

    from zephon.io.storage import private_cache
    from zephon.io.storage.cache import cache_for

    real = tempfile.mkstemp

    def refuse(*a, dir=None, **kw):
        if dir is not None and str(dir).startswith(str(tmp_path / "ro")):
            raise OSError(errno.EROFS, "Read-only file system", str(dir))
        return real(*a, dir=dir, **kw)

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.warns(RuntimeWarning, match=r"ro cannot be written \(.*Read-only file system"):
        cache = cache_for(tmp_path / "ro", None)
    assert cache.root.name.startswith(private_cache.PREFIX)
