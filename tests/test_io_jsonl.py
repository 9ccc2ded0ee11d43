"""JSONL datasets: line-indexed random access, compression, absent keys, precise errors."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pyarrow as pa
import pytest
from io_helpers import jsonl_bytes, jsonl_dataset, records, write_jsonl

from zephon.io import (
    DataError,
    Dataset,
    NotColumnar,
    ShardMissingError,
    payloads_from_table,
    sparse_columns,
)
from zephon.io.formats import jsonl_lines as lines_mod


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_reads_rows_in_requested_order_with_repeats(tmp_path, compression):
    shards = jsonl_dataset(tmp_path / "d", shards=3, rows=40, compression=compression)
    ds = Dataset.from_path("web", tmp_path / "d")
    assert ds.fmt == "jsonl"
    assert ds.ids().tolist() == [0, 1, 2] and ds.counts().tolist() == [40, 40, 40]
    assert ds.total() == len(ds) == 120 and ds.max_count() == 40
    rows = np.array([39, 0, 7, 7, 21, 0], dtype=np.int64)
    for sid in range(3):
        expected = [shards[sid][i] for i in rows]
        assert ds.read_table(sid, rows).to_pylist() == expected
        assert ds.read_payloads(sid, rows) == expected
        seq = np.arange(10, 30)
        assert ds.read_table(sid, seq).to_pylist() == shards[sid][10:30]


def test_catalog_arrays_are_read_only(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=2)
    ds = Dataset.from_path("web", tmp_path / "d")
    for arr in (ds.ids(), ds.counts(), ds.raw_bytes()):
        assert arr.dtype == np.int64
        with pytest.raises(ValueError):
            arr[0] = 5


def test_compressed_shard_is_decoded_once_into_cache(tmp_path, cache_dir, monkeypatch):
    jsonl_dataset(tmp_path / "d", shards=2, rows=30, compression="gzip")
    ds = Dataset.from_path("web", tmp_path / "d")
    decoded = sorted(p.name for p in (cache_dir / "shards").iterdir())
    assert len(decoded) == 2 and all(n.endswith(".jsonl") for n in decoded)
    assert ds.raw_bytes().tolist() == [len(jsonl_bytes(records(30, s * 1000))) for s in range(2)]
    scans = []
    real = lines_mod.scan_stream
    monkeypatch.setattr(lines_mod, "scan_stream", lambda *a, **k: scans.append(1) or real(*a, **k))
    again = Dataset.from_path("web", tmp_path / "d")  # a second discovery: nothing rescanned
    for sid in again.ids():
        again.read_table(sid, np.arange(30))
    assert scans == []


def test_line_index_built_once_per_shard(tmp_path, monkeypatch):
    jsonl_dataset(tmp_path / "d", shards=1, rows=50)
    ds = Dataset.from_path("web", tmp_path / "d")
    calls = []
    real = lines_mod.scan_stream
    monkeypatch.setattr(lines_mod, "scan_stream", lambda *a, **k: calls.append(1) or real(*a, **k))
    fresh = Dataset.from_path("web", tmp_path / "d")  # index persisted by the first discovery
    for i in range(20):
        fresh.read_table(0, [i, 49 - i])
    ds.read_payloads(0, [3])
    assert calls == []


def test_blank_lines_and_crlf(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_bytes(b'\n  \n{"a": 1}\r\n\n{"a": 2}\r\n   \n{"a": 3}')
    ds = Dataset.from_path("x", d)
    assert ds.counts().tolist() == [3]
    assert ds.read_table(0, [2, 0, 1]).to_pylist() == [{"a": 3}, {"a": 1}, {"a": 2}]
    assert ds.read_payloads(0, [1]) == [{"a": 2}]


def test_absent_keys_are_marked_sparse_and_dropped(tmp_path):
    recs = [{"id": 0, "lang": "en"}, {"id": 1}, {"id": 2, "lang": None, "x": 1}]
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    ds = Dataset.from_path("x", tmp_path / "d")
    t = ds.read_table(0, [0, 1])
    assert sparse_columns(t) == {"lang"}
    assert payloads_from_table(t) == recs[:2]
    # explicit null only: not sparse, the null stays
    t = ds.read_table(0, [2])
    assert sparse_columns(t) == frozenset()
    assert payloads_from_table(t) == [recs[2]]
    # absent and explicit null in one column: Arrow cannot say which, so no table
    with pytest.raises(NotColumnar):
        ds.read_table(0, [1, 2])
    assert ds.read_payloads(0, [1, 2]) == [recs[1], recs[2]]


def test_nested_absent_keys_refuse_the_table(tmp_path):
    recs = [{"messages": [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "yo", "tool": "calc"}]},
            {"messages": [{"role": "user", "content": "a", "tool": None}]}]
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    ds = Dataset.from_path("x", tmp_path / "d")
    with pytest.raises(NotColumnar):
        ds.read_table(0, [0])
    assert payloads_from_table(ds.read_table(0, [1])) == [recs[1]]  # explicit nested null
    assert ds.read_payloads(0, [0, 1]) == recs


def test_heterogeneous_types_fall_back_to_exact_payloads(tmp_path):
    recs = [{"v": 1}, {"v": "one"}, {"v": [1]}]
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    ds = Dataset.from_path("x", tmp_path / "d")
    with pytest.raises(NotColumnar):
        ds.read_table(0, [0, 1])
    assert ds.read_table(0, [0]).to_pylist() == [{"v": 1}]  # a homogeneous read still works
    assert ds.read_payloads(0, [2, 1, 0]) == recs[::-1]


def test_iso_dates_stay_strings(tmp_path):
    recs = [{"t": "2020-01-01", "n": {"when": "2021-02-03T04:05:06"}}]
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    t = Dataset.from_path("x", tmp_path / "d").read_table(0, [0])
    assert t.to_pylist() == recs
    assert t.schema.field("t").type == pa.string()


def test_columns_projection(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=1, rows=5)
    t = Dataset.from_path("x", tmp_path / "d").read_table(0, [1, 2], columns=["text", "nope"])
    assert t.column_names == ["text"]


def test_empty_rows_and_out_of_range(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=1, rows=5)
    ds = Dataset.from_path("x", tmp_path / "d")
    assert ds.read_table(0, np.zeros(0, np.int64)).num_rows == 0
    assert ds.read_payloads(0, []) == []
    with pytest.raises(IndexError, match="row index 5"):
        ds.read_table(0, [5])
    with pytest.raises(KeyError, match="no shard 9"):
        ds.read_table(9, [0])


def _bad_shard(tmp_path, body: bytes, name: str = "bad.jsonl"):
    d = tmp_path / "d"
    d.mkdir(exist_ok=True)
    (d / name).write_bytes(body)
    return Dataset.from_path("corpus", d)


@pytest.mark.parametrize("reader", ["read_table", "read_payloads"])
def test_malformed_line_error_names_dataset_shard_and_line(tmp_path, reader):
    ds = _bad_shard(tmp_path, b'{"a": 1}\n\n{"a": 2}\n{"a": 3,,}\n{"a": 4}\n')
    with pytest.raises(DataError) as e:
        getattr(ds, reader)(0, [0, 1, 2, 3])
    err = e.value
    assert err.dataset == "corpus" and err.shard.endswith("bad.jsonl") and err.line == 4
    assert "line 4" in str(err) and "corpus" in str(err) and "bad.jsonl" in str(err)


def test_line_that_is_not_an_object(tmp_path):
    ds = _bad_shard(tmp_path, b'{"a": 1}\n[1, 2]\n')
    with pytest.raises(DataError, match="line 2.*not a JSON object"):
        ds.read_table(0, [0, 1])
    assert ds.read_table(0, [0]).to_pylist() == [{"a": 1}]


def test_two_objects_on_one_line(tmp_path):
    ds = _bad_shard(tmp_path, b'{"a": 1}\n{"a": 2}{"a": 3}\n')
    with pytest.raises(DataError, match="line 2"):
        ds.read_table(0, [0, 1])


def test_truncated_gzip_names_the_shard(tmp_path):
    data = gzip.compress(jsonl_bytes(records(2000)))
    d = tmp_path / "d"
    d.mkdir()
    (d / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"cut\.jsonl\.gz.*truncated or corrupt") as e:
        Dataset.from_path("corpus", d)
    assert e.value.dataset == "corpus"


def test_truncated_zstd_names_the_shard(tmp_path):
    import zstandard

    data = zstandard.ZstdCompressor().compress(jsonl_bytes(records(2000)))
    d = tmp_path / "d"
    d.mkdir()
    (d / "cut.jsonl.zst").write_bytes(data[: len(data) - 7])
    with pytest.raises(DataError, match=r"cut\.jsonl\.zst"):
        Dataset.from_path("corpus", d)


def test_not_gzip_at_all(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "fake.jsonl.gz").write_bytes(b"this is not gzip data at all")
    with pytest.raises(DataError, match="fake.jsonl.gz"):
        Dataset.from_path("corpus", d)


def test_shard_deleted_after_discovery(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=2, rows=5)
    ds = Dataset.from_path("corpus", tmp_path / "d")
    os.remove(tmp_path / "d" / "part-001.jsonl")
    with pytest.raises(ShardMissingError, match="part-001.jsonl") as e:
        ds.read_table(1, [0])
    assert isinstance(e.value, FileNotFoundError) and e.value.dataset == "corpus"


def test_shard_changed_after_discovery(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=1, rows=5)
    ds = Dataset.from_path("corpus", tmp_path / "d")
    write_jsonl(tmp_path / "d" / "part-000.jsonl", records(3))
    with pytest.raises(DataError, match="changed since"):
        ds.read_table(0, [0])


def test_numpy_twin_gives_the_same_reads(tmp_path, monkeypatch):
    recs = [{"a": i, "b": {"c": i} if i % 2 else {"d": i}, **({"e": 1} if i % 3 else {})}
            for i in range(30)]
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    expected = {}
    for disabled in ("0", "1"):
        monkeypatch.setenv("ZEPHON_DISABLE_EXT", disabled)
        ds = Dataset.from_path("x", tmp_path / "d")
        rows = [29, 1, 3, 3]
        got = (ds.read_payloads(0, rows), payloads_from_table(ds.read_table(0, [0, 2, 4])))
        with pytest.raises(NotColumnar):
            ds.read_table(0, [0, 1])
        expected[disabled] = got
    assert expected["0"] == expected["1"]
    assert expected["0"][0] == [recs[i] for i in [29, 1, 3, 3]]
    assert expected["0"][1] == [recs[i] for i in [0, 2, 4]]


def test_payloads_are_fresh_objects(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=1, rows=3)
    ds = Dataset.from_path("x", tmp_path / "d")
    a, b = ds.read_payloads(0, [1, 1])
    assert a == b and a is not b
    a["text"] = "changed"
    assert ds.read_payloads(0, [1])[0]["text"] != "changed"


def test_escaped_keys_resolve_exactly(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    # "\u0061" is "a" written with an escape; the second record lacks "a"
    (d / "a.jsonl").write_bytes(b'{"\\u0061": 1, "b": 2}\n{"b": 3}\n')
    t = Dataset.from_path("x", d).read_table(0, [0, 1])
    assert payloads_from_table(t) == [{"a": 1, "b": 2}, {"b": 3}]


def test_index_file_of_foreign_shape_is_json_error(tmp_path):
    jsonl_dataset(tmp_path / "d", shards=1)
    (tmp_path / "d" / "index.json").write_text("{not json")
    with pytest.raises(DataError, match="index.json"):
        Dataset.from_path("x", tmp_path / "d")


def test_large_values_round_trip(tmp_path):
    recs = [{"text": "é" * 5000, "n": 2**62}, {"text": "", "n": -1}]
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    ds = Dataset.from_path("x", tmp_path / "d")
    assert ds.read_table(0, [1, 0]).to_pylist() == recs[::-1]
    assert json.loads(json.dumps(ds.read_payloads(0, [0])[0])) == recs[0]


def test_shard_that_arrow_keeps_rejecting_is_parsed_line_by_line(tmp_path, monkeypatch):
    import pyarrow.json as pj

    recs = [{"v": i if i % 2 else str(i)} for i in range(40)]  # int / str alternate
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    ds = Dataset.from_path("x", tmp_path / "d")
    calls = []
    real = pj.read_json
    monkeypatch.setattr(pj, "read_json", lambda *a, **k: calls.append(1) or real(*a, **k))
    for a in range(0, 40, 4):
        with pytest.raises(NotColumnar):
            ds.read_table(0, np.arange(a, a + 4))
        assert ds.read_payloads(0, np.arange(a, a + 4)) == recs[a:a + 4]
    assert len(calls) == 2  # Arrow was tried twice, then skipped for this shard
    assert ds.read_table(0, [1, 3]).to_pylist() == [recs[1], recs[3]]


# -- flat string records: decoded by the lineindex_records kernel, same tables as Arrow's -------

def _string_records(n: int) -> list[dict]:
    return [{"text": f'doc {i} "q" \\ é \U0001F600\n' + "w" * (i % 7), "id": f"d{i}",
             **({"lang": "en"} if i % 3 else {})} for i in range(n)]


def _general_only(monkeypatch) -> None:
    from zephon.io.formats.jsonl_reader import JsonlShardReader

    monkeypatch.setattr(JsonlShardReader, "_read_flat", lambda self, rows: None)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_string_records_skip_arrows_parser_and_match_it(tmp_path, monkeypatch, compression):
    import pyarrow.json as pj

    recs = _string_records(30)
    suffix = ".jsonl.gz" if compression else ".jsonl"
    write_jsonl(tmp_path / "d" / f"a{suffix}", recs, compression)
    calls = []
    real = pj.read_json
    monkeypatch.setattr(pj, "read_json", lambda *a, **k: calls.append(1) or real(*a, **k))
    rows = np.array([17, 0, 5, 5, 29, 3], dtype=np.int64)
    fast = Dataset.from_path("x", tmp_path / "d").read_table(0, rows)
    assert calls == []
    assert payloads_from_table(fast) == [recs[i] for i in rows]
    assert sparse_columns(fast) == {"lang"}
    _general_only(monkeypatch)
    general = Dataset.from_path("x", tmp_path / "d").read_table(0, rows)
    assert calls and fast.equals(general) and fast.schema == general.schema
    assert fast.schema.metadata == general.schema.metadata


def test_string_records_projection_and_present_everywhere(tmp_path):
    recs = [{"text": "a", "src": "web"}, {"src": "code", "text": "b"}]
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    ds = Dataset.from_path("x", tmp_path / "d")
    t = ds.read_table(0, [1, 0])
    assert t.column_names == ["text", "src"] and sparse_columns(t) == frozenset()
    assert t.to_pylist() == [recs[1], {"src": "web", "text": "a"}]
    assert ds.read_table(0, [0], columns=["text", "nope"]).column_names == ["text"]


def test_read_with_one_other_value_takes_the_general_path(tmp_path, monkeypatch):
    recs = _string_records(10)
    recs[4]["n"] = [4]
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    rows = np.arange(10)
    fast = Dataset.from_path("x", tmp_path / "d").read_table(0, rows)
    assert payloads_from_table(fast) == recs
    _general_only(monkeypatch)
    assert fast.equals(Dataset.from_path("x", tmp_path / "d").read_table(0, rows))


@pytest.mark.parametrize("body, line, match", [
    (b'{"a": "1"}\n{"a": "2",,}\n', 2, "malformed"),
    (b'{"a": "1"}\n\n["a"]\n', 3, "not a JSON object"),
    (b'{"a": "1"}\n{"a": "2"}{"a": "3"}\n', 2, "malformed"),
])
def test_string_shard_errors_name_the_line(tmp_path, body, line, match):
    ds = _bad_shard(tmp_path, body)
    with pytest.raises(DataError, match=match) as e:
        ds.read_table(0, [0, 1])
    assert e.value.line == line and e.value.shard.endswith("bad.jsonl")
    assert ds.read_table(0, [0]).to_pylist() == [{"a": "1"}]


def test_string_shard_with_bom(tmp_path):
    ds = _bad_shard(tmp_path, b'\xef\xbb\xbf{"a": "1"}\n{"a": "2"}\n')
    assert ds.read_table(0, [1, 0]).to_pylist() == [{"a": "2"}, {"a": "1"}]


def test_numpy_twin_gives_the_same_string_reads(tmp_path, monkeypatch):
    recs = _string_records(20)
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    got = {}
    for disabled in ("0", "1"):
        monkeypatch.setenv("ZEPHON_DISABLE_EXT", disabled)
        got[disabled] = Dataset.from_path("x", tmp_path / "d").read_table(0, [19, 2, 2, 0])
    assert got["0"].equals(got["1"]) and got["0"].schema == got["1"].schema
    assert payloads_from_table(got["0"]) == [recs[i] for i in [19, 2, 2, 0]]


@pytest.mark.parametrize("rows", [[3, 1, 0], [2, 0], [1, 2, 2, 0], [3, 2], [0, 1, 2, 3]])
def test_string_columns_in_the_general_paths_order(tmp_path, monkeypatch, rows):
    # Arrow names columns by first appearance over the unique rows ascending; empty values
    # side by side (record 2) leave the member order to the general path
    recs = [{"b": "1", "a": ""}, {"c": "", "a": "x"}, {"a": "", "c": "", "b": "2"}, {"d": "y"}]
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    fast = Dataset.from_path("x", tmp_path / "d").read_table(0, rows)
    _general_only(monkeypatch)
    general = Dataset.from_path("x", tmp_path / "d").read_table(0, rows)
    assert fast.column_names == general.column_names
    assert fast.equals(general) and fast.schema.metadata == general.schema.metadata


# -- flat scalar records: numbers, booleans and nulls typed the way Arrow's reader types them ----

def _outcome(ds, rows):
    """A read's table, or the type of the error it raised."""
    try:
        return ds.read_table(0, rows)
    except (NotColumnar, DataError) as e:
        return type(e)


