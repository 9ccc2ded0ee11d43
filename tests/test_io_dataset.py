"""Discovery: format detection, fmt override, storage URLs, bad paths, pickling to workers."""

from __future__ import annotations

import json
import multiprocessing as mp
import pickle
import warnings

import numpy as np
import pytest
from io_helpers import jsonl_dataset, records, write_jsonl, write_parquet

from zephon.io import DataError, Dataset, StoreOptions


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))


def test_a_root_of_jsonl_and_parquet_is_read_whole_unless_fmt_picks_one(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=1, rows=4)
    write_parquet(tmp_path / "d" / "x.parquet", records(3))
    both = Dataset.from_path("x", tmp_path / "d")
    assert both.fmt == "mixed" and both.counts().tolist() == [4, 3]
    with pytest.warns(UserWarning, match="no shards of format 'parquet'.*part-000.jsonl"):
        pq_only = Dataset.from_path("x", tmp_path / "d", fmt="parquet")
    assert pq_only.fmt == "parquet" and pq_only.counts().tolist() == [3]


def test_detects_parquet_and_a_bad_vortex_file_is_named(tmp_path):
    write_parquet(tmp_path / "p" / "a.parquet", records(3))
    assert Dataset.from_path("x", tmp_path / "p").fmt == "parquet"
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "a.vortex").write_bytes(b"\0")
    with pytest.raises(DataError, match="shard .*a.vortex: not a readable Vortex file"):
        Dataset.from_path("x", tmp_path / "v")


@pytest.mark.parametrize("doc,why", [
    ({"config": {}, "chunks": []}, "litdata index, none with records"),
    ({"config": {"item_loader": "TokensLoader"}, "chunks": []}, "zephon reads PyTreeLoader"),
    ({"shards": [{"basename": "a.mds", "samples": 3}]}, "no recognised shards"),
])
def test_foreign_indexes_are_detected(tmp_path, doc, why):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "index.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=why), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # an index of no shards is ignored
        Dataset.from_path("x", tmp_path / "d")


def test_unknown_fmt_override(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=1)
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        Dataset.from_path("x", tmp_path / "d", fmt="csv")


def test_missing_path_is_file_not_found_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-dir"):
        Dataset.from_path("x", tmp_path / "no-such-dir")


def test_file_instead_of_directory(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", records(2))
    with pytest.raises(ValueError, match="not a directory"):
        Dataset.from_path("x", path)


def test_directory_without_shards_lists_what_it_saw(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("hi")
    (tmp_path / "d" / "data.csv").write_text("a,b")
    with pytest.raises(ValueError, match=r"no recognised shards.*2 file\(s\): data.csv, notes.txt"):
        Dataset.from_path("x", tmp_path / "d")
    (tmp_path / "e").mkdir()
    with pytest.raises(ValueError, match="no files at all"):
        Dataset.from_path("x", tmp_path / "e")


def test_empty_dataset(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_bytes(b"\n\n")
    (tmp_path / "d" / "b.jsonl").write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        Dataset.from_path("x", tmp_path / "d")


def test_empty_shards_are_skipped_but_ids_stay_positions(tmp_path):
    d = tmp_path / "d"
    write_jsonl(d / "a.jsonl", records(2))
    (d / "b.jsonl").write_bytes(b"")
    write_jsonl(d / "c.jsonl", records(3))
    ds = Dataset.from_path("x", d)
    assert ds.ids().tolist() == [0, 2] and ds.counts().tolist() == [2, 3]
    assert ds.shard_name(2).endswith("c.jsonl")


def test_hidden_files_and_nested_directories(tmp_path):
    d = tmp_path / "d"
    write_jsonl(d / "year=2020" / "a.jsonl", records(2))
    write_jsonl(d / "b.jsonl", records(3, start=10))
    write_jsonl(d / ".staging" / "c.jsonl", records(5))
    write_jsonl(d / "_tmp.jsonl", records(5))
    (d / "_SUCCESS").write_text("")
    ds = Dataset.from_path("x", d)
    assert ds.counts().tolist() == [3, 2]  # b.jsonl, then year=2020/a.jsonl
    assert ds.read_payloads(1, [1]) == [records(2)[1]]


def test_file_url_and_memory_filesystem(tmp_path):
    import fsspec

    jsonl_dataset(tmp_path / "d", shards=2, rows=5)
    via_url = Dataset.from_path("x", f"file://{tmp_path / 'd'}")
    assert via_url.read_payloads(1, [4]) == [records(5, start=1000)[4]]
    mem = fsspec.filesystem("memory")
    mem.pipe("/zephon-test/ds/a.jsonl", b'{"a": 1}\n{"a": 2}\n')
    mem.pipe("/zephon-test/ds/b.jsonl", b'{"a": 3}\n')
    ds = Dataset.from_path("m", "memory://zephon-test/ds")
    assert ds.counts().tolist() == [2, 1]
    assert ds.read_table(0, [1]).to_pylist() == [{"a": 2}]
    assert ds.read_payloads(1, [0]) == [{"a": 3}]
    mem.rm("/zephon-test", recursive=True)


def _read_in_child(ds, queue):
    queue.put((ds.read_payloads(1, [3, 0]), ds.read_table(0, [2]).to_pylist()))


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_dataset_travels_to_worker_processes(tmp_path, method):
    shards = jsonl_dataset(tmp_path / "d", shards=2, rows=5)
    ds = Dataset.from_path("x", tmp_path / "d")
    ds.read_table(0, [0])  # parent has an open reader (must not be shared or pickled)
    assert b"mmap" not in pickle.dumps(ds)
    ctx = mp.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=_read_in_child, args=(ds, q))
    p.start()
    got = q.get(timeout=60)
    p.join(timeout=60)
    assert got == ([shards[1][3], shards[1][0]], [shards[0][2]])
    assert ds.read_payloads(0, [1]) == [shards[0][1]]


def test_with_store_options_and_close(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=1, rows=5, compression="gzip")
    ds = Dataset.from_path("x", tmp_path / "d")
    other = ds.with_store_options(StoreOptions(cache={"root": str(tmp_path / "other")}))
    assert other.read_payloads(0, [4]) == ds.read_payloads(0, [4])
    assert any((tmp_path / "other" / "shards").iterdir())
    other.close()
    other.close()
    assert other.read_table(0, np.array([1])).num_rows == 1
    assert "fmt='jsonl'" in repr(ds)
