"""zephon.io benchmarks (pytest-benchmark).

    python -m pytest benchmarks/bench_io.py --benchmark-only -p no:cacheprovider

- start-up (``from_path`` + first read) of a 2,000-shard JSONL dataset, with and without
  ``index.json``;
- read_table throughput over ~2 KB records, JSONL and Parquet, sequential 1024-row ranges
  versus random rows within each shard (``ZEPHON_BENCH_ROWS`` records in 10 shards, default
  100,000);
- a dataset read over moto's standalone S3 server, run as a separate process (download + index +
  parse every row, shard by shard with the dataset's own download-ahead and with the shard
  prefetcher; a ``batch(32)`` pipeline over it; and the download into the node cache alone) versus fetching the same objects with s3fs directly. Each round times s3fs and
  Zephon side by side; the ratio of the medians is the issue's target check (>= 80%).

Rows/s and MB/s land in each benchmark's ``extra_info`` (``--benchmark-json`` keeps them).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephon.io import Dataset, build_index
from zephon.io.formats.row_group_cache import row_group_cache

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


S3_SHARDS = 8
S3_ROUNDS = 11
S3_TARGET = 0.8  # issue #3: Zephon's read >= 80% of s3fs reading the same bytes directly


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def _moto_server_process() -> Iterator[str]:
    """moto's standalone S3 server in its own process; yields the endpoint URL.

    A server thread inside the benchmark process (``ThreadedMotoServer``) would compete for the
    GIL and the cores with the reader being measured, penalising whichever side does more
    Python work; a separate process is what a client of a real object store sees.
    """
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                             "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def s3_corpus(tmp_path_factory):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    import boto3
    import s3fs

    with _moto_server_process() as endpoint:
        opts = {"key": "k", "secret": "s", "endpoint_url": endpoint}
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="k",
                     aws_secret_access_key="s", region_name="us-east-1").create_bucket(Bucket="bench")
        fs = s3fs.S3FileSystem(**opts)
        rng = random.Random(1)
        for s in range(S3_SHARDS):
            fs.pipe(f"bench/ds/part-{s}.jsonl",
                    "".join(json.dumps(_doc(rng, s * 2000 + i)) + "\n" for i in range(2000)).encode())
        os.environ["ZEPHON_CACHE_DIR"] = str(tmp_path_factory.mktemp("s3-index-cache"))
        build_index("jsonl", "s3://bench/ds", progress=False, storage_options=opts)
        # the s3fs side reads exactly the shards the dataset reads (not index.json)
        paths = sorted(p for p in fs.find("bench/ds") if p.endswith(".jsonl"))
        yield {"opts": opts, "fs": fs, "paths": paths,
               "bytes": sum(fs.size(p) for p in paths)}


def _s3fs_read(corpus: dict) -> int:
    """The baseline: every shard's bytes fetched with s3fs, one object after the other."""
    fs = corpus["fs"]
    return sum(len(fs.cat_file(p)) for p in corpus["paths"])


def _against_s3fs(benchmark, corpus: dict, tmp_path: Path, run) -> object:
    """Time ``run`` (Zephon) with a fresh node cache per round, and s3fs reading the same bytes
    directly in the same rounds, just before it: both see the same load on a shared machine.
    Medians, their ratio (the issue's target check) and the CPU time this process spent (all
    its threads; the server's is apart) land in ``extra_info``."""
    direct: list[float] = []
    cpu = {"zephon": [], "s3fs": []}
    previous: list[Path] = []

    def setup() -> None:
        # the previous round's cache is removed, not left behind: on a VM, a file written into
        # pages never used before costs several times one written into recycled pages
        for old in previous:
            shutil.rmtree(old, ignore_errors=True)
        previous[:] = [tmp_path / f"cache-{uuid.uuid4().hex[:8]}"]
        os.environ["ZEPHON_CACHE_DIR"] = str(previous[0])
        c0, t0 = time.process_time(), time.perf_counter()
        assert _s3fs_read(corpus) == corpus["bytes"]
        direct.append(time.perf_counter() - t0)
        cpu["s3fs"].append(time.process_time() - c0)

    def measured():
        c0 = time.process_time()
        try:
            return run()
        finally:
            cpu["zephon"].append(time.process_time() - c0)

    try:
        result = benchmark.pedantic(measured, setup=setup, rounds=S3_ROUNDS, iterations=1)
    finally:
        for old in previous:
            shutil.rmtree(old, ignore_errors=True)
    mb = corpus["bytes"] / 1e6
    ours, theirs = benchmark.stats.stats.median, statistics.median(direct)
    ratio = theirs / ours
    benchmark.extra_info.update({
        "MB_per_s": round(mb / ours, 1),
        "s3fs_direct_MB_per_s": round(mb / theirs, 1),
        "ratio_vs_s3fs_direct": round(ratio, 3),
        "target_ratio": S3_TARGET,
        "target_met": ratio >= S3_TARGET,
        "cpu_ms": round(statistics.median(cpu["zephon"]) * 1e3, 1),
        "s3fs_direct_cpu_ms": round(statistics.median(cpu["s3fs"]) * 1e3, 1),
    })
    print(f"\n{benchmark.name}: {mb / ours:.1f} MB/s vs s3fs direct {mb / theirs:.1f} MB/s "
          f"(medians of {S3_ROUNDS}) = {ratio:.0%} (target {S3_TARGET:.0%}: "
          f"{'met' if ratio >= S3_TARGET else 'NOT met'}); CPU "
          f"{benchmark.extra_info['cpu_ms']} ms vs {benchmark.extra_info['s3fs_direct_cpu_ms']} ms")
    return result