def _fast_and_general(root, monkeypatch, body: bytes, rows) -> tuple[object, object, bool]:
    """The read of ``rows`` with the flat records path allowed and with the general path only,
    and whether the flat records path made the first one."""
    from zephon.io.formats.jsonl_reader import JsonlShardReader

    root.mkdir(parents=True)
    (root / "a.jsonl").write_bytes(body)
    taken = []
    real = JsonlShardReader._read_flat

    def spy(self, r):
        table = real(self, r)
        taken.append(table is not None)
        return table

    with monkeypatch.context() as m:
        m.setattr(JsonlShardReader, "_read_flat", spy)
        fast = _outcome(Dataset.from_path("x", root), rows)
    with monkeypatch.context() as m:
        m.setattr(JsonlShardReader, "_read_flat", lambda self, r: None)
        general = _outcome(Dataset.from_path("x", root), rows)
    return fast, general, any(taken)


def _assert_identical(fast, general) -> None:
    if isinstance(fast, type) or isinstance(general, type):
        assert fast == general
        return
    assert fast.schema == general.schema and fast.schema.metadata == general.schema.metadata
    # values and nulls; repr tells -0.0 from 0.0 and any two doubles apart (and NaN equals NaN)
    assert repr(fast.to_pylist()) == repr(general.to_pylist())


