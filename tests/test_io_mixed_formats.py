"""A dataset root holding shards of several formats is read whole, each shard in its own format;
files that are not read are said (a warning for those that look like data; inspect lists all)."""

from __future__ import annotations

import json
import warnings

import pytest
from io_helpers import records, write_jsonl, write_parquet

from zephon import Pipeline
from zephon.debug import DatasetInspector
from zephon.io import Dataset, build_index
from zephon.io.inspector import inspect_main
from zephon.work import StaticMixtureWorkSource


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def mixed(tmp_path):
    """a.jsonl (10), b.parquet (90), c.jsonl.gz (5), d.jsonl.zst (7): 112 records."""
    root = tmp_path / "mixed"
    write_jsonl(root / "a.jsonl", records(10))
    write_parquet(root / "b.parquet", records(90, start=100), row_group_size=16)
    write_jsonl(root / "c.jsonl.gz", records(5, start=300), compression="gzip")
    write_jsonl(root / "d.jsonl.zst", records(7, start=400), compression="zstd")
    return root


def _all_ids(ds: Dataset, **opts) -> list[int]:
    ws = StaticMixtureWorkSource([ds], {ds.name: 1.0}, seed=3, chunk_size=32)
    p = Pipeline(ws).batch(8, drop_last=False).options(micro_batch_size=16, **opts)
    return sorted(r.payload["id"] for b in p for r in b.records)


WANT = sorted(list(range(10)) + list(range(100, 190)) + list(range(300, 305))
              + list(range(400, 407)))


@pytest.mark.parametrize("opts", [dict(num_workers=0), dict(num_workers=2)],
                         ids=["inline", "process"])
def test_every_shard_is_read_in_its_own_format(mixed, opts):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left unread, nothing to say
        ds = Dataset.from_path("d", mixed)
    assert ds.fmt == "mixed" and ds.formats() == {"jsonl": 3, "parquet": 1}
    assert [ds.shard_format(s) for s in ds.ids().tolist()] == ["jsonl", "parquet", "jsonl",
                                                                "jsonl"]
    assert ds.total() == 112
    assert ds.read_payloads(1, [89])[0]["id"] == 189
    assert ds.read_table(3, [6]).to_pylist()[0]["id"] == 406
    assert _all_ids(ds, **opts) == WANT


def test_a_mixed_index_is_built_with_auto_and_read_whole(mixed):
    with pytest.raises(ValueError, match=r"also holds 3 shard\(s\) of another format.*'auto'"):
        build_index("parquet", mixed, progress=False)
    with pytest.raises(ValueError, match="b.parquet"):
        build_index("jsonl", mixed, progress=False)
    build_index("auto", mixed, progress=False)
    doc = json.loads((mixed / "index.json").read_text())
    assert doc["format"] == "mixed" and [s["rows"] for s in doc["shards"]] == [10, 90, 5, 7]
    ds = Dataset.from_path("d", mixed)
    assert ds.fmt == "mixed" and ds.total() == 112 and ds.counts().tolist() == [10, 90, 5, 7]
    assert _all_ids(ds) == WANT


def test_fmt_keeps_one_format_and_names_the_others(mixed):
    with pytest.warns(UserWarning, match=r"not reading 3 file\(s\).*format 'parquet'"):
        ds = Dataset.from_path("d", mixed, fmt="parquet")
    assert ds.fmt == "parquet" and ds.total() == 90
    build_index("auto", mixed, progress=False)
    with pytest.warns(UserWarning, match=r"not reading 1 file\(s\).*b.parquet"):
        ds = Dataset.from_path("d", mixed, fmt="jsonl")
    assert ds.fmt == "jsonl" and ds.total() == 22
    assert ds.ids().tolist() == [0, 2, 3]  # positions in the index, whatever fmt= keeps


def test_files_that_look_like_data_are_named_others_are_not(mixed):
    (mixed / "README.txt").write_text("about this corpus")
    (mixed / "LICENSE").write_text("CC-BY")
    (mixed / ".DS_Store").write_bytes(b"\0")
    (mixed / "_SUCCESS").write_bytes(b"")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Dataset.from_path("d", mixed).total() == 112
    (mixed / "extra.csv").write_text("id,text\n1,x\n")
    (mixed / "more.jsonl.bz2").write_bytes(b"BZh9")
    (mixed / "e.orc").write_bytes(b"\0")
    with pytest.warns(UserWarning, match=r"not reading 3 file\(s\) that look like data.*"
                                         r"e.orc, extra.csv, more.jsonl.bz2"):
        assert Dataset.from_path("d", mixed).total() == 112


def test_inspect_shows_every_format_and_the_files_it_does_not_read(mixed, capsys):
    (mixed / "README.txt").write_text("about this corpus")
    (mixed / "extra.csv").write_text("id,text\n1,x\n")
    assert inspect_main([str(mixed), "--rows", "1"]) == 0
    out = capsys.readouterr().out
    assert "format    mixed" in out
    assert "jsonl   3 shard(s), 22 rows" in out and "parquet 1 shard(s), 90 rows" in out
    assert "rows      112" in out
    assert "extra.csv" in out.split("unread")[1].splitlines()[0]
    assert "README.txt" in out.split("other")[1].splitlines()[0]
    assert "a.jsonl (jsonl, 10 rows)" in out and "b.parquet (parquet, 90 rows)" in out
    assert '"id": 0' in out and '"id": 100' in out


def test_inspector_says_each_shards_format(mixed):
    with DatasetInspector(Dataset.from_path("d", mixed)) as insp:
        assert insp.formats() == {"jsonl": 3, "parquet": 1}
        assert insp.shard_format(1) == "parquet"
        assert insp.read(1, 0)["id"] == 100
