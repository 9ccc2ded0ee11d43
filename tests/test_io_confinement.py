"""Every shard a dataset reads lies inside its root, whatever index.json or a listing says."""

from __future__ import annotations

import json
import os
import uuid

import fsspec
import pytest
from io_helpers import jsonl_bytes, records, write_jsonl, write_parquet

from zephon.io import DataError, Dataset


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def secrets(tmp_path):
    """A dataset root ``ds`` and, beside it, files it must never read."""
    write_jsonl(tmp_path / "ds" / "part-0.jsonl", records(5))
    write_jsonl(tmp_path / "private" / "secrets.jsonl", [{"id": 1, "text": "the password"}])
    write_parquet(tmp_path / "private" / "secrets.parquet", [{"id": 1, "text": "the key"}])
    return tmp_path


def _index(root, names, fmt="jsonl"):
    doc = {"format": fmt, "shards": [{"name": n, "rows": 1} for n in names]}
    (root / "index.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("name", [
    "../private/secrets.jsonl",
    "../../private/secrets.jsonl",
    "sub/../../private/secrets.jsonl",
    "..",
    "{root}/../private/secrets.jsonl",
    "{parent}/private/secrets.jsonl",
    "file://{parent}/private/secrets.jsonl",
    "memory://private/secrets.jsonl",
    "s3://bucket/private/secrets.jsonl",
    "simplecache::file://{parent}/private/secrets.jsonl",
])
@pytest.mark.parametrize("url", [False, True], ids=["path", "file-url"])
def test_index_names_outside_the_root_are_refused_naming_the_entry(secrets, name, url):
    root = secrets / "ds"
    entry = name.format(root=root, parent=secrets)
    fmt = "parquet" if entry.endswith(".parquet") else "jsonl"
    _index(root, ["part-0.jsonl", entry], fmt)
    where = f"file://{root}" if url else root
    with pytest.raises(DataError, match=r"shard entry #1.*outside the dataset root") as e:
        Dataset.from_path("d", where)
    assert e.value.dataset == "d" and e.value.shard.endswith("index.json")


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_any_shard_suffix_is_confined(secrets, ext):
    _index(secrets / "ds", [f"../private/secrets.{ext}"], ext)
    with pytest.raises(DataError, match="outside the dataset root"):
        Dataset.from_path("d", secrets / "ds")


def test_names_that_resolve_inside_the_root_are_read(secrets):
    root = secrets / "ds"
    write_jsonl(root / "sub" / "part-1.jsonl", records(3, start=100))
    _index(root, [str(root / "part-0.jsonl"), "sub/../sub/part-1.jsonl",
                  f"file://{root}/part-0.jsonl"])
    doc = json.loads((root / "index.json").read_text())
    doc["shards"][0]["rows"], doc["shards"][1]["rows"], doc["shards"][2]["rows"] = 5, 3, 5
    (root / "index.json").write_text(json.dumps(doc))
    ds = Dataset.from_path("d", root)
    assert [ds.shard_name(i) for i in ds.ids().tolist()] == [
        str(root / "part-0.jsonl"), str(root / "sub/part-1.jsonl"), str(root / "part-0.jsonl")]
    assert ds.read_payloads(1, [0]) == records(3, start=100)[:1]


def test_a_link_out_of_the_root_is_refused_in_a_listing(secrets):
    os.symlink(secrets / "private" / "secrets.jsonl", secrets / "ds" / "link.jsonl")
    with pytest.raises(DataError, match="link.jsonl.*link to .*private/secrets.jsonl.*outside"):
        Dataset.from_path("d", secrets / "ds")
    os.unlink(secrets / "ds" / "link.jsonl")
    os.symlink(secrets / "private", secrets / "ds" / "linked-dir")
    with pytest.raises(DataError, match="linked-dir.* is a link to .*private, outside"):
        Dataset.from_path("d", f"file://{secrets / 'ds'}")


def test_a_link_out_of_the_root_is_refused_in_an_index(secrets):
    os.symlink(secrets / "private" / "secrets.jsonl", secrets / "ds" / "link.jsonl")
    _index(secrets / "ds", ["part-0.jsonl", "link.jsonl"])
    with pytest.raises(DataError, match="link.jsonl.*outside"):
        Dataset.from_path("d", secrets / "ds")


def test_a_link_swapped_after_discovery_is_refused_at_the_read(secrets):
    root = secrets / "ds"
    ds = Dataset.from_path("d", root)
    os.replace(root / "part-0.jsonl", root / "moved.jsonl")
    os.symlink(secrets / "private" / "secrets.jsonl", root / "part-0.jsonl")
    with pytest.raises(DataError, match="outside"):
        ds.read_payloads(0, [0])


def test_links_inside_the_root_are_fine(secrets):
    root = secrets / "ds"
    (root / "store").mkdir()
    os.replace(root / "part-0.jsonl", root / "store" / "part-0.jsonl")
    os.symlink(root / "store" / "part-0.jsonl", root / "part-0.jsonl")
    ds = Dataset.from_path("d", root)
    assert ds.total() == 10  # the link and its target: two shards, both inside
    assert ds.read_payloads(0, [4]) == records(5)[4:]


def test_memory_roots_are_confined():
    fs = fsspec.filesystem("memory")
    base = f"conf-{uuid.uuid4().hex[:8]}"
    fs.pipe(f"/{base}/ds/part-0.jsonl", jsonl_bytes(records(4)))
    fs.pipe(f"/{base}/private/secrets.jsonl", jsonl_bytes([{"id": 1, "text": "secret"}]))
    for name in ("../private/secrets.jsonl", f"memory://{base}/private/secrets.jsonl",
                 f"/{base}/private/secrets.jsonl", f"file:///{base}/ds/part-0.jsonl"):
        fs.pipe(f"/{base}/ds/index.json", json.dumps(
            {"format": "jsonl", "shards": [{"name": name, "rows": 1}]}).encode())
        with pytest.raises(DataError, match="outside the dataset root"):
            Dataset.from_path("d", f"memory://{base}/ds")
    fs.pipe(f"/{base}/ds/index.json", json.dumps({"format": "jsonl", "shards": [
        {"name": f"memory://{base}/ds/part-0.jsonl", "rows": 4}]}).encode())
    ds = Dataset.from_path("d", f"memory://{base}/ds")
    assert ds.read_payloads(0, [3]) == records(4)[3:]
    fs.rm(f"/{base}", recursive=True)