def _read_every_row(ds: Dataset) -> int:
    """Every row of every shard parsed, shard after shard; the readers are closed at the end."""
    try:
        return sum(ds.read_table(int(sid), np.arange(n)).num_rows
                   for sid, n in zip(ds.ids(), ds.counts()))
    finally:
        ds.close()


def test_s3_dataset_read(benchmark, s3_corpus, tmp_path):
    """Open the dataset, then read and parse every row, shard after shard, as a plain loop: the
    first two shards are downloaded when their reads need them; from the second on, the
    dataset downloads the next two while one is parsed (zephon/io/ahead/download_ahead.py)."""
    def run():
        ds = Dataset.from_path("s3", "s3://bench/ds", storage_options=s3_corpus["opts"])
        return _read_every_row(ds)

    assert _against_s3fs(benchmark, s3_corpus, tmp_path, run) == 16000


def test_s3_dataset_read_prefetched(benchmark, s3_corpus, tmp_path):
    """The same reads while a ShardPrefetcher downloads the shards ahead of them, as a pipeline
    with ``.prefetch()`` reads (its default of 4 threads)."""
    from zephon.io import ShardPrefetcher

    def run():
        ds = Dataset.from_path("s3", "s3://bench/ds", storage_options=s3_corpus["opts"])
        with ShardPrefetcher([ds], parallelism=4) as pf:
            pf.submit(0, ds.ids().tolist())
            rows = _read_every_row(ds)
            pf.wait()
        return rows

    assert _against_s3fs(benchmark, s3_corpus, tmp_path, run) == 16000


def test_s3_pipeline_read(benchmark, s3_corpus, tmp_path):
    """What a training job does: a pipeline (inline engine, ``batch(32)``) over the S3 dataset,
    every record once, from a cold node cache. The work source visits the shards in a shuffled
    order; the engine's hints download the shard the next pointer block reads ahead of it."""
    from zephon import Pipeline
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    def run():
        ds = Dataset.from_path("s3", "s3://bench/ds", storage_options=s3_corpus["opts"])
        ws = StaticMixtureWorkSource([ds], MixtureSpec({"s3": 1.0}), seed=3)
        try:
            return sum(len(b) for b in Pipeline(ws).batch(32, drop_last=False)
                       .options(num_workers=0))
        finally:
            ds.close()

    assert _against_s3fs(benchmark, s3_corpus, tmp_path, run) == 16000


def test_s3_dataset_download_into_cache(benchmark, s3_corpus, tmp_path):
    """The transfer alone (with line indexing, without parsing): every shard warmed into a fresh
    node cache by 4 threads."""
    from zephon.io import ShardPrefetcher

    def run():
        ds = Dataset.from_path("s3", "s3://bench/ds", storage_options=s3_corpus["opts"])
        with ShardPrefetcher([ds], parallelism=4) as pf:
            pf.submit(0, ds.ids().tolist())
            pf.wait()
        return ds._rt().res.cache.stats["downloads"]

    assert _against_s3fs(benchmark, s3_corpus, tmp_path, run) == S3_SHARDS


def test_s3fs_direct_read(benchmark, s3_corpus):
    total = benchmark.pedantic(_s3fs_read, args=(s3_corpus,), rounds=S3_ROUNDS, iterations=1)
    assert total == s3_corpus["bytes"]
    benchmark.extra_info["MB_per_s"] = round(total / 1e6 / benchmark.stats.stats.median, 1)