def _lines(*recs: str) -> bytes:
    return "".join(r + "\n" for r in recs).encode()


def test_s3_shape_records_skip_arrows_parser_and_match_it(tmp_path, monkeypatch):
    import pyarrow.json as pj

    rng = np.random.default_rng(0)
    recs = [{"id": i, "url": f"https://example.com/{i}", "text": "w " * int(rng.integers(0, 50)),
             "score": float(rng.random())} for i in range(50)]
    write_jsonl(tmp_path / "d" / "a.jsonl", recs)
    calls = []
    real = pj.read_json
    monkeypatch.setattr(pj, "read_json", lambda *a, **k: calls.append(1) or real(*a, **k))
    rows = np.array([49, 3, 3, 0, 17], dtype=np.int64)
    fast = Dataset.from_path("x", tmp_path / "d").read_table(0, rows)
    assert calls == [] and fast.to_pylist() == [recs[i] for i in rows]
    assert fast.schema.types == [pa.int64(), pa.string(), pa.string(), pa.float64()]
    _general_only(monkeypatch)
    _assert_identical(fast, Dataset.from_path("x", tmp_path / "d").read_table(0, rows))


@pytest.mark.parametrize("body, types", [
    (_lines('{"a": 1, "b": 1.5}', '{"a": -0, "b": 2}', '{"b": -0.0, "a": 7}'),
     [pa.int64(), pa.float64()]),
    (_lines('{"n": 9007199254740992}', '{"n": 0.5}', '{"n": 1E+2}', '{"n": 1e-400}'),
     [pa.float64()]),
    (_lines('{"x": 0.1, "y": 4.9e-324}', '{"x": 0.30000000000000004, "y": 2.2250738585072011e-308}',
            '{"x": 123456789012345678901234567890.5, "y": 1.7976931348623157e200}'),
     [pa.float64(), pa.float64()]),
    (_lines('{"i": 9223372036854775807}', '{"i": -9223372036854775808}'), [pa.int64()]),
    (_lines('{"t": true, "n": null, "s": "x"}', '{"t": false, "n": null, "s": null}',
            '{"t": null, "n": null, "s": "y"}'), [pa.bool_(), pa.null(), pa.string()]),
    (_lines('{"a": 1}', '{"b": 2.5}', '{"a": 3, "c": true}', '{}'),
     [pa.int64(), pa.float64(), pa.bool_()]),
    (_lines('{"d": "2020-01-01", "k": 1}', '{"d": null, "k": null}'), [pa.string(), pa.int64()]),
])
def test_scalar_records_take_the_flat_path_and_match_the_general_one(tmp_path, monkeypatch, body,
                                                                      types):
    n = body.count(b"\n")
    for i, rows in enumerate([np.arange(n), np.arange(n)[::-1], np.array([n - 1, 0, n - 1, 0])]):
        fast, general, taken = _fast_and_general(tmp_path / str(i), monkeypatch, body, rows)
        assert taken and not isinstance(fast, type)
        if len(set(rows.tolist())) == n:
            assert fast.schema.types == types
        _assert_identical(fast, general)


