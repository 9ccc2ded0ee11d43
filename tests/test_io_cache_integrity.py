"""Cache entries are believed only while they are what was written: a truncated, emptied or
overwritten entry (whole shard, decoded JSONL, line index) is evicted with a warning naming the
dataset, the shard and the cache path, and fetched again; reads return the original records."""

from __future__ import annotations

import gzip
import json
import os
import time
import uuid
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from io_helpers import jsonl_bytes, jsonl_dataset, records

from zephon.io import CacheOptions, Dataset, ShardCache, StoreOptions

WHOLE = StoreOptions(remote_reads="whole")
RANGES = StoreOptions(remote_reads="ranges")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _parquet_bytes(recs) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(recs), sink, row_group_size=10)
    return sink.getvalue().to_pybytes()


def memory_dataset(kind: str, shards: int = 2, rows: int = 30) -> tuple[str, list[list[dict]]]:
    """Shards of ``kind`` (jsonl, jsonl.gz, parquet) under a fresh memory:// prefix."""
    fs = fsspec.filesystem("memory")
    url = f"memory://zephon-integrity-{uuid.uuid4().hex[:10]}/ds"
    out = []
    for s in range(shards):
        recs = records(rows, start=s * 1000)
        data = _parquet_bytes(recs) if kind == "parquet" else jsonl_bytes(recs)
        fs.pipe(f"{url}/part-{s}.{kind}", gzip.compress(data) if kind.endswith(".gz") else data)
        out.append(recs)
    return url, out


def open_dataset(url: str, kind: str, **kw) -> Dataset:
    ds = Dataset.from_path("web", url, **kw)
    return ds.with_store_options(WHOLE) if kind == "parquet" else ds


def read_all(ds: Dataset) -> list[list[dict]]:
    return [ds.read_table(sid, np.arange(int(n))).to_pylist()
            for sid, n in zip(ds.ids(), ds.counts())]


