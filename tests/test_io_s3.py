"""Datasets on a real S3 endpoint (moto's standalone server over HTTP), read through s3fs."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from io_helpers import jsonl_bytes, moto_s3, records, s3_client

from zephon.io import (
    CacheOptions,
    DataError,
    Dataset,
    ShardMissingError,
    ShardPrefetcher,
    StoreOptions,
    build_index,
)
from zephon.io.storage.cache import cache_for

pytest.importorskip("s3fs")
pytest.importorskip("moto")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def s3():
    with moto_s3() as server:
        yield server


@pytest.fixture
def bucket(s3):
    name = f"b-{uuid.uuid4().hex[:12]}"
    s3_client(s3["endpoint"]).create_bucket(Bucket=name)
    return name


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def put(s3, bucket: str, key: str, data: bytes) -> None:
    s3_client(s3["endpoint"]).put_object(Bucket=bucket, Key=key, Body=data)


def parquet_bytes(recs, row_group_size=10) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(recs), sink, row_group_size=row_group_size)
    return sink.getvalue().to_pybytes()


def upload_jsonl(s3, bucket, prefix="ds", shards=3, rows=20, gz=False):
    out = []
    for s in range(shards):
        recs = records(rows, start=s * 100)
        data = jsonl_bytes(recs)
        name = f"{prefix}/part-{s}.jsonl" + (".gz" if gz else "")
        put(s3, bucket, name, gzip.compress(data) if gz else data)
        out.append(recs)
    return out


def indexed_jsonl(s3, bucket, *, shards: int, rows: int) -> tuple[list, Dataset]:
    """JSONL shards uploaded under ``ds/``, its index.json written, and the dataset opened."""
    uploaded = upload_jsonl(s3, bucket, shards=shards, rows=rows)
    build_index("jsonl", f"s3://{bucket}/ds", progress=False,
                storage_options=s3["storage_options"])
    return uploaded, Dataset.from_path("web", f"s3://{bucket}/ds",
                                       storage_options=s3["storage_options"])


def cache_stats(ds: Dataset) -> dict:
    return ds._rt().res.cache.stats


@pytest.mark.parametrize("gz", [False, True])
def test_jsonl_over_s3(s3, bucket, gz):
    shards = upload_jsonl(s3, bucket, gz=gz)
    ds = Dataset.from_path("web", f"s3://{bucket}/ds", storage_options=s3["storage_options"])
    assert ds.fmt == "jsonl" and ds.counts().tolist() == [20, 20, 20]
    for sid in ds.ids():
        assert ds.read_table(sid, [19, 0, 5]).to_pylist() == [shards[sid][i] for i in (19, 0, 5)]
        assert ds.read_payloads(sid, [3]) == [shards[sid][3]]
    assert cache_stats(ds)["downloads"] == 3  # discovery downloaded each shard once, reads reuse


def test_parquet_over_s3_reads_row_groups_by_range_then_whole(s3, bucket, cache_dir):
    recs = records(200)
    put(s3, bucket, "p/a.parquet", parquet_bytes(recs, row_group_size=20))
    ds = Dataset.from_path("pq", f"s3://{bucket}/p", storage_options=s3["storage_options"])
    assert ds.counts().tolist() == [200]
    assert ds.read_table(0, [5, 150]).to_pylist() == [recs[5], recs[150]]
    assert not list((cache_dir / "shards").glob("*a.parquet"))  # ranges only, no copy yet
    got = ds.read_table(0, np.arange(199, -1, -1)).to_pylist()  # wants the whole shard
    assert got == recs[::-1]
    assert len(list((cache_dir / "shards").glob("*a.parquet"))) == 1
    assert cache_stats(ds)["downloads"] == 1


def test_ranges_mode_reads_jsonl_lines_without_a_copy(s3, bucket, cache_dir):
    shards, ds = indexed_jsonl(s3, bucket, shards=2, rows=30)
    ds = ds.with_store_options(StoreOptions(remote_reads="ranges"))
    rows = [29, 3, 4, 5, 17, 3]
    assert ds.read_table(1, rows).to_pylist() == [shards[1][i] for i in rows]
    assert ds.read_payloads(0, [0, 29]) == [shards[0][0], shards[0][29]]
    assert not list((cache_dir / "shards").iterdir())  # nothing but line indexes
    assert len(list((cache_dir / "lineidx").glob("*.npy"))) == 2


def test_index_on_s3_means_no_shard_is_touched_at_start(s3, bucket, cache_dir):
    upload_jsonl(s3, bucket, shards=3, rows=10)
    written = build_index("jsonl", f"s3://{bucket}/ds", progress=False,
                          storage_options=s3["storage_options"])
    assert written == f"s3://{bucket}/ds/index.json"
    client = s3_client(s3["endpoint"])
    for s in range(3):  # shards gone: only the index can answer
        client.delete_object(Bucket=bucket, Key=f"ds/part-{s}.jsonl")
    ds = Dataset.from_path("web", f"s3://{bucket}/ds", storage_options=s3["storage_options"])
    assert ds.counts().tolist() == [10, 10, 10]
    assert cache_stats(ds)["downloads"] == 0


def test_missing_prefix_is_file_not_found(s3, bucket):
    with pytest.raises(FileNotFoundError, match="no-such-prefix"):
        Dataset.from_path("web", f"s3://{bucket}/no-such-prefix",
                          storage_options=s3["storage_options"])


def s3_calls(monkeypatch) -> list[tuple[str, dict]]:
    """Every request s3fs makes from here on: (method, its parameters)."""
    import s3fs

    calls: list[tuple[str, dict]] = []
    original = s3fs.S3FileSystem._call_s3

    async def counted(self, method, *args, **kwargs):
        calls.append((method, kwargs))
        return await original(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counted)
    return calls


def test_indexed_dataset_opens_with_one_request(s3, bucket, monkeypatch):
    """index.json proves the root exists: no HEAD / LIST of the prefix before reading it."""
    import s3fs

    upload_jsonl(s3, bucket, shards=2, rows=5)
    build_index("jsonl", f"s3://{bucket}/ds", progress=False,
                storage_options=s3["storage_options"])
    s3fs.S3FileSystem(**s3["storage_options"]).invalidate_cache()  # a cold listing
    calls = s3_calls(monkeypatch)
    ds = Dataset.from_path("web", f"s3://{bucket}/ds", storage_options=s3["storage_options"])
    assert ds.counts().tolist() == [5, 5]
    methods = [m for m, _ in calls]
    assert "list_objects_v2" not in methods and len(methods) <= 2  # GET (+ HEAD in cat_file)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_shard_download_is_one_get(s3, bucket, monkeypatch, fmt):
    """The size is known from index.json, so s3fs is not left to look it up (a HEAD) before
    the GET; the bytes are the same."""
    import s3fs

    if fmt == "jsonl":
        upload_jsonl(s3, bucket, shards=2, rows=30)
        want = records(30, start=100)
    else:
        for s in range(2):
            put(s3, bucket, f"ds/part-{s}.parquet", parquet_bytes(records(30, start=s * 100)))
        want = records(30, start=100)
    build_index(fmt, f"s3://{bucket}/ds", progress=False, storage_options=s3["storage_options"])
    ds = Dataset.from_path("web", f"s3://{bucket}/ds", storage_options=s3["storage_options"])
    s3fs.S3FileSystem(**s3["storage_options"]).invalidate_cache()  # nothing known from a listing
    calls = s3_calls(monkeypatch)
    ds.warm([1])
    assert [(m, kw.get("Key")) for m, kw in calls] == [("get_object", f"ds/part-1.{fmt}")]
    assert ds.read_table(1, list(range(30))).to_pylist() == want
    assert len(calls) == 1  # read from the node cache


def test_shard_larger_than_s3fs_block_keeps_its_ranged_gets(s3, bucket, monkeypatch):
    """Above s3fs's block size its own choice (parallel ranged GETs after a HEAD) stands."""
    import s3fs

    _, ds = indexed_jsonl(s3, bucket, shards=1, rows=40)
    size = int(ds._catalog.sizes[0])
    fs = s3fs.S3FileSystem(**s3["storage_options"])
    monkeypatch.setattr(fs, "default_block_size", size // 3)
    calls = s3_calls(monkeypatch)
    assert ds.read_payloads(0, [39]) == [records(40)[39]]
    gets = [kw.get("Range") for m, kw in calls if m == "get_object"]
    assert len(gets) >= 3 and all(r is not None for r in gets)


def test_shard_deleted_after_discovery_names_it(s3, bucket):
    _, ds = indexed_jsonl(s3, bucket, shards=2, rows=5)
    s3_client(s3["endpoint"]).delete_object(Bucket=bucket, Key="ds/part-1.jsonl")
    assert ds.read_payloads(0, [0]) == [records(5)[0]]
    with pytest.raises(ShardMissingError) as e:
        ds.read_table(1, [0])
    assert f"s3://{bucket}/ds/part-1.jsonl" in str(e.value) and e.value.dataset == "web"


def test_cache_limit_evicts_least_recently_used(s3, bucket, tmp_path):
    _, ds = indexed_jsonl(s3, bucket, shards=4, rows=50)
    size = len(jsonl_bytes(records(50)))
    limit = int(size * 2.5)
    ds = ds.with_store_options(StoreOptions(cache=CacheOptions(
        root=str(tmp_path / "small"), limit_bytes=limit, min_slack_bytes=0, max_slack_bytes=0)))
    for sid in ds.ids():
        assert ds.read_payloads(sid, [49]) == [records(50, start=sid * 100)[49]]
    cache = cache_for(tmp_path / "small", limit, 0, 0)
    assert cache.usage() <= limit
    assert cache.stats["evictions"] >= 2
    assert len(list(cache.shards.iterdir())) == 2


CHILD = textwrap.dedent("""
    import json, sys
    from zephon.io import Dataset
    ds = Dataset.from_path("web", sys.argv[1])  # endpoint and keys from the environment
    total = sum(ds.read_table(sid, list(range(c))).num_rows for sid, c in zip(ds.ids(), ds.counts()))
    print(json.dumps({"rows": total, "downloads": ds._rt().res.cache.stats["downloads"],
                      "last": ds.read_payloads(5, [399])[0]}))
""")


def test_two_processes_download_each_shard_once(s3, bucket, tmp_path):
    """Two processes on one node share the cache; fsspec's FSSPEC_S3_ENDPOINT_URL is honoured
    (the children get no storage_options at all)."""
    shards = upload_jsonl(s3, bucket, shards=6, rows=400, gz=True)
    env = dict(os.environ, ZEPHON_CACHE_DIR=str(tmp_path / "node"), PYTHONPATH=str(REPO),
               FSSPEC_S3_ENDPOINT_URL=s3["endpoint"], **s3["env"])
    args = [sys.executable, "-c", CHILD, f"s3://{bucket}/ds"]
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert [r["rows"] for r in results] == [2400, 2400]
    assert [r["last"] for r in results] == [shards[5][399]] * 2
    assert sum(r["downloads"] for r in results) == 6
    assert len(list((tmp_path / "node" / "shards").iterdir())) == 6


def test_warm_and_prefetcher_fill_the_cache(s3, bucket, cache_dir):
    put(s3, bucket, "p/a.parquet", parquet_bytes(records(30)))
    put(s3, bucket, "p/b.parquet", parquet_bytes(records(30, start=50)))
    build_index("parquet", f"s3://{bucket}/p", progress=False,
                storage_options=s3["storage_options"])
    ds = Dataset.from_path("pq", f"s3://{bucket}/p", storage_options=s3["storage_options"])
    with ShardPrefetcher([ds], parallelism=2) as pf:
        futures = pf.submit(0, [0, 1]) + pf.submit(0, [0])
        pf.wait(timeout=60)
        assert all(f.done() for f in futures) and pf.errors() == []
    assert len(list((cache_dir / "shards").glob("*.parquet"))) == 2
    assert cache_stats(ds)["downloads"] == 2
    assert ds.read_table(1, [29, 0]).to_pylist() == [records(30, start=50)[29],
                                                     records(30, start=50)[0]]
    assert cache_stats(ds)["downloads"] == 2  # reads used the warmed copies


def test_row_groups_of_a_remote_shard_are_known_once_it_is_in_the_node_cache(s3, bucket):
    put(s3, bucket, "p/a.parquet", parquet_bytes(records(30), row_group_size=8))
    ds = Dataset.from_path("pq", f"s3://{bucket}/p", storage_options=s3["storage_options"])
    assert ds.row_group_starts(0) is None  # learning it now would cost a request
    ds.warm([0])
    assert ds.row_group_starts(0).tolist() == [0, 8, 16, 24, 30]


def test_prefetcher_keeps_errors_for_the_fetch_to_report(s3, bucket):
    _, ds = indexed_jsonl(s3, bucket, shards=2, rows=3)
    s3_client(s3["endpoint"]).delete_object(Bucket=bucket, Key="ds/part-0.jsonl")
    pf = ShardPrefetcher([ds], parallelism=1)
    pf.submit(0, [0, 1])
    with pytest.raises(ShardMissingError, match="part-0.jsonl"):
        pf.wait(timeout=60)
    pf.close()
    pf.close()
    with pytest.raises(RuntimeError):
        pf.submit(0, [1])


def _cached_names(cache_dir: Path) -> list[str]:
    return sorted(p.name.split("-", 1)[1] for p in (cache_dir / "shards").iterdir()
                  if ".part-" not in p.name)


def test_reading_shards_in_order_downloads_the_next_ones_ahead(s3, bucket, cache_dir):
    from zephon.io.ahead import download_ahead

    shards, ds = indexed_jsonl(s3, bucket, shards=5, rows=30)
    assert ds.read_table(0, [29]).to_pylist() == [shards[0][29]]
    download_ahead.drain()
    assert _cached_names(cache_dir) == ["part-0.jsonl"]  # a look at one shard: no guess
    assert ds.read_table(1, [0]).to_pylist() == [shards[1][0]]
    download_ahead.drain()  # shard 1 right after shard 0: the two after it come down
    assert _cached_names(cache_dir) == [f"part-{i}.jsonl" for i in range(4)]
    for sid in ds.ids():
        assert ds.read_table(sid, np.arange(30)).to_pylist() == shards[sid]
    download_ahead.drain()
    stats = cache_stats(ds)
    assert stats["downloads"] == 5 and stats["redownloads"] == 0  # each shard fetched once


def test_shards_opened_out_of_order_are_not_guessed(s3, bucket, cache_dir):
    from zephon.io.ahead import download_ahead

    _, ds = indexed_jsonl(s3, bucket, shards=4, rows=5)
    ds.read_table(2, [0])
    ds.read_table(0, [0])
    ds.read_table(3, [0])
    download_ahead.drain()
    assert _cached_names(cache_dir) == ["part-0.jsonl", "part-2.jsonl", "part-3.jsonl"]


def test_read_ahead_hint_downloads_a_remote_shard_without_opening_it(s3, bucket, cache_dir):
    from zephon.io.ahead import download_ahead

    shards, ds = indexed_jsonl(s3, bucket, shards=3, rows=10)
    ds.read_ahead(2, np.array([4, 1]))  # what the inline engine says one block ahead
    download_ahead.drain()
    assert _cached_names(cache_dir) == ["part-2.jsonl"]
    assert not ds._rt().readers  # only downloaded: the read opens it
    assert ds.read_table(2, [4, 1]).to_pylist() == [shards[2][4], shards[2][1]]
    assert cache_stats(ds)["downloads"] == 1


def test_a_failed_guess_is_reported_by_the_read_that_needs_the_shard(s3, bucket):
    from zephon.io.ahead import download_ahead

    _, ds = indexed_jsonl(s3, bucket, shards=4, rows=5)
    s3_client(s3["endpoint"]).delete_object(Bucket=bucket, Key="ds/part-2.jsonl")
    assert ds.read_payloads(0, [4]) == [records(5)[4]]
    assert ds.read_payloads(1, [4]) == [records(5, start=100)[4]]  # guesses 2 (lost) and 3
    download_ahead.drain()
    assert ds.read_payloads(3, [0]) == [records(5, start=300)[0]]
    with pytest.raises(ShardMissingError, match="part-2.jsonl"):
        ds.read_table(2, [0])


def test_guesses_never_evict_under_a_cache_limit(s3, bucket, tmp_path):
    from zephon.io.ahead import download_ahead

    _, ds = indexed_jsonl(s3, bucket, shards=5, rows=50)
    limit = int(len(jsonl_bytes(records(50))) * 2.5)
    ds = ds.with_store_options(StoreOptions(cache=CacheOptions(
        root=str(tmp_path / "small"), limit_bytes=limit, min_slack_bytes=0, max_slack_bytes=0)))
    cache = cache_for(tmp_path / "small", limit, 0, 0)
    assert ds.read_payloads(0, [49]) == [records(50)[49]]
    assert ds.read_payloads(1, [49]) == [records(50, start=100)[49]]
    download_ahead.drain()  # guesses 2 and 3 would each evict shard 0 or 1: both skipped
    ds.close()
    assert ds.read_payloads(0, [0]) == [records(50)[0]]  # still cached: no second download
    assert cache.stats["downloads"] == 2 and cache.stats["redownloads"] == 0
    for sid in ds.ids():  # a pass in order under the limit: reads evict, guesses never do
        assert ds.read_payloads(sid, [49]) == [records(50, start=sid * 100)[49]]
        download_ahead.drain()
    assert cache.usage() <= limit
    assert cache.stats["redownloads"] == 0 and cache.stats["downloads"] == 5


def test_index_names_outside_the_prefix_are_refused(s3, bucket):
    uploaded = upload_jsonl(s3, bucket, shards=1, rows=3)
    put(s3, bucket, "private/secrets.jsonl", jsonl_bytes([{"id": 1, "text": "secret"}]))
    other = f"{bucket}-x"
    s3_client(s3["endpoint"]).create_bucket(Bucket=other)
    put(s3, other, "ds/part-0.jsonl", jsonl_bytes([{"id": 2, "text": "elsewhere"}]))
    opts = s3["storage_options"]
    for name in ("../private/secrets.jsonl", f"s3://{bucket}/private/secrets.jsonl",
                 f"s3://{other}/ds/part-0.jsonl", f"/{bucket}/ds/part-0.jsonl",
                 "file:///etc/secrets.jsonl", f"gs://{bucket}/ds/part-0.jsonl"):
        put(s3, bucket, "ds/index.json", json.dumps(
            {"format": "jsonl", "shards": [{"name": name, "rows": 1}]}).encode())
        with pytest.raises(DataError, match="entry #0.*outside the dataset root"):
            Dataset.from_path("web", f"s3://{bucket}/ds", storage_options=opts)
    put(s3, bucket, "ds/index.json", json.dumps({"format": "jsonl", "shards": [
        {"name": f"s3://{bucket}/ds/part-0.jsonl", "rows": 3}]}).encode())
    ds = Dataset.from_path("web", f"s3://{bucket}/ds", storage_options=opts)
    assert ds.read_payloads(0, [2]) == uploaded[0][2:]
