"""The columnar block: take/slice/concat keep meta and payload aligned; absent keys stay absent."""

import numpy as np
import pyarrow as pa
import pytest

from zephon.block import Block, NotColumnar
from zephon.ragged_columns import list_array, ragged_chunks, ragged_column, take_table
from zephon.types import SampleBatch, block_from_records, records_from_block


def _block(n, start=0):
    b = Block.from_pointers(np.zeros(n), np.ones(n), np.arange(start, start + n), lane_id=0,
                            chunk_id=3, chunk_offset=np.arange(n))
    return b.with_payloads([{"text": f"doc{i}", "n": i} for i in range(start, start + n)])


def test_take_slice_concat_keep_rows_aligned():
    b = Block.concat([_block(5), _block(4, 5)])
    assert len(b) == 9 and b.columnar
    t = b.take(np.array([8, 0, 3]))
    assert t.ids() == [(0, 1, 8), (0, 1, 0), (0, 1, 3)]
    assert [p["n"] for p in t.payload_list()] == [8, 0, 3]
    s = b.slice(2, 4)
    assert [p["text"] for p in s.payload_list()] == ["doc2", "doc3"]


def test_absent_keys_are_not_filled_with_none():
    b = Block.from_pointers([0, 1], [0, 0], [0, 0], lane_id=0, chunk_id=0, chunk_offset=[0, 1])
    b = b.with_payloads([{"text": "a", "lang": "py"}, {"text": "b", "url": "x", "lang": None}])
    assert b.columnar
    assert b.payload_list() == [{"text": "a", "lang": "py"}, {"text": "b", "url": "x", "lang": None}]


def test_non_columnar_payloads_fall_back_to_objects():
    with pytest.raises(NotColumnar):
        Block.table_from_payloads(["a string", 3])
    b = Block.from_pointers([0, 0], [0, 0], [0, 1], lane_id=0, chunk_id=0, chunk_offset=[0, 1])
    b = b.with_payloads(["a string", {"k": 1}])
    assert not b.columnar and b.payload_list() == ["a string", {"k": 1}]


def test_ragged_roundtrip_zero_copy_offsets():
    offsets = np.array([0, 3, 3, 7], dtype=np.int64)
    values = np.arange(7, dtype=np.int32)
    table = pa.table({"input_ids": list_array(offsets, values)})
    off, val = ragged_column(table.slice(1, 2), "input_ids")
    assert off.tolist() == [0, 0, 4] and val.tolist() == [3, 4, 5, 6]


def test_records_roundtrip_through_block():
    b = _block(3)
    recs = records_from_block(b)
    assert recs[1].meta.sample_id == (0, 1, 1) and recs[1].meta.chunk_id == 3
    assert recs[1].payload == {"text": "doc1", "n": 1}
    back = block_from_records(recs)
    assert back.ids() == b.ids() and back.payload_list() == b.payload_list()
    batch = SampleBatch(recs)
    assert len(batch) == 3 and batch.ids == tuple(b.ids()) and batch.lane_ids == [0, 0, 0]


def test_returning_bare_dicts_is_refused_with_a_hint():
    with pytest.raises(TypeError, match="SampleRecord"):
        block_from_records([{"text": "x"}])


def _chunked_tokens(type_=None):
    """A token column of three Arrow chunks (one of them empty, one a slice)."""
    parts = [list_array(np.array([0, 2, 5]), np.arange(5, dtype=np.int32), type_),
             list_array(np.array([0]), np.empty(0, dtype=np.int32), type_),
             list_array(np.array([0, 1, 1, 4, 6]), np.arange(6, dtype=np.int32) + 50,
                        type_).slice(1, 3)]
    return pa.table({"input_ids": pa.chunked_array(parts)})


def test_ragged_chunks_index_like_the_joined_column():
    table = _chunked_tokens()
    chunks = ragged_chunks(table, "input_ids")
    offsets, values = ragged_column(table, "input_ids")
    np.testing.assert_array_equal(chunks.offsets, offsets)
    vals, src, chunk = chunks.locate(offsets[:-1])
    for r in range(len(offsets) - 1):
        n = offsets[r + 1] - offsets[r]
        np.testing.assert_array_equal(vals[chunk[r]][src[r]:src[r] + n],
                                      values[offsets[r]:offsets[r + 1]])


def test_take_table_reads_chunks_in_place_and_keeps_the_type():
    element = pa.list_(pa.field("element", pa.int32(), nullable=False))
    table = _chunked_tokens(element)
    idx = np.array([4, 0, 4, 2, 1])
    got = take_table(table, idx)
    assert got.schema == table.schema
    assert got.column("input_ids").to_pylist() == [table.column("input_ids")[i].as_py()
                                                   for i in idx]
    with pytest.raises(ValueError, match="out of range"):
        take_table(table, np.array([5]))


def test_a_pickled_batch_carries_its_own_rows_only():
    """As a batch crosses a DataLoader worker's queue: not the block it was cut from (its
    ``origin``), nor the whole buffers its Arrow slice shares with that block."""
    import pickle

    from zephon.ops.batch import BatchLane

    parent = Block.from_pointers(np.zeros(1000), np.ones(1000), np.arange(1000), lane_id=0,
                                 chunk_id=3, chunk_offset=np.arange(1000))
    parent = parent.with_payloads([{"text": "x" * 1000, "n": i} for i in range(1000)])
    batches = BatchLane(10, drop_last=True).push(parent)
    b = SampleBatch._from_block(batches[3])
    assert b.block.origin is not None
    blob = pickle.dumps(b)
    assert len(blob) < 20_000  # 10 rows of ~1 KB, not the 1 MB parent
    back = pickle.loads(blob)
    assert back.block.origin is None and back.ids == b.ids
    assert back.block.payload.equals(b.block.payload)
    np.testing.assert_array_equal(back.block.meta["chunk_offset"], np.arange(30, 40))


def test_take_table_keeps_null_elements_of_list_columns():
    col = pa.chunked_array([pa.array([[1, None], [2]]), pa.array([[3]])])
    assert take_table(pa.table({"a": col}), np.array([2, 0])).column("a").to_pylist() == [
        [3], [1, None]]
