"""MDS (MosaicML Streaming) shards written by Streaming's own ``MDSWriter``, read through
pipelines and compared field by field with Streaming's own ``StreamingDataset``."""

from __future__ import annotations

import io
import os
from decimal import Decimal

import fsspec
import numpy as np
import pytest
from format_checks import assert_same_records, assert_stream_exact, flat, one_epoch
from tests_support import mds_streaming

from zephon.io import DataError, Dataset, ShardPrefetcher
from zephon.io.formats import mds
from zephon.io.inspector import DatasetInspector, inspect_main

Image = pytest.importorskip("PIL.Image")
sb = mds_streaming.streaming_base()
if sb is None:
    pytest.skip("mosaicml-streaming is not installed", allow_module_level=True)

COLUMNS, IMAGES, _record = mds_streaming.COLUMNS, mds_streaming.IMAGES, mds_streaming.record


def _write(root, compression: str | None, n: int = 60) -> None:
    with sb.MDSWriter(out=str(root), columns=COLUMNS, compression=compression,
                      size_limit=8000) as w:
        for i in range(n):
            w.write(_record(i))


def _streamings_own(root, tmp) -> list[dict]:
    """What ``StreamingDataset`` gives, images as their pixels."""
    ds = sb.StreamingDataset(remote=str(root), local=str(tmp), batch_size=1, shuffle=False)
    try:
        out = [ds[i] for i in range(ds.num_samples)]
    finally:
        del ds
        sb.util.clean_stale_shared_memory()
    return [{k: (np.asarray(v) if k in IMAGES else v) for k, v in r.items()} for r in out]


def _pixels(records: list[dict]) -> list[dict]:
    """Zephon hands images over as their encoded bytes: decoded here to compare."""
    assert all(isinstance(r[k], bytes) for r in records for k in IMAGES)
    return [{k: (np.asarray(Image.open(io.BytesIO(v))) if k in IMAGES else v)
             for k, v in r.items()} for r in records]


@pytest.fixture(scope="module", params=[None, "zstd"])
def written(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"mds-{request.param}")
    _write(root, request.param)
    return root, _streamings_own(root, tmp_path_factory.mktemp("streaming-local"))


def test_records_are_streamings_own(written):
    root, expected = written
    ds = Dataset.from_path("m", root)
    assert ds.fmt == "mds" and ds.shard_count() > 3 and ds.total() == 60
    assert_same_records(_pixels(flat(one_epoch(ds))), expected, "id")
    rec = ds.read_payloads(0, [1])[0]
    assert type(rec["id"]) is int and type(rec["score"]) is np.float32
    assert rec["tokens"].dtype == np.int32 and not rec["tokens"].flags.writeable
    assert rec["patch"].shape == (2, 3) and type(rec["price"]) is Decimal


def test_streams_are_exact(written):
    assert_stream_exact(Dataset.from_path("m", written[0]), "id")


def test_columns_of_fixed_layout_are_read_as_arrow(written):
    ds = Dataset.from_path("m", written[0])
    table = ds.read_table(1, [2, 0, 0], columns=["id", "text", "tokens", "patch", "photo"])
    assert table.column("id").to_pylist()[1:] == [table.column("id")[0].as_py() - 2] * 2
    assert str(table.schema.field("patch").type) == "list<item: fixed_size_list<item: uint8>[3]>"


def test_compressed_shards_are_decoded_once_into_the_node_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(cache))
    decodes = []
    real = mds.decoder
    monkeypatch.setattr(mds, "decoder", lambda c, ref: lambda src: decodes.append(ref.name) or
                        real(c, ref)(src))
    root = tmp_path / "ds"
    _write(root, "zstd:7", n=30)
    assert not [f for f in os.listdir(root) if f.endswith(".mds")]
    first = Dataset.from_path("m", root).read_payloads(0, [0])[0]
    again = Dataset.from_path("m", root).read_payloads(0, [0])[0]  # another process's view
    assert again["text"] == first["text"] and decodes == ["shard.00000.mds.zstd"]
    copies = [p.name for p in (cache / "shards").iterdir() if p.name.endswith(".mds")]
    assert len(copies) == 1 and copies[0].endswith("-shard.00000.mds")


def test_remote_shards_through_fsspec_and_prefetch(written, tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))
    root, expected = written
    fs = fsspec.filesystem("memory")
    fs.put(str(root), "/mds-remote", recursive=True)
    try:
        ds = Dataset.from_path("m", "memory://mds-remote")
        with ShardPrefetcher([ds]) as pre:
            pre.submit(0, ds.ids().tolist())
            pre.wait()
        assert_same_records(_pixels(flat(one_epoch(ds))), expected, "id")
        assert_stream_exact(ds, "id", cuts=(3,))
    finally:
        fs.rm("/mds-remote", recursive=True)


def test_inspect_and_the_inspector(written, capsys):
    root, expected = written
    ds = Dataset.from_path("m", root)
    with DatasetInspector(ds) as insp:
        got = insp.read_many(0, [1, 0])
    assert [r["id"] for r in got] == [1, 0] and got[1]["text"] == expected[0]["text"]
    assert inspect_main([str(root), "--rows", "1", "--width", "400"]) == 0
    out = capsys.readouterr().out
    assert f"mds     {ds.shard_count()} shard(s), 60 rows" in out and '"id": 0' in out


def test_pickle_columns_are_refused_unless_asked_for(tmp_path):
    with sb.MDSWriter(out=str(tmp_path), columns={"id": "int", "obj": "pkl"}) as w:
        for i in range(5):
            w.write({"id": i, "obj": {"set": {i}}})
    with pytest.raises(ValueError, match=r"column 'obj' is MDS 'pkl'.*execute any code.*"
                                         r"fmt='mds-pickle'"):
        Dataset.from_path("m", tmp_path)
    ds = Dataset.from_path("m", tmp_path, fmt="mds-pickle")
    assert ds.read_payloads(0, [3]) == [{"id": 3, "obj": {"set": {3}}}]


def test_bad_shards_are_named_with_their_row(tmp_path):
    _write(tmp_path, None, n=12)
    shard = tmp_path / "shard.00000.mds"
    data = shard.read_bytes()
    n = int(np.frombuffer(data[:4], "<u4")[0])
    offsets = np.frombuffer(data[4:8 + 4 * n], "<u4")
    shard.write_bytes(data[:int(offsets[2]) + 5])  # the third sample cut short
    with pytest.raises(DataError, match=r"dataset 'm', shard .*shard.00000.mds, row 3: "):
        Dataset.from_path("m", tmp_path).read_payloads(0, [0])
    bad = bytearray(data)
    at = data.index(b"doc 0 ", int(offsets[0]))  # the first sample's text
    bad[at + 1] = 0xFF
    shard.write_bytes(bytes(bad))
    ds = Dataset.from_path("m", tmp_path)
    assert ds.read_payloads(0, [1])[0]["id"] == 1  # other rows still read
    with pytest.raises(DataError, match=r"shard .*shard.00000.mds, row 1: column 'text'.*UTF-8"):
        ds.read_payloads(0, [1, 0])