@pytest.mark.parametrize("body", [
    _lines('{"a": 1}', '{"a": "one"}'),  # Arrow: changed from number to string
    _lines('{"a": 1}', '{"a": true}'),
    _lines('{"a": "x"}', '{"a": false}'),
    _lines('{"a": 1}', '{"a": null}', '{}'),  # absent keys and nulls in one column
    _lines('{"a": null}', '{"b": 1}'),
    _lines('{"a": 9223372036854775808}', '{"a": 1}'),  # Arrow types this column double
    _lines('{"a": 9007199254740993}', '{"a": 0.5}'),  # a double that rounds an int
    _lines('{"a": 1e400}'), _lines('{"a": 1e250}'), _lines('{"a": NaN}'), _lines('{"a": Infinity}'),
    _lines('{"a": 01}'), _lines('{"a": +1}'), _lines('{"a": 1.}'), _lines('{"a": tru}'),
    _lines('{"a": 1, "a": 2}'), _lines('{"a": 1}', '{"a": [1]}'), _lines('{"a": {"b": 1}}'),
])
def test_other_scalar_mixes_are_left_to_the_general_path(tmp_path, monkeypatch, body):
    n = body.count(b"\n")
    fast, general, taken = _fast_and_general(tmp_path / "d", monkeypatch, body, np.arange(n))
    assert not taken
    _assert_identical(fast, general)