def damage(path: Path, how: str) -> None:
    time.sleep(0.05)  # past the filesystem's timestamp tick: a write now moves the mtime
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    else:  # written over in place, same size
        with open(path, "r+b") as f:
            f.seek(len(data) // 3)
            f.write(bytes(b ^ 0x5A for b in data[len(data) // 3: len(data) // 3 + 64]))


def the_entry(cache_dir: Path, shard_name: str) -> Path:
    (entry,) = [p for p in (cache_dir / "shards").iterdir()
                if p.name.endswith("-" + shard_name) and ".part-" not in p.name]
    return entry


@pytest.mark.parametrize("how", ["truncate", "empty", "corrupt"])
@pytest.mark.parametrize("kind", ["jsonl", "jsonl.gz", "parquet"])
def test_a_damaged_remote_entry_is_evicted_and_fetched_again(kind, how, cache_dir):
    url, shards = memory_dataset(kind)
    assert read_all(open_dataset(url, kind)) == shards  # every shard now in the node cache
    entry = the_entry(cache_dir, "part-1.jsonl" if kind.startswith("jsonl") else "part-1.parquet")
    damage(entry, how)
    with pytest.warns(RuntimeWarning, match=rf"dataset 'web', shard {url}/part-1\.{kind}: "
                                             rf"cache entry {entry}") as caught:
        assert read_all(open_dataset(url, kind)) == shards  # a later run reads the original
    assert "fetched again" in str(caught[0].message)
    assert entry.stat().st_size == len(jsonl_bytes(shards[1])) or kind == "parquet"
    with warnings_as_errors():  # repaired: the next run trusts it again
        assert read_all(open_dataset(url, kind)) == shards


class warnings_as_errors:
    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error", RuntimeWarning)

    def __exit__(self, *exc):
        self._cm.__exit__(*exc)


@pytest.mark.parametrize("how", ["truncate", "empty", "shifted", "backwards", "foreign",
                                 "dropped", "same_size_and_mtime"])
@pytest.mark.parametrize("where", ["local", "decoded", "ranges"])
def test_a_damaged_line_index_is_rebuilt(where, how, tmp_path, cache_dir):
    if where == "local":
        shards = jsonl_dataset(tmp_path / "d", shards=2, rows=30)
        url, options = str(tmp_path / "d"), None
    else:
        url, shards = memory_dataset("jsonl")
        options = RANGES if where == "ranges" else None
    ds = Dataset.from_path("web", url).with_store_options(options)
    assert read_all(ds) == shards
    indexes = sorted((cache_dir / "lineidx").glob("*.npy"))
    assert len(indexes) == 2
    path = indexes[0]
    offsets = np.load(path)
    time.sleep(0.05)
    if how == "truncate":
        path.write_bytes(path.read_bytes()[:-40])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "shifted":  # spans past the end of the file
        np.save(path, offsets + 7)
    elif how == "backwards":
        np.save(path, np.concatenate(([0], offsets[1:][::-1])))
    elif how == "dropped":  # one line start removed: two records read as one bad line
        np.save(path, np.delete(offsets, 5))
    elif how == "same_size_and_mtime":  # one line start moved; size and mtime put back
        st = path.stat()
        edited = offsets.copy()
        edited[5] += 1
        np.save(path, edited)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert path.stat().st_size == st.st_size
    else:  # the index of a shorter file
        np.save(path, offsets[: len(offsets) // 2])
    with pytest.warns(RuntimeWarning, match=rf"dataset 'web', shard .*: cached line index "
                                             rf"{path} .*rebuilding it"):
        assert read_all(Dataset.from_path("web", url).with_store_options(options)) == shards
    assert np.array_equal(np.load(path), offsets)


def test_an_entry_without_its_check_record_is_not_trusted(cache_dir):
    """What a crash before this scheme (or an older zephon) left: no record, so no proof."""
    url, shards = memory_dataset("jsonl")
    read_all(Dataset.from_path("web", url))
    for record in (cache_dir / "checks").glob("*.json"):
        record.unlink()
    with pytest.warns(RuntimeWarning, match="no readable check record"):
        assert read_all(Dataset.from_path("web", url)) == shards


def test_entries_are_synced_before_they_are_renamed_into_place(tmp_path, monkeypatch):
    import zephon.io.storage.cache as cache_mod

    events = []
    real_fsync, real_replace = cache_mod.fsync_path, os.replace
    monkeypatch.setattr(cache_mod, "fsync_path",
                        lambda p: (events.append(("fsync", Path(p).name)), real_fsync(p)))
    monkeypatch.setattr(cache_mod.os, "replace",
                        lambda a, b: (events.append(("rename", Path(a).name)), real_replace(a, b)))
    cache = ShardCache(tmp_path / "c")
    path = cache.get_or_create("k", "a.bin", lambda part: part.write_bytes(b"payload"))
    part = [name for kind, name in events if kind == "rename" and ".part-" in name
            and name.startswith("k-a.bin")][0]
    assert events.index(("fsync", part)) < events.index(("rename", part))
    assert events[-1] == ("fsync", "shards")  # the rename itself made durable
    record = json.loads(cache.record_path("k").read_text())
    assert record["size"] == 7 and record["mtime_ns"] == path.stat().st_mtime_ns


def test_a_bad_entry_seen_by_lookup_alone_is_evicted(tmp_path):
    cache = ShardCache(tmp_path / "c")
    path = cache.get_or_create("k", "a.bin", lambda part: part.write_bytes(b"x" * 100), size=100)
    assert cache.lookup("k", "a.bin", size=100) == path
    path.write_bytes(b"x" * 40)
    with pytest.warns(RuntimeWarning, match="holds 40 bytes, 100 when it was written"):
        assert cache.lookup("k", "a.bin", size=100, label="dataset 'd', shard s") is None
    assert not path.exists() and cache.stats["corrupt"] == 1
    fresh = cache.get_or_create("k", "a.bin", lambda part: part.write_bytes(b"y" * 100), size=100)
    assert fresh.read_bytes() == b"y" * 100 and cache.stats["redownloads"] == 0


def test_a_disabled_cache_checks_its_entries_too(tmp_path):
    url, shards = memory_dataset("jsonl")
    ds = Dataset.from_path("web", url).with_store_options(
        StoreOptions(cache=CacheOptions(enabled=False)))
    assert read_all(ds) == shards
    cache = ds._rt().res.cache
    assert (cache.root / "checks").is_dir() and list((cache.root / "checks").glob("*.json"))


# -- S3 (moto): the ETag is the MD5 of a single-part upload ----------------------------------


@pytest.fixture(scope="module")
def s3():
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from io_helpers import moto_s3

    with moto_s3() as server:
        yield server


def _s3_shards(s3, kind: str) -> tuple[str, list[list[dict]]]:
    from io_helpers import s3_client

    bucket = f"b-{uuid.uuid4().hex[:12]}"
    client = s3_client(s3["endpoint"])
    client.create_bucket(Bucket=bucket)
    out = []
    for s in range(2):
        recs = records(30, start=s * 1000)
        data = _parquet_bytes(recs) if kind == "parquet" else jsonl_bytes(recs)
        client.put_object(Bucket=bucket, Key=f"ds/part-{s}.{kind}", Body=data)
        out.append(recs)
    return f"s3://{bucket}/ds", out


@pytest.mark.parametrize("how", ["truncate", "empty", "corrupt"])
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_s3_entries_are_checked_against_the_etag_and_repaired(s3, kind, how, cache_dir):
    url, shards = _s3_shards(s3, kind)
    so = s3["storage_options"]
    assert read_all(open_dataset(url, kind, storage_options=so)) == shards
    entry = the_entry(cache_dir, f"part-0.{kind}")
    key = entry.name.split("-", 1)[0]
    record = json.loads((cache_dir / "checks" / f"{key}.json").read_text())
    etag = Dataset.from_path("web", url, storage_options=so)._ref(0).version
    assert etag == f"ETag:{record['verified']['md5']}" and record["verified"]["size"] == "listing"
    damage(entry, how)
    with pytest.warns(RuntimeWarning, match=rf"shard {url}/part-0\.{kind}: cache entry {entry}"):
        assert read_all(open_dataset(url, kind, storage_options=so)) == shards


def test_validate_hash_false_checks_sizes_only(s3, cache_dir):
    url, shards = _s3_shards(s3, "jsonl")
    ds = Dataset.from_path("web", url, storage_options=s3["storage_options"],
                           ).with_store_options(StoreOptions(cache=CacheOptions(
                               root=str(cache_dir / "sizes-only"), validate_hash=False)))
    assert read_all(ds) == shards
    records_ = [json.loads(p.read_text()) for p in (cache_dir / "sizes-only" / "checks").iterdir()]
    assert len(records_) == 2
    assert all(r["verified"]["size"] == "listing" and "md5" not in r["verified"] for r in records_)


def test_s3_object_rewritten_with_the_same_size_is_refused_by_its_etag(s3, cache_dir):
    from io_helpers import s3_client

    from zephon.io.errors import StorageError

    url, shards = _s3_shards(s3, "jsonl")
    bucket = url.split("/")[2]
    ds = Dataset.from_path("web", url, storage_options=s3["storage_options"])  # listed
    data = bytearray(jsonl_bytes(shards[0]))
    data[10:12] = b"99"  # same size, other bytes
    s3_client(s3["endpoint"]).put_object(Bucket=bucket, Key="ds/part-0.jsonl", Body=bytes(data))
    with pytest.raises(StorageError, match=r"dataset 'web', shard .*part-0\.jsonl: its version "
                                           r"is ETag:.*changed since the dataset was opened"):
        ds.with_store_options({"cache": {"root": str(cache_dir / "fresh")}}).read_table(0, [0])


def test_an_etag_that_is_not_an_md5_costs_one_more_download_per_location(s3, monkeypatch):
    """SSE-KMS objects: the ETag is no digest of the content. Two identical downloads and an
    unchanged version show it; later shards of that location are not compared."""
    from zephon.io.storage import fetch_checks
    from zephon.io.storage.location import Location

    url, shards = _s3_shards(s3, "jsonl")
    ds = Dataset.from_path("web", url, storage_options=s3["storage_options"]).with_store_options(
        StoreOptions(cache=CacheOptions(open_retry_initial_backoff=0.001)))
    fake = "ETag:" + "0" * 32
    monkeypatch.setattr(Dataset, "_ref", lambda self, sid, real=Dataset._ref: _with_version(
        real(self, sid), fake))
    monkeypatch.setattr(Location, "current_version", lambda self, name: fake)
    gets = []
    real_read = Location.read_bytes
    monkeypatch.setattr(Location, "read_bytes",
                        lambda self, name, size=None: (gets.append(name), real_read(self, name, size))[1])
    assert read_all(ds) == shards
    assert gets == ["part-0.jsonl", "part-0.jsonl", "part-1.jsonl"]
    assert url in fetch_checks._etag_not_md5


def _with_version(ref, version):
    import dataclasses

    return dataclasses.replace(ref, version=version)
