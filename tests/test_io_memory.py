"""In-memory datasets: normalised ids, copies on every read, columnar where Arrow can."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from zephon.io import Dataset, InMemoryShard, NotColumnar, payloads_from_table, sparse_columns


def test_ids_are_normalised_and_sorted():
    ds = Dataset.from_dict("m", {"7": InMemoryShard([{"a": 1}]), 2: [{"a": 2}, {"a": 3}]})
    assert ds.fmt == "memory" and ds.name == "m"
    assert ds.ids().tolist() == [2, 7] and ds.counts().tolist() == [2, 1]
    assert ds.total() == len(ds) == 3 and ds.max_count() == 2 and ds.shard_count() == 2
    assert ds.raw_bytes() is None
    with pytest.raises(ValueError):
        ds.ids()[0] = 1


def test_in_memory_shard_sequence():
    s = InMemoryShard([{"a": 1}, {"a": 2}, {"a": 3}])
    assert len(s) == 3 and s[1] == {"a": 2} and list(s)[2] == {"a": 3}
    assert isinstance(s[1:], InMemoryShard) and len(s[1:]) == 2


def test_reads_never_hand_out_or_mutate_user_objects():
    payload = {"text": "hi", "tags": ["a"], "meta": {"k": [1]}}
    ds = Dataset.from_dict("m", {0: [payload]})
    got = ds.read_payloads(0, [0, 0])
    assert got == [payload, payload]
    got[0]["tags"].append("b")
    got[1]["meta"]["k"].append(2)
    assert payload == {"text": "hi", "tags": ["a"], "meta": {"k": [1]}}
    table = ds.read_table(0, [0])
    assert table.to_pylist() == [payload]


def test_user_list_changes_after_construction_do_not_leak_in():
    items = [{"a": 1}]
    ds = Dataset.from_dict("m", {0: items})
    items.append({"a": 2})
    assert ds.counts().tolist() == [1]


def test_non_dict_payloads_are_not_columnar():
    ds = Dataset.from_dict("m", {0: ["plain text", "more"], 1: [[1, 2, 3]]})
    with pytest.raises(NotColumnar):
        ds.read_table(0, [0])
    assert ds.read_payloads(0, [1, 0]) == ["more", "plain text"]
    assert ds.read_payloads(1, [0]) == [[1, 2, 3]]


def test_conflicting_types_are_not_columnar():
    ds = Dataset.from_dict("m", {0: [{"v": 1}, {"v": "x"}]})
    with pytest.raises(NotColumnar):
        ds.read_table(0, [0, 1])


def test_absent_keys_are_sparse():
    recs = [{"a": 1}, {"b": "x"}]
    t = Dataset.from_dict("m", {0: recs}).read_table(0, [1, 0])
    assert sparse_columns(t) == {"a", "b"}
    assert payloads_from_table(t) == recs[::-1]


def test_empty_and_invalid_inputs():
    with pytest.raises(ValueError, match="empty"):
        Dataset.from_dict("m", {0: [], 1: InMemoryShard()})
    with pytest.raises(ValueError):
        Dataset.from_dict("m", {})
    with pytest.raises(ValueError, match="not an integer"):
        Dataset.from_dict("m", {"x": [{"a": 1}]})
    with pytest.raises(ValueError, match="twice"):
        Dataset.from_dict("m", {1: [{"a": 1}], "1": [{"a": 2}]})
    with pytest.raises(TypeError):
        Dataset.from_dict("m", {0: "abc"})


def test_empty_shards_are_left_out():
    ds = Dataset.from_dict("m", {0: [], 3: [{"a": 1}]})
    assert ds.ids().tolist() == [3]
    with pytest.raises(KeyError):
        ds.read_payloads(0, [0])


def test_out_of_range_rows():
    ds = Dataset.from_dict("m", {0: [{"a": 1}]})
    with pytest.raises(IndexError, match="row index 1"):
        ds.read_payloads(0, [1])
    with pytest.raises(IndexError):
        ds.read_table(0, np.array([-1]))


def test_pickles_with_its_payloads():
    ds = Dataset.from_dict("m", {0: [{"a": 1}, {"a": 2}]})
    ds.read_table(0, [0])  # opens a per-process reader, which must not travel
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.read_payloads(0, [1]) == [{"a": 2}]
    assert clone.ids().tolist() == [0]


def test_warm_is_a_no_op_but_checks_ids():
    ds = Dataset.from_dict("m", {0: [{"a": 1}]})
    ds.warm([0])
    with pytest.raises(KeyError):
        ds.warm([5])
