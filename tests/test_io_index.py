"""index.json: build_index writes it, from_path uses it without opening any shard."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from io_helpers import jsonl_bytes, jsonl_dataset, records, write_parquet

from zephon.io import Dataset, ShardMissingError, build_index
from zephon.io.catalog.index_file import main


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))


def test_build_jsonl_index(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=2, rows=7)
    jsonl_dataset(tmp_path / "d" / "gz", shards=1, rows=4, compression="gzip")
    out = build_index("jsonl", tmp_path / "d", progress=False, max_workers=1)
    assert out == tmp_path / "d" / "index.json"
    doc = json.loads(out.read_text())
    assert doc["format"] == "jsonl"
    names = [s["name"] for s in doc["shards"]]
    assert names == ["gz/part-000.jsonl.gz", "part-000.jsonl", "part-001.jsonl"]
    assert [s["rows"] for s in doc["shards"]] == [4, 7, 7]
    assert doc["shards"][1]["bytes"] == os.path.getsize(tmp_path / "d" / "part-000.jsonl")
    assert doc["shards"][0]["extra"]["uncompressed_bytes"] == len(jsonl_bytes(records(4)))


def test_build_parquet_index_has_row_groups(tmp_path):
    write_parquet(tmp_path / "d" / "a.parquet", records(25), row_group_size=10)
    build_index("parquet", tmp_path / "d", progress=False)
    doc = json.loads((tmp_path / "d" / "index.json").read_text())
    assert doc["shards"][0]["rows"] == 25
    assert doc["shards"][0]["extra"]["row_groups"] == [10, 10, 5]


def test_discovery_with_index_opens_no_shard(tmp_path, monkeypatch):
    shards = jsonl_dataset(tmp_path / "d", shards=3, rows=6)
    build_index("jsonl", tmp_path / "d", progress=False)
    opened = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(path, *a, **k):
        opened.append(str(path))
        return real_open(path, *a, **k)

    def spy_os_open(path, *a, **k):
        opened.append(str(path))
        return real_os_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    ds = Dataset.from_path("x", tmp_path / "d")
    monkeypatch.undo()
    assert not [p for p in opened if p.endswith(".jsonl")], opened
    assert ds.counts().tolist() == [6, 6, 6]
    assert ds.read_payloads(2, [5]) == [shards[2][5]]


def test_index_alone_is_enough_to_start(tmp_path):
    """The strongest proof: with the shards gone, discovery still succeeds from the index."""
    jsonl_dataset(tmp_path / "d", shards=2, rows=5)
    write_parquet(tmp_path / "p" / "a.parquet", records(9), row_group_size=4)
    build_index("jsonl", tmp_path / "d", progress=False)
    build_index("parquet", tmp_path / "p", progress=False)
    for f in (tmp_path / "d").glob("*.jsonl"):
        f.unlink()
    (tmp_path / "p" / "a.parquet").unlink()
    ds = Dataset.from_path("x", tmp_path / "d")
    assert ds.fmt == "jsonl" and ds.total() == 10
    pq_ds = Dataset.from_path("p", tmp_path / "p")  # detected from row_groups in the index
    assert pq_ds.fmt == "parquet" and pq_ds.total() == 9
    with pytest.raises(ShardMissingError, match="part-001.jsonl"):
        ds.read_table(1, [0])


def test_third_party_index_spellings(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=2, rows=3)
    doc = {"shards": [{"path": "part-001.jsonl", "num_rows": 3, "size": 10},
                      {"path": "part-000.jsonl", "num_samples": 3}]}
    (tmp_path / "d" / "index.json").write_text(json.dumps(doc))
    ds = Dataset.from_path("x", tmp_path / "d", fmt="jsonl")
    assert ds.counts().tolist() == [3, 3]
    assert ds.read_payloads(0, [0]) == [records(3, start=1000)[0]]  # index order is kept


def test_index_listing_other_files_is_ignored_with_a_warning(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=1, rows=3)
    doc = {"format": "parquet", "shards": [{"name": "x.parquet", "rows": 5}]}
    (tmp_path / "d" / "index.json").write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="ignoring index.json"):
        ds = Dataset.from_path("x", tmp_path / "d", fmt="jsonl")
    assert ds.counts().tolist() == [3]


def test_index_entry_without_rows_is_an_error(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "index.json").write_text(json.dumps(
        {"format": "jsonl", "shards": [{"name": "a.jsonl"}]}))
    with pytest.raises(ValueError, match="row count"):
        Dataset.from_path("x", tmp_path / "d")


def test_output_path_and_errors(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=1, rows=3)
    out = build_index("jsonl", tmp_path / "d", output_path=tmp_path / "elsewhere.json",
                      progress=False)
    assert out == tmp_path / "elsewhere.json" and not (tmp_path / "d" / "index.json").exists()
    with pytest.raises(ValueError, match="unsupported format"):
        build_index("csv", tmp_path / "d")
    with pytest.raises(ValueError, match="no parquet shards"):
        build_index("parquet", tmp_path / "d")
    with pytest.raises(FileNotFoundError):
        build_index("jsonl", tmp_path / "missing")


def test_cli_main(tmp_path, capsys):
    jsonl_dataset(tmp_path / "d", shards=2, rows=3)
    assert main(["jsonl"]) == 1
    assert "usage" in capsys.readouterr().err
    assert main(["jsonl", str(tmp_path / "nope")]) == 1
    assert "build-index failed" in capsys.readouterr().err
    assert main(["jsonl", str(tmp_path / "d"), "--no-progress", "--workers", "2"]) == 0
    assert (tmp_path / "d" / "index.json").exists()


def test_module_command_line(tmp_path):
    write_parquet(tmp_path / "d" / "a.parquet", records(5))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    run = subprocess.run([sys.executable, "-m", "zephon.build_index", "parquet",
                          str(tmp_path / "d")], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "d" / "index.json").read_text())["shards"][0]["rows"] == 5
    bad = subprocess.run([sys.executable, "-m", "zephon.build_index"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert bad.returncode == 1 and "usage" in bad.stderr
