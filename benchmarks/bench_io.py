"""zephon.io benchmarks (pytest-benchmark).

    python -m pytest benchmarks/bench_io.py --benchmark-only -p no:cacheprovider

- start-up (``from_path`` + first read) of a 2,000-shard JSONL dataset, with and without
  ``index.json``;
- read_table throughput over ~2 KB records, JSONL and Parquet, sequential 1024-row ranges
  versus random rows within each shard (``ZEPHON_BENCH_ROWS`` records in 10 shards, default
  100,000);
- a dataset read over a moto S3 server (download + index + parse every row; and the download
  into the node cache alone) versus fetching the same objects with s3fs directly.

Rows/s and MB/s land in each benchmark's ``extra_info`` (``--benchmark-json`` keeps them).
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephon.io import Dataset, build_index
from zephon.io.parquet import row_group_cache

ROWS = int(os.environ.get("ZEPHON_BENCH_ROWS", "100000"))
SHARDS = 10
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


@pytest.fixture(autouse=True)
def restore_env():
    saved = os.environ.get("ZEPHON_CACHE_DIR")
    yield
    if saved is None:
        os.environ.pop("ZEPHON_CACHE_DIR", None)
    else:
        os.environ["ZEPHON_CACHE_DIR"] = saved


def _fresh_cache(tmp: Path) -> None:
    os.environ["ZEPHON_CACHE_DIR"] = str(tmp / f"cache-{uuid.uuid4().hex[:8]}")


def _doc(rng: random.Random, i: int) -> dict:
    text = " ".join(rng.choice(WORDS) for _ in range(330))[:1900]
    return {"id": i, "url": f"https://example.com/{i}", "text": text, "score": rng.random()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    per = ROWS // SHARDS
    for s in range(SHARDS):
        recs = [_doc(rng, s * per + i) for i in range(per)]
        (root / "jsonl").mkdir(exist_ok=True)
        with open(root / "jsonl" / f"part-{s:02d}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)
        (root / "parquet").mkdir(exist_ok=True)
        pq.write_table(pa.Table.from_pylist(recs), root / "parquet" / f"part-{s:02d}.parquet",
                       row_group_size=1024)
    os.environ["ZEPHON_CACHE_DIR"] = str(root / "cache")
    return {fmt: Dataset.from_path(fmt, root / fmt) for fmt in ("jsonl", "parquet")}


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("many")
    for d in ("plain", "indexed"):
        (root / d).mkdir()
        for s in range(2000):
            lines = "".join(json.dumps({"id": s * 20 + i, "text": "x" * 100}) + "\n"
                            for i in range(20))
            (root / d / f"shard-{s:05d}.jsonl").write_text(lines)
    os.environ["ZEPHON_CACHE_DIR"] = str(root / "index-cache")
    build_index("jsonl", root / "indexed", progress=False)
    return root


def _startup(benchmark, root: Path, tmp_path):
    def run():
        ds = Dataset.from_path("many", root)
        return ds.read_table(int(ds.ids()[-1]), [0]).num_rows

    result = benchmark.pedantic(run, setup=lambda: _fresh_cache(tmp_path), rounds=3,
                                iterations=1)
    assert result == 1


def test_startup_2000_shards_without_index(benchmark, many_shards, tmp_path):
    _startup(benchmark, many_shards / "plain", tmp_path)


def test_startup_2000_shards_with_index(benchmark, many_shards, tmp_path):
    _startup(benchmark, many_shards / "indexed", tmp_path)


def _read_all(ds: Dataset, order: str) -> int:
    rng = np.random.default_rng(0)
    rows = 0
    for sid, n in zip(ds.ids(), ds.counts()):
        idx = np.arange(n) if order == "sequential" else rng.permutation(n)
        for a in range(0, n, 1024):
            rows += ds.read_table(int(sid), idx[a:a + 1024]).num_rows
    return rows


@pytest.mark.parametrize("order", ["sequential", "random"])
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_read_table_throughput(benchmark, corpus, fmt, order):
    ds = corpus[fmt]
    for sid in ds.ids():
        ds.read_table(int(sid), [0])  # readers open (line index / footer) outside the timing
    rows = benchmark.pedantic(_read_all, args=(ds, order), setup=row_group_cache().clear,
                              rounds=3, iterations=1)
    best = benchmark.stats.stats.min
    benchmark.extra_info["rows_per_s"] = round(rows / best)
    benchmark.extra_info["MB_per_s"] = round(float(ds.raw_bytes().sum()) / 1e6 / best, 1)


@pytest.fixture(scope="module")
def s3_corpus(tmp_path_factory):
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    import boto3
    import s3fs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    opts = {"key": "k", "secret": "s", "endpoint_url": endpoint}
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s",
                 region_name="us-east-1").create_bucket(Bucket="bench")
    fs = s3fs.S3FileSystem(**opts)
    rng = random.Random(1)
    for s in range(8):
        fs.pipe(f"bench/ds/part-{s}.jsonl",
                "".join(json.dumps(_doc(rng, s * 2000 + i)) + "\n" for i in range(2000)).encode())
    os.environ["ZEPHON_CACHE_DIR"] = str(tmp_path_factory.mktemp("s3-index-cache"))
    build_index("jsonl", "s3://bench/ds", progress=False, storage_options=opts)
    yield {"opts": opts, "fs": fs, "bytes": sum(fs.du("bench/ds", total=False).values())}
    server.stop()


def test_s3_dataset_read(benchmark, s3_corpus, tmp_path):
    def run():
        ds = Dataset.from_path("s3", "s3://bench/ds", storage_options=s3_corpus["opts"])
        return sum(ds.read_table(int(sid), np.arange(n)).num_rows
                   for sid, n in zip(ds.ids(), ds.counts()))

    rows = benchmark.pedantic(run, setup=lambda: _fresh_cache(tmp_path), rounds=3, iterations=1)
    assert rows == 16000
    benchmark.extra_info["MB_per_s"] = round(s3_corpus["bytes"] / 1e6 / benchmark.stats.stats.min, 1)


def test_s3_dataset_download_into_cache(benchmark, s3_corpus, tmp_path):
    """The transfer alone: every shard warmed into a fresh node cache by 4 threads."""
    from zephon.io import ShardPrefetcher

    def run():
        ds = Dataset.from_path("s3", "s3://bench/ds", storage_options=s3_corpus["opts"])
        with ShardPrefetcher([ds], parallelism=4) as pf:
            pf.submit(0, ds.ids().tolist())
            pf.wait()
        return ds._rt().res.cache.stats["downloads"]

    assert benchmark.pedantic(run, setup=lambda: _fresh_cache(tmp_path), rounds=3,
                              iterations=1) == 8
    benchmark.extra_info["MB_per_s"] = round(s3_corpus["bytes"] / 1e6 / benchmark.stats.stats.min, 1)


def test_s3fs_direct_read(benchmark, s3_corpus):
    fs = s3_corpus["fs"]
    paths = [p for p in fs.find("bench/ds") if p.endswith(".jsonl")]

    def run():
        return sum(len(fs.cat_file(p)) for p in paths)

    total = benchmark.pedantic(run, rounds=3, iterations=1)
    assert total > 0
    benchmark.extra_info["MB_per_s"] = round(total / 1e6 / benchmark.stats.stats.min, 1)
