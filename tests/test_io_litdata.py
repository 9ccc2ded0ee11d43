"""litData chunks written by Lightning's own ``optimize()``, read through pipelines and
compared field by field with litData's own ``StreamingDataset``."""

from __future__ import annotations

import json
import shutil

import fsspec
import numpy as np
import pytest
from format_checks import _canon, assert_stream_exact, flat, one_epoch
from tests_support import litdata_records

from zephon.io import DataError, Dataset, ShardPrefetcher
from zephon.io.inspector import DatasetInspector, inspect_main

litdata = pytest.importorskip("litdata")
torch = pytest.importorskip("torch")

KINDS = litdata_records.KINDS


def _optimize(root, fn, n: int = 60, **kw) -> None:
    litdata.optimize(fn=fn, inputs=list(range(n)), output_dir=str(root), chunk_bytes="3kb",
                     num_workers=1, **kw)


def _canonical(value):
    """Values compared with their types; a tensor as one, litData's ``bytes`` leaves (views of
    its mapped chunk) as the bytes they show."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), value.tolist())
    if isinstance(value, memoryview):
        return _canon(bytes(value))
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, *[_canonical(v) for v in value]]
    return _canon(value)


def _key(record):
    return record[0] if isinstance(record, tuple) else record["id"]


@pytest.fixture(scope="module", params=list(KINDS))
def written(request, tmp_path_factory):
    fn, kw = KINDS[request.param]
    root = tmp_path_factory.mktemp(f"lit-{request.param}")
    _optimize(root, fn, **kw)
    return root, _litdatas_own(root, tmp_path_factory.mktemp("lit-copy"))


def _litdatas_own(root, copy) -> list:
    """What litData's ``StreamingDataset`` gives, read from a copy: it decompresses a local
    ``chunk-0-0.zstd.bin`` into ``chunk-0-0.bin`` and deletes the compressed file."""
    shutil.copytree(root, copy, dirs_exist_ok=True)
    ref = litdata.StreamingDataset(str(copy))
    return [ref[i] for i in range(len(ref))]


def _same(got: list, expected: list) -> None:
    assert sorted(map(_key, got)) == list(range(len(expected)))
    by_key = {_key(r): _canonical(r) for r in expected}
    for rec in got:
        assert _canonical(rec) == by_key[_key(rec)], _key(rec)


def test_records_are_litdatas_own(written):
    root, expected = written
    ds = Dataset.from_path("l", root)
    assert ds.fmt == "litdata" and ds.total() == 60
    _same(flat(one_epoch(ds)), expected)
    _same([r for s in ds.ids().tolist() for r in ds.read_payloads(s, np.arange(ds.count(s)))],
          expected)


def test_streams_are_exact(written):
    root, expected = written
    assert_stream_exact(Dataset.from_path("l", root), 0 if isinstance(expected[0], tuple)
                        else "id")


def test_dict_records_are_read_column_wise(written):
    root, expected = written
    if isinstance(expected[0], tuple):
        return
    table = Dataset.from_path("l", root).read_table(0, [1, 0, 1])
    assert table.column("id").to_pylist() == [1, 0, 1]
    if "patch" in table.column_names:
        assert str(table.schema.field("patch").type) == \
            "list<item: fixed_size_list<item: float>[4]>"


def test_remote_chunks_through_fsspec_prefetch_and_the_node_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(cache))
    root = tmp_path / "ds"
    _optimize(root, litdata_records.record, n=40, compression="zstd")
    expected = _litdatas_own(root, tmp_path / "copy")
    fs = fsspec.filesystem("memory")
    fs.put(str(root), "/lit-remote", recursive=True)
    try:
        ds = Dataset.from_path("l", "memory://lit-remote")
        with ShardPrefetcher([ds]) as pre:
            pre.submit(0, ds.ids().tolist())
            pre.wait()
        plain = [p for p in (cache / "shards").iterdir() if p.name.endswith(".plain")]
        assert len(plain) == ds.shard_count()  # each chunk decoded once, before any read
        _same(flat(one_epoch(ds)), expected)
        assert_stream_exact(ds, "id", cuts=(3,))
        assert len([p for p in (cache / "shards").iterdir()
                    if p.name.endswith(".plain")]) == ds.shard_count()
    finally:
        fs.rm("/lit-remote", recursive=True)


def test_inspect_and_the_inspector(written, capsys):
    root, expected = written
    ds = Dataset.from_path("l", root)
    with DatasetInspector(ds) as insp:
        got = insp.read_many(0, [1, 0])
    _same(sorted(got, key=_key), expected[:2])
    assert inspect_main([str(root), "--rows", "1"]) == 0
    assert f"litdata {ds.shard_count()} shard(s), 60 rows" in capsys.readouterr().out


def test_pickle_leaves_are_refused_unless_asked_for(tmp_path):
    _optimize(tmp_path, litdata_records.with_object, n=6)
    with pytest.raises(ValueError, match=r"'pickle'.*execute any code.*fmt='litdata-pickle'"):
        Dataset.from_path("l", tmp_path)
    ds = Dataset.from_path("l", tmp_path, fmt="litdata-pickle")
    assert ds.read_payloads(0, [3]) == [{"id": 3, "obj": {3}}]


def test_bad_chunks_are_named_with_their_row(tmp_path):
    _optimize(tmp_path, litdata_records.record, n=20)
    chunk = tmp_path / json.loads((tmp_path / "index.json").read_text())["chunks"][0]["filename"]
    data = chunk.read_bytes()
    offsets = np.frombuffer(data, "<u4", int.from_bytes(data[:4], "little") + 1, 4)
    chunk.write_bytes(data[:int(offsets[2]) + 5])  # the third item cut short
    with pytest.raises(DataError, match=r"dataset 'l', shard .*chunk-0-0.bin, row 3: "):
        Dataset.from_path("l", tmp_path).read_payloads(0, [0])
    bad = bytearray(data)
    at = data.index(b"doc 0 ", int(offsets[0]))
    bad[at + 1] = 0xFF
    chunk.write_bytes(bytes(bad))
    ds = Dataset.from_path("l", tmp_path)
    assert ds.read_payloads(0, [1])[0]["id"] == 1
    with pytest.raises(DataError, match=r"chunk-0-0.bin, row 1: leaf 1 \(str\).*UTF-8"):
        ds.read_payloads(0, [1, 0])


def test_a_chunk_litdata_decompressed_in_place_is_read_as_it_is(tmp_path):
    _optimize(tmp_path, litdata_records.record, n=20, compression="zstd",
              compression_level="chunk")
    before = _litdatas_own(tmp_path, tmp_path / "copy")  # compressed chunks, as written
    chunks = [c["filename"] for c in json.loads((tmp_path / "index.json").read_text())["chunks"]]
    assert all(c.endswith(".zstd.bin") for c in chunks)
    ref = litdata.StreamingDataset(str(tmp_path))
    ref[0]  # litData replaces chunk-0-0.zstd.bin by chunk-0-0.bin
    assert not (tmp_path / chunks[0]).exists()
    ds = Dataset.from_path("l", tmp_path)
    _same([r for s in ds.ids().tolist() for r in ds.read_payloads(s, np.arange(ds.count(s)))],
          before)
