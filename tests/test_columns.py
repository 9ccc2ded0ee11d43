"""The columnar face of a batch (``to_arrow``, ``column``) and the records built from it."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pyarrow as pa
import pytest

from zephon import Pipeline, SampleBatch
from zephon.block import Block
from zephon.columns import RaggedColumn
from zephon.io import Dataset
from zephon.types import SampleMeta, SampleRecord, records_from_block
from zephon.work import StaticMixtureWorkSource


def _pipeline(corpus_dir, **opts):
    ds = [Dataset.from_path("code", str(corpus_dir / "code")),
          Dataset.from_path("web", str(corpus_dir / "web"))]
    ws = StaticMixtureWorkSource(ds, {"code": 0.25, "web": 0.75}, seed=7, chunk_size=90)
    return Pipeline(ws).options(**opts)


def _block() -> Block:
    meta = {"dataset_id": np.array([0, 1, 1], dtype=np.int64),
            "shard_id": np.array([2, 0, 0], dtype=np.int64),
            "sample_idx": np.array([5, 6, 7], dtype=np.int64),
            "lane_id": np.zeros(3, dtype=np.int64), "chunk_id": np.array([0, 0, 1], np.int64),
            "chunk_offset": np.array([3, 4, 0], dtype=np.int64),
            "padding_length": np.array([-1, 2, 0], dtype=np.int64),
            "comp_samples": np.array([[1, 0], [0, 2], [1, 1]], dtype=np.int64)}
    table = pa.table({"text": ["a", "bb", "ccc"], "n": [1, 2, 3],
                      "input_ids": pa.array([[1, 2], [3], [4, 5, 6]], pa.list_(pa.int32())),
                      "__recipe": [0, 0, 0]})
    lineage = np.array([[0, -1], [-1, -1], [1, 2]], dtype=np.int32)
    return Block(meta, table, lineage, is_batch=True)


def test_column_kinds_and_views():
    block = _block()
    batch = SampleBatch._from_block(block)
    text = batch.column("text")
    assert isinstance(text, pa.Array) and text.to_pylist() == ["a", "bb", "ccc"]
    n = batch.column("n")
    assert isinstance(n, np.ndarray) and n.tolist() == [1, 2, 3] and not n.flags.writeable
    ids = batch.column("input_ids")
    assert isinstance(ids, RaggedColumn) and len(ids) == 3
    assert [r.tolist() for r in ids] == [[1, 2], [3], [4, 5, 6]]
    assert ids.lengths().tolist() == [2, 1, 3] and ids[-1].tolist() == [4, 5, 6]
    # a view: the values are the table's own buffer, not a copy
    values_buf = block.payload.column("input_ids").chunk(0).values.buffers()[1]
    assert ids.values.ctypes.data == values_buf.address
    assert batch.column("sample_idx").tolist() == [5, 6, 7]
    with pytest.raises(KeyError, match="payload columns"):
        batch.column("__recipe")
    with pytest.raises(KeyError, match="no column 'nope'"):
        batch.column("nope")


def test_to_arrow_has_identity_then_payload_without_copies():
    block = _block()
    table = SampleBatch._from_block(block).to_arrow()
    assert table.column_names == ["dataset_id", "shard_id", "sample_idx", "lane_id", "chunk_id",
                                  "chunk_offset", "lineage", "padding_length", "text", "n",
                                  "input_ids"]
    assert table.column("lineage").to_pylist() == [[0], [], [1, 2]]
    assert table.column("sample_idx").to_pylist() == [5, 6, 7]
    src = block.payload.column("text").chunk(0).buffers()[2].address
    assert table.column("text").chunk(0).buffers()[2].address == src


def test_to_arrow_refuses_a_name_clash_and_object_payloads():
    block = _block()
    clash = Block(block.meta, block.payload.append_column("shard_id", pa.array([9, 9, 9])),
                  block.lineage, is_batch=True)
    with pytest.raises(ValueError, match=r"\['shard_id'\]"):
        SampleBatch._from_block(clash).to_arrow()
    objects = Block(block.meta, [object(), 1, "x"], block.lineage, is_batch=True)
    with pytest.raises(TypeError, match="batch.records"):
        SampleBatch._from_block(objects).column("text")


def test_records_behave_as_plain_records():
    block = _block()
    recs = records_from_block(block)
    r = recs[2]
    assert r.payload == {"text": "ccc", "n": 3, "input_ids": [4, 5, 6]}
    assert r.meta == SampleMeta((1, 0, 7), 0, 1, 0, {0: 1, 1: 1}, None, (1, 2),
                                {"_packing_metadata": {"padding_length": 0}})
    assert recs[0].meta.tags == {} and recs[1].meta.padding_length == 2
    assert recs[1].meta.component_sample_counts == {1: 2}
    plain = SampleRecord(r.meta, r.payload)
    assert r == plain and plain == r
    back = pickle.loads(pickle.dumps(r))
    assert type(back) is SampleRecord and back == r
    moved = dataclasses.replace(r, payload={"x": 1})
    assert moved.meta == r.meta and moved.payload == {"x": 1}
    r.meta = plain.meta.with_tombstone()
    assert r.meta.tombstone


def test_batch_ids_is_a_tuple(corpus_dir):
    p = _pipeline(corpus_dir, num_workers=0).batch(microbatch_size=4)
    batch = next(iter(p))
    p.close()
    assert isinstance(batch.ids, tuple) and len(batch.ids) == 4
    assert batch.ids == tuple(r.meta.sample_id for r in batch.records)


@pytest.mark.parametrize("workers", [0, 2])
def test_columns_match_records_from_any_engine(corpus_dir, workers):
    p = _pipeline(corpus_dir, num_workers=workers).batch(microbatch_size=16)
    seen = 0
    for batch, _ in zip(p, range(20)):
        texts = [r.payload["text"] for r in batch.records]
        assert batch.column("text").to_pylist() == texts
        assert batch.to_arrow().column("doc_id").to_pylist() == [r.payload["doc_id"]
                                                                 for r in batch.records]
        assert batch.column("chunk_offset").tolist() == [r.meta.chunk_offset
                                                         for r in batch.records]
        seen += 1
    p.close()
    assert seen == 20
