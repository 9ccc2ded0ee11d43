"""Shared fixtures: generated corpora and a small BPE tokenizer (nothing is downloaded)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time

import pytest

from zephon import synthetic

# Tests never write into the user's cache: line indexes and downloaded shards go to a
# per-run temp folder (set before any test, so worker processes inherit it too), removed when
# the run ends.
if "ZEPHON_CACHE_DIR" not in os.environ:
    os.environ["ZEPHON_CACHE_DIR"] = tempfile.mkdtemp(prefix="zephon-test-cache-")
    atexit.register(shutil.rmtree, os.environ["ZEPHON_CACHE_DIR"], ignore_errors=True)


def write_corpus(root, fmt: str = "jsonl"):
    """Two datasets under ``root``: code (600 docs, 3 shards) and web (1800 docs, 5 shards)."""
    synthetic.write_dataset(root, "code", 600, n_shards=3, fmt=fmt, seed=1, mean_words=60)
    synthetic.write_dataset(root, "web", 1800, n_shards=5, fmt=fmt, seed=2, mean_words=60)
    return root


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory):
    """``write_corpus`` in JSONL."""
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def parquet_corpus_dir(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("pq_corpus"), "parquet")


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory):
    """A 1k-vocabulary byte-level BPE trained on generated text: <pad>=0, <s>=1, </s>=2."""
    pytest.importorskip("tokenizers")
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    synthetic.train_tokenizer(synthetic.documents(400, seed=9, mean_words=80), 1024, path)
    return str(path)


@pytest.fixture
def no_ext(monkeypatch):
    """Force the numpy twins of every kernel."""
    monkeypatch.setenv("ZEPHON_DISABLE_EXT", "1")
    yield


def shm_entries() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if "zephon" in n.lower()}
    except FileNotFoundError:
        return set()


def wait_released(prefix: str, pids, timeout: float) -> None:
    """Wait until none of ``pids`` runs (zombies aside) and no shared-memory segment named
    ``prefix...`` is left; AssertionError naming what is left after ``timeout`` seconds."""
    import psutil

    def running() -> list[int]:
        out = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.Error:
                pass
        return out

    deadline = time.monotonic() + timeout
    while True:
        left, names = running(), {n for n in shm_entries() if n.startswith(prefix)}
        if not left and not names:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"left behind: processes {left}, segments {sorted(names)}")
        time.sleep(0.05)
