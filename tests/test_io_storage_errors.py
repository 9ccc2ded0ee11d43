"""A disk that refuses (full, read-only, not ours) fails the read at once, naming dataset, shard,
path and, when full, the space left; network trouble keeps its retries. Errors are injected:
no disk is filled."""

from __future__ import annotations

import builtins
import errno
import os
import time
import uuid

import fsspec
import pytest
from io_helpers import jsonl_bytes, records

from zephon.io import CacheOptions, Dataset, StoreOptions
from zephon.io.errors import DataError
from zephon.io.storage.location import Location, with_retries

FAST_RETRIES = {"open_retry_initial_backoff": 0.001, "open_retry_max_backoff": 0.002}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def remote_jsonl() -> str:
    url = f"memory://zephon-errors-{uuid.uuid4().hex[:10]}/ds"
    fsspec.filesystem("memory").pipe(f"{url}/part-0.jsonl", jsonl_bytes(records(20)))
    return url


class _Refusing:
    """A file whose writes fail as a full, read-only or forbidden disk would."""

    def __init__(self, f, code: int) -> None:
        self.f, self.code = f, code

    def write(self, data):
        raise OSError(self.code, os.strerror(self.code))

    def close(self):
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def refuse_cache_writes(monkeypatch, code: int, at: str) -> list[str]:
    """Writes of cache entries (``shards/*.part-*``) fail with ``code``; returns the paths tried."""
    real_open = builtins.open
    tried = []

    def fake_open(file, mode="r", *a, **kw):
        if "w" in mode and ".part-" in str(file) and f"{os.sep}shards{os.sep}" in str(file):
            tried.append(str(file))
            if at == "open":
                raise OSError(code, os.strerror(code), str(file))
            return _Refusing(real_open(file, mode, *a, **kw), code)
        return real_open(file, mode, *a, **kw)

    monkeypatch.setattr(builtins, "open", fake_open)
    return tried


@pytest.mark.parametrize("at", ["open", "write"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT])
def test_a_refusing_disk_fails_at_once_and_says_where(code, at, cache_dir, monkeypatch):
    url = remote_jsonl()
    tried = refuse_cache_writes(monkeypatch, code, at)
    t0 = time.monotonic()
    with pytest.raises(DataError) as info:  # discovery downloads the shard to count it
        Dataset.from_path("web", url).with_store_options(
            StoreOptions(cache=CacheOptions(**FAST_RETRIES)))
    assert time.monotonic() - t0 < 5
    assert len(tried) == 1  # not retried: waiting does not empty a disk
    from zephon.io.errors import StorageError

    err = info.value
    assert isinstance(err, StorageError) and isinstance(err, OSError) and err.errno == code
    msg = str(err)
    assert f"dataset 'web', shard {url}/part-0.jsonl" in msg and str(cache_dir) in msg
    assert os.strerror(code) in msg
    if code in (errno.ENOSPC, errno.EDQUOT):
        assert "MiB free on its filesystem" in msg
    assert not [p for p in (cache_dir / "shards").iterdir()]  # no entry, no .part left


def test_a_full_disk_while_reading_a_parquet_shard_is_named(cache_dir, monkeypatch):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    url = f"memory://zephon-errors-{uuid.uuid4().hex[:10]}/ds"
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(records(20)), sink)
    fsspec.filesystem("memory").pipe(f"{url}/part-0.parquet", sink.getvalue())
    ds = Dataset.from_path("web", url).with_store_options(
        StoreOptions(remote_reads="whole", cache=CacheOptions(**FAST_RETRIES)))
    tried = refuse_cache_writes(monkeypatch, errno.ENOSPC, "write")
    with pytest.raises(DataError, match=r"dataset 'web', shard .*part-0\.parquet: cannot "
                                           r"write .*No space left on device.*MiB free"):
        ds.read_table(0, [0])
    assert len(tried) == 1


def test_network_trouble_keeps_its_retries(monkeypatch):
    url = remote_jsonl()
    real = Location.read_bytes
    calls = []

    def flaky(self, name, size=None):
        calls.append(name)
        if name.endswith(".jsonl") and calls.count(name) <= 2:
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
        return real(self, name, size)

    monkeypatch.setattr(Location, "read_bytes", flaky)
    ds = Dataset.from_path("web", url)
    assert ds.read_payloads(0, [3]) == [records(20)[3]]
    assert calls.count("part-0.jsonl") == 3


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT])
def test_with_retries_raises_permanent_os_errors_as_they_are(code):
    calls = []

    def refuse():
        calls.append(1)
        raise OSError(code, os.strerror(code))

    with pytest.raises(OSError) as info:
        with_retries(refuse, attempts=12, initial_backoff=0.001, max_backoff=0.002, what="x")
    assert info.value.errno == code and len(calls) == 1
