"""The node-local shard cache and the storage options."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from pathlib import Path

import pytest

from zephon.io import (
    CacheOptions,
    ParquetRGCacheOptions,
    ShardCache,
    StoreOptions,
    parse_size_bytes,
)
from zephon.io.options import resolve_store


def _produce_slowly(counter: Path, payload: bytes):
    def produce(part: Path) -> None:
        with open(counter, "a") as f:
            f.write("x")
        with open(part, "wb") as f:
            f.write(payload[: len(payload) // 2])
            f.flush()
            time.sleep(0.2)  # a reader looking now must not see a half-written entry
            f.write(payload[len(payload) // 2:])
    return produce


def test_threads_racing_produce_once_and_never_see_half_files(tmp_path):
    cache = ShardCache(tmp_path / "c")
    payload = os.urandom(1 << 16)
    seen = []

    def worker():
        path = cache.get_or_create("k1", "a.bin", _produce_slowly(tmp_path / "n", payload))
        seen.append(path.read_bytes())

    def peeker():
        for _ in range(20):
            found = cache.lookup("k1", "a.bin")
            if found is not None:
                seen.append(found.read_bytes())
            time.sleep(0.01)

    threads = [threading.Thread(target=worker) for _ in range(6)] + [threading.Thread(target=peeker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (tmp_path / "n").read_text() == "x"
    assert seen and all(s == payload for s in seen)
    assert cache.stats["downloads"] == 1


def test_a_read_waiting_on_a_thread_download_reuses_it(tmp_path):
    """A read that needs an entry a prefetch thread is producing waits for it and finds it."""
    cache = ShardCache(tmp_path / "c")
    started = threading.Event()

    def produce(part: Path) -> None:
        started.set()
        time.sleep(0.2)
        part.write_bytes(b"whole")

    prefetch = threading.Thread(target=cache.get_or_create, args=("k", "a.bin", produce))
    prefetch.start()
    assert started.wait(10)
    again = []
    path = cache.get_or_create("k", "a.bin", lambda part: again.append(part))
    prefetch.join()
    assert path.read_bytes() == b"whole" and not again
    assert cache.stats["downloads"] == 1


def _race_in_process(root: str, counter: str, payload: bytes, out) -> None:
    cache = ShardCache(Path(root))
    path = cache.get_or_create("shared", "s.bin", _produce_slowly(Path(counter), payload))
    out.put(path.read_bytes() == payload)


def test_processes_racing_produce_once(tmp_path):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    payload = os.urandom(1 << 15)
    procs = [ctx.Process(target=_race_in_process,
                         args=(str(tmp_path / "c"), str(tmp_path / "n"), payload, q))
             for _ in range(4)]
    for p in procs:
        p.start()
    results = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results == [True] * 4
    assert (tmp_path / "n").read_text() == "x"


def _signal_then_sleep(running) -> None:
    running.set()
    time.sleep(60)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_a_lock_is_held_does_not_keep_it(tmp_path):
    """The child closes its inherited copy of the lock's descriptor, so the lock is free as
    soon as the parent releases it, not when the child exits."""
    import fcntl

    from zephon.io.storage.flock import exclusive_lock

    lock = tmp_path / "entry.lock"
    ctx = mp.get_context("fork")
    running = ctx.Event()
    with exclusive_lock(lock):
        child = ctx.Process(target=_signal_then_sleep, args=(running,))
        child.start()
    try:
        assert running.wait(60)  # the child is past its at-fork handlers
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if still held
        finally:
            os.close(fd)
    finally:
        child.terminate()
        child.join(timeout=60)


def test_crashed_download_is_redone(tmp_path):
    cache = ShardCache(tmp_path / "c")
    final = cache.entry_path("k", "a.bin")
    stale = final.with_name(final.name + ".part-99999-1")
    stale.write_bytes(b"half")  # what a killed producer leaves behind

    def failing(part: Path) -> None:
        part.write_bytes(b"partial")
        raise OSError("connection reset")

    with pytest.raises(OSError):
        cache.get_or_create("k", "a.bin", failing)
    assert cache.lookup("k", "a.bin") is None
    assert not list(cache.shards.glob("*.part-*"))
    path = cache.get_or_create("k", "a.bin", lambda part: part.write_bytes(b"complete"))
    assert path.read_bytes() == b"complete"


def _crash_while_producing(root: str) -> None:
    cache = ShardCache(Path(root))

    def produce(part: Path) -> None:
        part.write_bytes(b"half")
        os._exit(3)  # killed mid-download: lock released by the kernel, .part left behind

    cache.get_or_create("k", "a.bin", produce)


def test_process_killed_mid_download(tmp_path):
    p = mp.get_context("fork").Process(target=_crash_while_producing, args=(str(tmp_path / "c"),))
    p.start()
    p.join(timeout=60)
    assert p.exitcode == 3
    cache = ShardCache(tmp_path / "c")
    assert cache.lookup("k", "a.bin") is None
    path = cache.get_or_create("k", "a.bin", lambda part: part.write_bytes(b"whole"))
    assert path.read_bytes() == b"whole"


def test_lru_eviction_under_the_limit(tmp_path):
    cache = ShardCache(tmp_path / "c", limit_bytes=3000, min_slack_bytes=0, max_slack_bytes=0)
    for i, key in enumerate(["a", "b", "c"]):
        cache.get_or_create(key, f"{key}.bin", lambda part: part.write_bytes(b"x" * 1000))
        os.utime(cache.record_path(key), (100 + i, 100 + i))  # recency lives on the record
    assert cache.lookup("a", "a.bin") is not None  # a becomes the most recently used
    (cache.lineidx / "b.npy").write_bytes(b"idx")
    cache.get_or_create("d", "d.bin", lambda part: part.write_bytes(b"x" * 1000), 1000)
    assert cache.lookup("b", "b.bin") is None and not (cache.lineidx / "b.npy").exists()
    assert all(cache.lookup(k, f"{k}.bin") for k in "acd")
    assert cache.usage() <= 3000 and cache.stats["evictions"] == 1


def test_limit_smaller_than_a_shard(tmp_path):
    cache = ShardCache(tmp_path / "c", limit_bytes=100)
    with pytest.raises(ValueError, match="cannot hold one shard"):
        cache.get_or_create("k", "a.bin", lambda part: part.write_bytes(b"x"), 1000)


def test_redownload_after_eviction_warns(tmp_path):
    cache = ShardCache(tmp_path / "c", limit_bytes=1500, min_slack_bytes=0, max_slack_bytes=0)
    write = lambda part: part.write_bytes(b"x" * 1000)  # noqa: E731
    cache.get_or_create("a", "a.bin", write, 1000)
    cache.get_or_create("b", "b.bin", write, 1000)  # evicts a
    with pytest.warns(RuntimeWarning, match="thrashing"):
        cache.get_or_create("a", "a.bin", write, 1000)
    assert cache.stats["redownloads"] == 1


@pytest.mark.parametrize("text,expected", [
    ("50gb", 50 << 30), ("500GB", 500 << 30), ("1.5 mb", int(1.5 * (1 << 20))), ("2tb", 2 << 40),
    ("10kb", 10240), ("7b", 7), ("123", 123), ("4GiB", 4 << 30), ("", None), (None, None), (99, 99),
])
def test_parse_size_bytes(text, expected):
    assert parse_size_bytes(text) == expected


@pytest.mark.parametrize("bad", ["lots", "5 xb", "-3", "gb", True, -1])
def test_parse_size_bytes_rejects(bad):
    with pytest.raises(ValueError):
        parse_size_bytes(bad)


def test_option_defaults_and_merge():
    c = CacheOptions()
    assert (c.enabled, c.limit_bytes, c.download_retry, c.download_timeout) == (None, None, 12, 180.0)
    assert c.min_slack_bytes == 512 << 10 and c.max_slack_bytes == 64 << 20
    assert ParquetRGCacheOptions().min_free_bytes == 1 << 30
    s = StoreOptions(cache={"limit_bytes": "2gb"})
    assert s.cache.limit_bytes == 2 << 30 and s.vortex_segment_cache_bytes == 256 << 20
    merged = s.merged({"cache": {"root": "/x"}})
    assert merged.cache.limit_bytes == 2 << 30 and merged.cache.root == "/x"
    assert merged.merged(StoreOptions(cache=CacheOptions(limit_bytes=5))).cache.root == "/x"
    with pytest.raises(TypeError, match="unknown option"):
        CacheOptions(limit=5)
    with pytest.raises(ValueError):
        StoreOptions(vortex_read_concurrency=0)
    with pytest.raises(ValueError):
        StoreOptions(remote_reads="sometimes")
    with pytest.raises(AttributeError):
        c.enabled = True


def test_resolve_store_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "env-cache"))
    monkeypatch.setenv("ZEPHON_CACHE_LIMIT", "3mb")
    monkeypatch.setenv("ZEPHON_REMOTE_READS", "ranges")
    r = resolve_store(None)
    assert (r.cache_root, r.cache_limit, r.remote_reads) == (tmp_path / "env-cache", 3 << 20, "ranges")
    r = resolve_store({"cache": {"limit_bytes": "1kb", "root": str(tmp_path / "o")}})
    assert (r.cache_root, r.cache_limit) == (tmp_path / "o", 1024)
    assert resolve_store({"cache": {"enabled": False}}).cache_root is None
    monkeypatch.delenv("ZEPHON_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_store(None).cache_root == tmp_path / "xdg" / "zephon"


def test_transient_errors_are_retried_missing_files_are_not():
    from zephon.io.storage.location import with_retries

    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError("reset by peer")
        return "ok"

    assert with_retries(flaky, attempts=5, initial_backoff=0.001, max_backoff=0.002,
                        what="x") == "ok"
    assert len(calls) == 3

    def missing():
        calls.append(2)
        raise FileNotFoundError("gone")

    with pytest.raises(FileNotFoundError):
        with_retries(missing, attempts=5, initial_backoff=0.001, max_backoff=0.002, what="x")
    assert calls.count(2) == 1

    def always():
        raise TimeoutError("slow")

    with pytest.raises(OSError, match="download of s3://b/x failed after 2 attempts"):
        with_retries(always, attempts=2, initial_backoff=0.001, max_backoff=0.002,
                     what="download of s3://b/x")


def test_disabled_cache_uses_a_private_directory(tmp_path, monkeypatch):
    import gzip

    from zephon.io import Dataset

    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "shared"))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl.gz").write_bytes(gzip.compress(b'{"a": 1}\n{"a": 2}\n'))
    ds = Dataset.from_path("x", tmp_path / "d").with_store_options(
        StoreOptions(cache=CacheOptions(enabled=False)))
    shared_before = sorted(p.name for p in (tmp_path / "shared" / "shards").iterdir())
    assert ds.read_payloads(0, [1]) == [{"a": 2}]
    cache = ds._rt().res.cache
    assert not str(cache.root).startswith(str(tmp_path / "shared"))
    assert sorted(p.name for p in (tmp_path / "shared" / "shards").iterdir()) == shared_before