@pytest.mark.parametrize("body, line", [
    (_lines('{"a": 1}', '{"a": 01}'), 2), (_lines('{"a": 1.5}', '', '{"a": -}'), 3),
    (_lines('{"a": true}', '{"a": tru}'), 2),
])
def test_scalar_shard_errors_name_the_line(tmp_path, body, line):
    ds = _bad_shard(tmp_path, body)
    with pytest.raises(DataError, match="malformed") as e:
        ds.read_table(0, np.arange(2))
    assert e.value.line == line


_FLOATS = ["0.5", "-0.0", "0.1", "1E+2", "1e-400", "4.9e-324", "2.5e-7", "1.7976931348623157e200",
           "123456789.123456789123456789", "1e200", "-1.5e-310", "0.30000000000000004"]
_INTS = ["0", "-0", "17", "-1", "9007199254740992", "9007199254740993", "9223372036854775807",
         "-9223372036854775808", "9223372036854775808"]
_STRINGS = ['""', '"x"', '"2020-01-01"', '"\\u00e9\\n"', '"1"']
_KINDS = {"int": _INTS, "float": _FLOATS, "str": _STRINGS, "bool": ["true", "false"],
          "null": ["null"]}


def _random_shard(rng) -> bytes:
    """Flat records over a few keys; each key draws from one to three kinds of values, so most
    shards stay within what the flat path takes and some mix kinds Arrow cannot."""
    names = list(_KINDS)
    palette = {key: rng.choice(names, size=int(rng.choice([1, 1, 2, 2, 3])), replace=False)
               for key in ("a", "b", "c", "d")}
    lines = []
    for _ in range(int(rng.integers(1, 9))):
        members = []
        for key in rng.permutation(list(palette)):
            if rng.random() < 0.8:
                pool = _KINDS[rng.choice(palette[key])]
                members.append(f'"{key}": {pool[int(rng.integers(len(pool)))]}')
        lines.append("{" + ", ".join(members) + "}")
    return _lines(*lines)


