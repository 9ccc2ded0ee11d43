"""Hugging Face ``datasets`` as shards: ``save_to_disk`` folders (the Arrow format) and the
Hub's Parquet layout with ``split=``, checked against ``datasets``' own reader."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest
from format_checks import assert_same_records, assert_stream_exact, flat, one_epoch

from zephon.io import DataError, Dataset, ShardPrefetcher, build_index
from zephon.io.inspector import DatasetInspector, inspect_main

datasets = pytest.importorskip("datasets")


def _hf(n: int, start: int = 0):
    f = datasets.Features({
        "id": datasets.Value("int64"), "text": datasets.Value("string"),
        "toks": datasets.Sequence(datasets.Value("int32")), "score": datasets.Value("float32"),
        "meta": {"lang": datasets.Value("string"), "n": datasets.Value("int16")},
        "blob": datasets.Value("binary"), "maybe": datasets.Value("string")})
    rows = range(start, start + n)
    return datasets.Dataset.from_dict({
        "id": list(rows), "text": [f"doc {i} " * (i % 5 + 1) for i in rows],
        "toks": [list(range(i % 7)) for i in rows], "score": [i / 8 for i in rows],
        "meta": [{"lang": "en" if i % 2 else "fr", "n": i % 100} for i in rows],
        "blob": [bytes([i % 256]) * (i % 3) for i in rows],
        "maybe": [None if i % 4 == 0 else str(i) for i in rows]}, features=f)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf") / "saved"
    _hf(60).save_to_disk(str(root), num_shards=3)
    own = datasets.load_from_disk(str(root))
    return root, [own[i] for i in range(len(own))]


def test_save_to_disk_is_read_in_place_with_rows_from_the_ipc_metadata(saved):
    root, expected = saved
    ds = Dataset.from_path("hf", root)
    assert ds.fmt == "arrow" and ds.counts().tolist() == [20, 20, 20]
    assert [ds.shard_name(i).rsplit("/", 1)[-1] for i in ds.ids()] == [
        f"data-0000{i}-of-00003.arrow" for i in range(3)]
    assert_same_records(flat(one_epoch(ds)), expected, "id")
    assert ds.read_payloads(1, [3, 0]) == [expected[23], expected[20]]


def test_save_to_disk_streams_are_exact(saved):
    assert_stream_exact(Dataset.from_path("hf", saved[0]), "id")


def test_a_dataset_dict_needs_its_split(tmp_path):
    datasets.DatasetDict({"train": _hf(30), "test": _hf(9, 100)}).save_to_disk(str(tmp_path))
    with pytest.raises(ValueError, match=r"splits \['train', 'test'\]: pass split="):
        Dataset.from_path("hf", tmp_path)
    with pytest.raises(ValueError, match="no split 'dev'"):
        Dataset.from_path("hf", tmp_path, split="dev")
    test = Dataset.from_path("hf", tmp_path, split="test")
    own = datasets.load_from_disk(str(tmp_path))["test"]
    assert_same_records(flat(one_epoch(test)), [own[i] for i in range(len(own))], "id")


def test_hub_parquet_layout_reads_one_split(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    parts = {"train": [_hf(25), _hf(25, 25)], "validation": [_hf(10, 500)]}
    for split, shards in parts.items():
        for i, part in enumerate(shards):  # datasets' writer compresses (its own choice)
            part.to_parquet(str(data / f"{split}-{i:05d}-of-{len(shards):05d}.parquet"))
    (tmp_path / "README.md").write_text("---\nconfigs: ...\n---\n")
    with pytest.raises(ValueError, match=r"splits \['train', 'validation'\]; pass split="):
        Dataset.from_path("hub", tmp_path)
    train = Dataset.from_path("hub", tmp_path, split="train")
    assert train.fmt == "parquet" and train.counts().tolist() == [25, 25]
    files = sorted(str(p) for p in data.glob("train-*.parquet"))
    own = datasets.load_dataset("parquet", data_files={"train": files}, split="train")
    # Parquet payloads follow spec addendum A.10 (lists as read-only NumPy arrays, numbers as
    # NumPy scalars): compared as values
    got = [{k: v.tolist() if isinstance(v, (np.ndarray, np.generic)) else v
            for k, v in r.items()} for r in flat(one_epoch(train))]
    assert got and sorted(got, key=lambda r: r["id"]) == [own[i] for i in range(len(own))]


def test_save_to_disk_over_fsspec_with_prefetch_and_the_node_cache(saved, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))
    root, expected = saved
    fs = fsspec.filesystem("memory")
    fs.put(str(root), "/hf-saved", recursive=True)
    try:
        ds = Dataset.from_path("hf", "memory://hf-saved")
        assert ds.counts().tolist() == [20, 20, 20]
        with ShardPrefetcher([ds]) as pre:
            pre.submit(0, ds.ids().tolist())
            pre.wait()
        assert_same_records(flat(one_epoch(ds)), expected, "id")
        assert_stream_exact(ds, "id", cuts=(3,))
    finally:
        fs.rm("/hf-saved", recursive=True)


def test_build_index_inspect_and_the_inspector(saved, tmp_path, capsys):
    root, expected = saved
    copy = tmp_path / "copy"
    fsspec.filesystem("file").put(str(root), str(copy), recursive=True)
    build_index("arrow", copy, progress=False)
    ds = Dataset.from_path("hf", copy)
    assert ds._catalog.from_index and ds.counts().tolist() == [20, 20, 20]
    with DatasetInspector(ds) as insp:
        assert insp.read_many(2, [19, 0]) == [expected[59], expected[40]]
    assert inspect_main([str(copy), "--rows", "1"]) == 0
    out = capsys.readouterr().out
    assert "arrow   3 shard(s), 60 rows" in out and '"id": 0' in out


def test_a_damaged_arrow_shard_is_named_with_its_row(saved, tmp_path):
    root, _ = saved
    copy = tmp_path / "bad"
    fsspec.filesystem("file").put(str(root), str(copy), recursive=True)
    build_index("arrow", copy, progress=False)  # discovery believes the index: the read finds it
    shard = copy / "data-00001-of-00003.arrow"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    ds = Dataset.from_path("hf", copy)
    with pytest.raises(DataError) as err:
        ds.read_payloads(1, [0])
    assert err.value.dataset == "hf" and err.value.shard.endswith("data-00001-of-00003.arrow")
    assert err.value.row == 1
    (copy / "index.json").unlink()
    with pytest.raises(DataError, match=r"dataset 'hf', shard .*data-00001-of-00003.arrow, row 1"):
        Dataset.from_path("hf", copy)
