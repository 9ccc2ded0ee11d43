"""Chaos in the node cache: entries truncated while a pipeline reads them, and between runs.

Compressed JSONL is decoded into the node cache and line-indexed there, and readers map the
decoded copies. Seeded runs truncate random cache entries (decoded shards, line indexes) between
runs (inline and 2 workers) and, with 2 worker processes, at random batches while the workers
read them. A worker whose mapped file shrinks under it dies of SIGBUS and is replaced, or reads
zeros to the end of the last page, which the read finds is a changed file and retries on a fresh
reader; a reader that opens a damaged entry finds its size wrong, evicts it and decodes the shard
again. Either way the stream is the undisturbed one, and nothing is left behind.
"""

from __future__ import annotations

import glob
import gzip
import os
import shutil
import warnings

import numpy as np
import pytest
from conftest import shm_entries

from zephon import Pipeline, synthetic
from zephon.io import Dataset
from zephon.work import StaticMixtureWorkSource

pytestmark = pytest.mark.slow
SEED = 2026


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache-chaos")
    synthetic.write_dataset(root, "books", 1200, n_shards=4, fmt="jsonl", seed=3, mean_words=30)
    for p in glob.glob(str(root / "books" / "*.jsonl")):
        with open(p, "rb") as f, gzip.open(f"{p}.gz", "wb") as g:
            shutil.copyfileobj(f, g)
        os.remove(p)
    return root


def pipeline(corpus, workers: int) -> Pipeline:
    ds = Dataset.from_path("books", corpus / "books")
    ws = StaticMixtureWorkSource([ds], {"books": 1.0}, seed=5, chunk_size=64)
    return (Pipeline(ws).shuffle(buffer_size=32, seed=1).batch(microbatch_size=8)
            .options(num_workers=workers, micro_batch_size=16))


def entries(cache) -> list[str]:
    """Finished decoded shards and line indexes: what a truncation may hit. (A ``.part`` file
    is one a producer is still writing: cut under its writer, it would become a sparse file of
    the right size, which only a checksum of every decoded byte could tell from the real one.)"""
    found = glob.glob(str(cache / "shards" / "*")) + glob.glob(str(cache / "lineidx" / "*"))
    return sorted(p for p in found if ".part-" not in os.path.basename(p))


def truncate(path: str, rng) -> None:
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(int(rng.integers(0, max(1, size))))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("workers", [0, 2])
def test_truncated_cache_entries_never_change_the_stream(corpus, tmp_path, monkeypatch, workers):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(cache))
    want = [tuple(b.ids) for b in pipeline(corpus, 0)]
    rng = np.random.default_rng(SEED + workers)
    for run in range(3):
        # at rest, between runs: a damaged entry is found and decoded again
        for path in rng.choice(entries(cache), size=2, replace=False):
            truncate(str(path), rng)
        p = pipeline(corpus, workers)
        at = set(rng.choice(np.arange(1, len(want) - 5), size=3, replace=False).tolist())
        got = []
        with warnings.catch_warnings():  # an evicted entry is said (inline: a warning here;
            warnings.simplefilter("ignore")  # workers: their log on stderr)
            for b in p:
                got.append(tuple(b.ids))
                # while running, under the readers' feet: only where the readers are worker
                # processes (a page past the new end of a mapped file is SIGBUS: a worker that
                # dies of it is replaced; inline, the reader is this process)
                if workers and len(got) in at:
                    truncate(str(rng.choice(entries(cache))), rng)
        p.close()
        assert got == want, f"run {run}: the stream changed"
        assert not [n for n in shm_entries() if n.startswith(f"zephon_{os.getpid()}_")]
