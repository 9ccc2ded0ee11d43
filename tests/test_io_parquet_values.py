"""Parquet record payloads hold NumPy values (spec addendum A.10): ``list<int32>`` token ids
as read-only int32 arrays, fixed-size lists with their dimensions, numeric scalars as NumPy
scalars; JSONL records keep the Python values JSON gives."""

from __future__ import annotations

import datetime
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from io_helpers import write_jsonl

from zephon import Pipeline
from zephon.debug import DatasetInspector
from zephon.io import Dataset
from zephon.work import StaticMixtureWorkSource

N = 40


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))


def _table(n: int, start: int = 0) -> pa.Table:
    ids = [list(range(i, i + 1 + i % 7)) for i in range(start, start + n)]
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "input_ids": pa.array(ids, pa.list_(pa.int32())),
        "mask": pa.array([[True, False][: 1 + i % 2] for i in range(n)], pa.list_(pa.bool_())),
        "vec": pa.array([[i, i + 0.5, i + 1.0] for i in range(n)], pa.list_(pa.float32(), 3)),
        "frames": pa.array([[[i] * 2] * (i % 3) for i in range(n)],
                           pa.list_(pa.list_(pa.int16(), 2))),
        "holes": pa.array([[i, None] if i % 4 == 0 else None if i % 4 == 1 else [i]
                           for i in range(n)], pa.list_(pa.int64())),
        "score": pa.array([i / 4 for i in range(n)], pa.float32()),
        "when": pa.array([datetime.datetime(2024, 1, 1 + i % 28) for i in range(n)],
                         pa.timestamp("ms")),
        "text": [f"doc {i}" for i in range(n)],
        "nested": pa.array([[[i]] for i in range(n)]),
    })


@pytest.fixture
def tokens(tmp_path):
    root = tmp_path / "tok"
    root.mkdir()
    pq.write_table(_table(N), root / "part-0.parquet", row_group_size=16)
    return root


def _check(payload: dict) -> None:
    i = int(payload["id"])
    ids = payload["input_ids"]
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int32 and not ids.flags.writeable
    assert ids.tolist() == list(range(i, i + 1 + i % 7))
    with pytest.raises(ValueError, match="read-only"):
        ids[0] = 5
    mask = payload["mask"]
    assert mask.dtype == np.bool_ and mask.tolist() == [True, False][: 1 + i % 2]
    assert payload["vec"].shape == (3,) and payload["vec"].dtype == np.float32
    assert payload["frames"].shape == (i % 3, 2) and payload["frames"].dtype == np.int16
    holes = {0: [i, None], 1: None, 2: [i], 3: [i]}[i % 4]
    if i % 4 >= 2:
        assert isinstance(payload["holes"], np.ndarray) and payload["holes"].tolist() == holes
    else:  # a row with a null element is a Python list, a null row None
        assert payload["holes"] == holes
    assert isinstance(payload["score"], np.float32) and payload["score"] == np.float32(i / 4)
    assert isinstance(payload["id"], np.int64)
    assert payload["when"] == np.datetime64(datetime.datetime(2024, 1, 1 + i % 28), "ms")
    assert payload["text"] == f"doc {i}" and type(payload["text"]) is str
    assert payload["nested"] == [[i]]


def _batches(ds, **opts):
    ws = StaticMixtureWorkSource(ds if isinstance(ds, list) else [ds],
                                 {d.name: 0.5 for d in ds} if isinstance(ds, list)
                                 else {ds.name: 1.0}, seed=4, chunk_size=24,
                                 shuffle_within_shard=True)
    return Pipeline(ws).batch(5, drop_last=False).options(micro_batch_size=10, **opts)


@pytest.mark.parametrize("opts", [dict(num_workers=0), dict(num_workers=2),
                                  dict(num_workers=2, runner="threads")],
                         ids=["inline", "process", "threads"])
def test_batch_records_of_a_parquet_dataset_hold_numpy_values(tokens, opts):
    seen = []
    for b in _batches(Dataset.from_path("tok", tokens), **opts):
        for r in b.records:
            _check(r.payload)
            seen.append(int(r.payload["id"]))
        assert b.block.payload.column("input_ids").type == pa.list_(pa.int32())  # Arrow inside
    assert sorted(seen) == list(range(N))


def test_inspector_and_read_payloads_give_the_same_values(tokens):
    ds = Dataset.from_path("tok", tokens)
    for payload in ds.read_payloads(0, [5, 16, 1, 5]):
        _check(payload)
    with DatasetInspector(ds) as insp:
        _check(insp.read(0, 35))


def test_map_transform_sees_arrays_and_may_return_them(tokens):
    def shift(p):
        assert isinstance(p["input_ids"], np.ndarray)
        return {"id": p["id"], "input_ids": p["input_ids"] + 1}

    ws = StaticMixtureWorkSource([Dataset.from_path("tok", tokens)], {"tok": 1.0}, seed=1,
                                 chunk_size=24)
    out = {int(r.payload["id"]): r.payload["input_ids"].tolist()
           for b in Pipeline(ws).map_transform(shift).batch(4, drop_last=False)
           for r in b.records}
    assert out == {i: list(range(i + 1, i + 2 + i % 7)) for i in range(N)}


def test_jsonl_records_keep_python_lists_also_beside_parquet(tokens, tmp_path):
    rows = [{"id": 1000 + i, "input_ids": [i, i + 1]} for i in range(N)]
    write_jsonl(tmp_path / "js" / "part-0.jsonl", rows)
    js = Dataset.from_path("js", tmp_path / "js")
    pq_ids = Dataset.from_path("tok", tokens)
    kinds = {}
    for b in _batches([js, pq_ids]):
        from_pq = [int(r.payload["id"]) < 1000 for r in b.records]
        for r, is_pq in zip(b.records, from_pq):
            kinds.setdefault((is_pq, all(from_pq)), set()).add(type(r.payload["input_ids"]))
    assert kinds[(False, False)] == {list}  # JSONL rows: lists, always
    # a batch mixing both shows the column one way: as the JSON rows need it (documented)
    assert kinds[(True, False)] == {list}


def test_values_are_the_same_in_every_runner_for_mixed_batches(tokens, tmp_path):
    rows = [{"id": 1000 + i, "input_ids": [i, i + 1]} for i in range(N)]
    write_jsonl(tmp_path / "js" / "part-0.jsonl", rows)

    def stream(**opts):
        ds = [Dataset.from_path("js", tmp_path / "js"), Dataset.from_path("tok", tokens)]
        return [json.dumps([[type(v).__name__ for v in r.payload.values()] for r in b.records])
                for b in _batches(ds, **opts)]

    want = stream(num_workers=0)
    assert stream(num_workers=2) == want


def test_numpy_values_handed_over_come_back_as_numpy_values():
    ids = np.arange(6, dtype=np.int32)
    ds = Dataset.from_dict("m", {0: [{"ids": ids[:3], "n": np.int16(3), "plain": [1, 2]},
                                     {"ids": ids[3:], "n": np.int16(4), "plain": [3]}]})
    ws = StaticMixtureWorkSource([ds], {"m": 1.0}, seed=1, chunk_size=2)
    got = [r.payload for b in Pipeline(ws).batch(2) for r in b.records]
    assert [p["ids"].dtype for p in got] == [np.int32, np.int32]
    assert sorted(p["ids"].tolist() for p in got) == [[0, 1, 2], [3, 4, 5]]
    assert {type(p["n"]) for p in got} == {np.int16} and {type(p["plain"]) for p in got} == {list}
    assert ids.flags.writeable  # the user's own array is untouched
