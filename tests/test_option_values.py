"""Option values read alike from ``options()``, option objects and the environment: one size
parser; counts are ints, refused otherwise at ``options()`` time, naming the option."""

from __future__ import annotations

import pytest

from zephon import Pipeline
from zephon.engine.plan.topology import resolve_topology
from zephon.io import CacheOptions, ParquetRGCacheOptions, parse_size_bytes
from zephon.io.options import resolve_store
from zephon.options import RuntimeOptions

SPELLINGS = [("1mb", 1 << 20), ("1MB", 1 << 20), ("1 MiB", 1 << 20), ("1m", 1 << 20),
             ("1048576", 1 << 20), ("0.5gb", 1 << 29), ("64kb", 64 << 10), ("7b", 7)]


@pytest.mark.parametrize("text,expected", SPELLINGS)
def test_sizes_parse_alike_everywhere(text, expected, monkeypatch):
    opts = RuntimeOptions()
    opts.update(shm_slot_bytes=text)
    assert opts.get("shm_slot_bytes") == expected
    monkeypatch.setenv("ZEPHON_SHM_SLOT_BYTES", text)
    assert RuntimeOptions().resolve("shm_slot_bytes") == (expected, "environment")
    monkeypatch.setenv("ZEPHON_CACHE_LIMIT", text)
    monkeypatch.setenv("ZEPHON_RG_CACHE_BYTES", text)
    r = resolve_store(None)
    assert (r.cache_limit, r.rg_cache_bytes) == (expected, expected)
    assert CacheOptions(limit_bytes=text).limit_bytes == expected
    assert ParquetRGCacheOptions(limit_bytes=text).limit_bytes == expected


@pytest.mark.parametrize("bad", ["1.5", "lots", "1xb", "-1mb", "mb", "1mib2"])
def test_bad_sizes_are_refused_alike(bad, monkeypatch):
    with pytest.raises(ValueError, match=r"options\(shm_slot_bytes=\.\.\.\)"):
        RuntimeOptions().update(shm_slot_bytes=bad)
    monkeypatch.setenv("ZEPHON_SHM_SLOT_BYTES", bad)
    with pytest.raises(ValueError, match="ZEPHON_SHM_SLOT_BYTES"):
        RuntimeOptions().get("shm_slot_bytes")
    monkeypatch.setenv("ZEPHON_CACHE_LIMIT", bad)
    with pytest.raises(ValueError, match="ZEPHON_CACHE_LIMIT"):
        resolve_store(None)


def test_a_size_given_to_options_reaches_the_engine(monkeypatch):
    from zephon.io import Dataset
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    ds = Dataset.from_dict("d", {0: [{"x": i} for i in range(40)]})
    ws = StaticMixtureWorkSource(datasets=[ds], mixture=MixtureSpec({"d": 1.0}), seed=0)
    p = Pipeline(ws).batch(8).options(num_workers=1, shm_slot_bytes="1mb", micro_batch_size=8)
    assert sum(len(b) for b in p) == 40
    assert "1048576" in p.explain()


@pytest.mark.parametrize("name,value", [
    ("canonical_replicas", "1"), ("canonical_replicas", 1.9), ("canonical_replicas", 2.0),
    ("canonical_replicas", True), ("canonical_replicas", 0), ("num_workers", "2"),
    ("num_workers", -1), ("micro_batch_size", 8.5), ("shm_slots", "4"), ("dp_degree", 0),
    ("world_size", "8"), ("max_worker_retries", -1), ("global_rank", 0.0),
])
def test_counts_must_be_ints(name, value):
    opts = RuntimeOptions()
    with pytest.raises(ValueError, match=rf"options\({name}=\.\.\.\).*{value!r}"
                                         if not isinstance(value, int) or isinstance(value, bool)
                                         else rf"options\({name}=\.\.\.\) must be >="):
        opts.update(**{name: value})
    assert name not in opts.explicit


def test_a_refused_call_applies_nothing():
    opts = RuntimeOptions()
    with pytest.raises(ValueError):
        opts.update(num_workers=2, canonical_replicas="4")
    assert opts.explicit == {}


def test_ints_and_numpy_ints_are_taken():
    import numpy as np

    opts = RuntimeOptions()
    opts.update(canonical_replicas=np.int64(4), num_workers=0, prefetch_batches=0)
    assert opts.explicit["canonical_replicas"] == 4 and type(opts.explicit["canonical_replicas"]) is int
    assert resolve_topology(opts).canonical_replicas == 4


@pytest.mark.parametrize("text,ok", [("2", 2), (" 3 ", 3), ("1.9", None), ("two", None),
                                     ("-1", None), ("", 8)])
def test_environment_counts_are_digits(text, ok, monkeypatch):
    monkeypatch.setenv("ZEPHON_PREFETCH_BATCHES", "8")
    monkeypatch.setenv("ZEPHON_NUM_WORKERS", text)
    if ok is None:
        with pytest.raises(ValueError, match=rf"ZEPHON_NUM_WORKERS={text!r} is invalid"):
            RuntimeOptions().get("num_workers")
    elif text:
        assert RuntimeOptions().resolve("num_workers") == (ok, "environment")


def test_topology_refuses_counts_that_bypassed_options(monkeypatch):
    with pytest.raises(ValueError, match="canonical_replicas"):
        resolve_topology(RuntimeOptions(explicit={"canonical_replicas": 1.9}))
    with pytest.raises(ValueError, match=r"canonical_replicas=\.\.\.\) must be >= 1, got 0"):
        resolve_topology(RuntimeOptions(explicit={"canonical_replicas": 0}))
    monkeypatch.setenv("WORLD_SIZE", "two")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ValueError, match="WORLD_SIZE must be a whole number, got 'two'"):
        resolve_topology(RuntimeOptions())


def test_io_counts_are_ints_too():
    with pytest.raises(ValueError, match=r"CacheOptions\.download_retry must be an int"):
        CacheOptions(download_retry="3")
    with pytest.raises(ValueError, match=r"CacheOptions\.open_retry_attempts must be an int"):
        CacheOptions(open_retry_attempts=2.5)
    assert parse_size_bytes(3.0) == 3
    with pytest.raises(ValueError):
        parse_size_bytes(2.5)