def test_flat_path_matches_the_general_path_on_random_records(tmp_path, monkeypatch):
    rng = np.random.default_rng(20240611)
    taken_count = 0
    for trial in range(300):
        body = _random_shard(rng)
        n = body.count(b"\n")
        rows = rng.integers(0, n, size=int(rng.integers(1, 2 * n + 1)))
        if rng.random() < 0.3:
            rows = np.unique(rows)
        fast, general, taken = _fast_and_general(tmp_path / str(trial), monkeypatch, body, rows)
        taken_count += taken
        try:
            _assert_identical(fast, general)
        except AssertionError:
            raise AssertionError(f"rows {rows.tolist()} of\n{body.decode()}") from None
    assert taken_count > 60  # the comparison covered the flat path, not only its refusals


def test_integers_beyond_int64_are_exact_whatever_the_block_size_workers_or_runner(tmp_path):
    """Arrow's JSON reader types an integer past int64 double (and the 5 beside it 5.0): values
    are Python json's, the same for every micro_batch_size, worker count and runner, also
    through a map_transform."""
    from zephon import Pipeline
    from zephon.work import StaticMixtureWorkSource

    lines = [{"n": 5}, {"n": 18446744073709551615}, {"n": 7}, {"n": -(2 ** 70)},
             {"n": 3, "deep": {"xs": [1, 2 ** 64]}}, {"n": 1e300}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    ds = Dataset.from_path("big", tmp_path)
    assert ds.read_payloads(0, np.arange(6)) == lines
    runs = [dict(micro_batch_size=m) for m in (1, 2, 1024)]
    runs += [dict(micro_batch_size=1024, num_workers=2),
             dict(micro_batch_size=3, num_workers=2, runner="threads")]
    for opts in runs:
        for mapped in (False, True):
            ws = StaticMixtureWorkSource([ds], {"big": 1.0}, seed=1, chunk_size=9)
            p = Pipeline(ws)
            if mapped:
                p = p.map_transform(lambda r: r)
            p = p.batch(microbatch_size=6, drop_last=False).options(**opts)
            got = [r.payload for r in next(iter(p)).records]
            assert sorted(map(json.dumps, got)) == sorted(map(json.dumps, lines)), (opts, mapped)
            assert all(type(r["n"]) is type(e["n"]) for r, e in
                       zip(sorted(got, key=json.dumps), sorted(lines, key=json.dumps))), opts
