"""DatasetInspector and ``python -m zephon inspect``."""

from __future__ import annotations

import pytest
from io_helpers import jsonl_dataset

from zephon.debug import DatasetInspector
from zephon.io import Dataset
from zephon.io.inspector import inspect_main


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))


def test_read_and_read_many(tmp_path):
    shards = jsonl_dataset(tmp_path / "d", shards=2, rows=6)
    ds = Dataset.from_path("x", tmp_path / "d")
    with DatasetInspector(ds) as insp:
        assert insp.read(1, 4) == shards[1][4]
        assert insp.read_many(0, [5, 1, 5]) == [shards[0][5], shards[0][1], shards[0][5]]
        assert insp.read_many(0, []) == []
    with pytest.raises(RuntimeError, match="closed"):
        insp.read(0, 0)
    with pytest.raises(RuntimeError):
        insp.read_many(0, [1])
    insp.close()  # idempotent


def test_io_options_and_memory(tmp_path):
    ds = Dataset.from_dict("m", {3: [{"a": 1}, "raw"]})
    insp = DatasetInspector(ds, io_options={"cache": {"root": str(tmp_path / "c")}})
    assert insp.read_many(3, [1, 0]) == ["raw", {"a": 1}]
    insp.close()
    with pytest.raises(RuntimeError):
        with insp:
            pass


def test_inspect_command(tmp_path, capsys):
    jsonl_dataset(tmp_path / "d", shards=3, rows=4)
    assert inspect_main([str(tmp_path / "d"), "--rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "shards    3" in out and "rows      12" in out and "bytes" in out
    assert '"id": 0' in out and '"id": 1' in out and '"id": 2' not in out
    assert inspect_main([str(tmp_path / "missing")]) == 1
    assert "FileNotFoundError" in capsys.readouterr().err
