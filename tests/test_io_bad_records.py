"""Undecodable JSONL lines: a DataError naming dataset, shard and line at fetch, or, under
``on_bad_record="skip"``, left out, counted, and the stream the same in every runner and after a
restore."""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pytest

from zephon import Pipeline
from zephon.io import DataError, Dataset
from zephon.io.formats.jsonl_reader import JsonlShardReader
from zephon.work import StaticMixtureWorkSource

BAD_LINES = {
    "utf8": b'{"id": %d, "text": "caf\xe9 \xff"}',
    "json": b'{"id": %d, "text": "unterminated}',
    "array": b'[%d, "not an object"]',
    "string": b'"record %d"',
    # valid JSON, yet no Unicode text: a tokenizer would fail on it with no line named
    "surrogate": b'{"id": %d, "text": "a\\ud800b"}',
}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))


def _write(path, n, bad: dict[int, bytes], start=0):
    """``n`` flat records, ``bad`` {index: line template} replacing some; a blank line after
    line 3 (physical line numbers count it)."""
    lines = []
    for i in range(n):
        line = bad[i] % (start + i) if i in bad else json.dumps(
            {"id": start + i, "text": f"doc {start + i} " + "é" * (i % 5)}).encode()
        lines.append(line)
        if i == 2:
            lines.append(b"   ")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(lines) + b"\n")


def _pipeline(ds, shuffle=False, **opts):
    ws = StaticMixtureWorkSource(ds if isinstance(ds, list) else [ds],
                                 {d.name: 1.0 / len(ds) for d in ds} if isinstance(ds, list)
                                 else {ds.name: 1.0}, seed=5, chunk_size=40,
                                 shuffle_within_shard=True)
    p = Pipeline(ws)
    if shuffle:
        p = p.shuffle(buffer_size=24, seed=2)
    return p.batch(6, drop_last=False).options(micro_batch_size=8, canonical_replicas=2,
                                               **opts)


def _sig(batch) -> tuple:
    return tuple(batch.ids), json.dumps(batch.block.payload_list(), sort_keys=True, default=str)


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
@pytest.mark.parametrize("opts", [dict(num_workers=0), dict(num_workers=2)],
                         ids=["inline", "process"])
def test_an_undecodable_line_is_a_data_error_at_fetch(tmp_path, kind, opts):
    _write(tmp_path / "d" / "part-0.jsonl", 30, {})
    _write(tmp_path / "d" / "part-1.jsonl", 30, {17: BAD_LINES[kind]}, start=100)
    p = _pipeline(Dataset.from_path("web", tmp_path / "d"), **opts)
    with pytest.raises(DataError) as e:
        for b in p:
            [r.payload for r in b.records]  # what a user reads: never a bare decode error
    err = e.value
    assert (err.dataset, err.line) == ("web", 19)  # record 17, after the blank line
    assert err.shard.endswith("part-1.jsonl")
    assert "dataset 'web'" in str(err) and "part-1.jsonl, line 19" in str(err)
    if kind == "utf8":
        assert "not valid UTF-8 (byte 0xe9" in str(err)


def test_a_surrogate_pair_is_text_and_a_lone_surrogate_skips_as_bad(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_bytes(b'{"id": 0, "text": "smile \\ud83d\\ude00"}\n'
                                              b'{"id": 1, "text": "a\\udfffb"}\n'
                                              b'{"id": 2, "text": "ok"}\n')
    ds = Dataset.from_path("web", tmp_path / "d", on_bad_record="skip")
    p = _pipeline(ds)
    texts = [r.payload["text"] for b in p for r in b.records]
    assert texts == ["smile \U0001f600", "ok"]
    assert p.metrics_snapshot()["losses"]["by_dataset"]["web"]["bad_record"]["records"] == 1


def test_read_table_names_the_line_whichever_reader_parses_it(tmp_path, monkeypatch):
    _write(tmp_path / "d" / "a.jsonl", 20, {5: BAD_LINES["utf8"]})
    ds = Dataset.from_path("web", tmp_path / "d")
    for rows in ([5], [0, 5, 9], [9, 5, 5, 0], list(range(20))):
        with pytest.raises(DataError, match="line 7: not valid UTF-8"):
            ds.read_table(0, rows)
        with pytest.raises(DataError, match="line 7"):
            ds.read_payloads(0, rows)
    monkeypatch.setattr(JsonlShardReader, "_read_flat", lambda self, rows: None)
    with pytest.raises(DataError, match="line 7: not valid UTF-8"):
        Dataset.from_path("web", tmp_path / "d").read_table(0, [4, 5])


def test_policy_is_checked_and_kept(tmp_path):
    _write(tmp_path / "d" / "a.jsonl", 5, {})
    with pytest.raises(ValueError, match="on_bad_record must be one of"):
        Dataset.from_path("web", tmp_path / "d", on_bad_record="ignore")
    ds = Dataset.from_path("web", tmp_path / "d", on_bad_record="skip")
    assert ds.on_bad_record == "skip"
    assert pickle.loads(pickle.dumps(ds)).on_bad_record == "skip"
    assert ds.with_store_options({"cache": {"enabled": False}}).on_bad_record == "skip"
    assert Dataset.from_path("web", tmp_path / "d").on_bad_record == "raise"


@pytest.fixture
def dirty(tmp_path):
    """web: 2 shards with 7 bad lines (a run of 5 fills a micro-batch); code: clean."""
    _write(tmp_path / "web" / "part-0.jsonl", 60,
           {3: BAD_LINES["utf8"], 40: BAD_LINES["json"]})
    _write(tmp_path / "web" / "part-1.jsonl", 50,
           {i: BAD_LINES["array" if i % 2 else "utf8"] for i in range(20, 25)}, start=1000)
    _write(tmp_path / "code" / "part-0.jsonl", 45, {}, start=5000)
    return tmp_path


def _datasets(root):
    return [Dataset.from_path("web", root / "web", on_bad_record="skip"),
            Dataset.from_path("code", root / "code")]


def test_skip_delivers_every_good_record_once_and_counts_the_bad(dirty):
    good = sorted(set(range(60)) - {3, 40}) + sorted(set(range(1000, 1050)) -
                                                     set(range(1020, 1025)))
    p = _pipeline(_datasets(dirty)[0], num_workers=0)
    with pytest.warns(RuntimeWarning, match="bad_record"):
        ids = [r.payload["id"] for b in p for r in b.records]
    assert sorted(ids) == good  # one pass: each good record once
    losses = p.metrics_snapshot()["losses"]
    assert losses["by_dataset"]["web"]["bad_record"] == {"records": 7, "tokens": 0,
                                                         "operators": ["fetch"]}
    p = _pipeline(_datasets(dirty), num_workers=0)  # with a clean dataset beside it
    with pytest.warns(RuntimeWarning, match="bad_record"):
        ids = {r.payload["id"] for b in p for r in b.records}
    assert ids == set(good) | set(range(5000, 5045))
    assert list(p.metrics_snapshot()["losses"]["by_dataset"]) == ["web"]


@pytest.mark.parametrize("shuffle", [False, True], ids=["batch", "shuffle+batch"])
def test_skipping_gives_one_stream_in_every_runner_and_restores_exactly(dirty, shuffle):
    warnings.simplefilter("ignore", RuntimeWarning)
    want = [_sig(b) for b in _pipeline(_datasets(dirty), shuffle, num_workers=0)]
    for opts in (dict(num_workers=2), dict(num_workers=2, runner="threads")):
        assert [_sig(b) for b in _pipeline(_datasets(dirty), shuffle, **opts)] == want
    for cut, opts in ((3, dict(num_workers=0)), (9, dict(num_workers=2))):
        p = _pipeline(_datasets(dirty), shuffle, **opts)
        it = iter(p)
        head = [_sig(next(it)) for _ in range(cut)]
        state = json.loads(json.dumps(p.checkpoint()))
        p.close()
        q = _pipeline(_datasets(dirty), shuffle, **opts).restore(state)
        assert head + [_sig(b) for b in q] == want


def test_the_flat_kernel_and_the_general_reader_skip_alike(dirty, monkeypatch):
    from zephon.io.formats.bad_records import read_skipping

    ds = Dataset.from_path("web", dirty / "web", on_bad_record="skip")
    rows = np.array([19, 20, 21, 26, 0, 24, 25, 49, 22, 30, 30], dtype=np.int64)
    fast, keep = read_skipping(ds, 1, rows, columnar=True)
    assert keep.tolist() == [True, False, False, True, True, False, True, True, False, True,
                             True]
    assert [r["id"] for r in fast.to_pylist()] == (1000 + rows[keep]).tolist()
    payloads, keep_p = read_skipping(ds, 1, rows, columnar=False)
    assert keep_p.tolist() == keep.tolist() and payloads == fast.to_pylist()
    monkeypatch.setattr(JsonlShardReader, "_read_flat", lambda self, rows: None)
    general, keep_g = read_skipping(Dataset.from_path("web", dirty / "web",
                                                      on_bad_record="skip"), 1, rows,
                                    columnar=True)
    assert keep_g.tolist() == keep.tolist() and general.equals(fast)


def test_a_block_of_bad_records_only_leaves_nothing_behind(tmp_path):
    _write(tmp_path / "d" / "a.jsonl", 12, {i: BAD_LINES["utf8"] for i in range(12)})
    _write(tmp_path / "d" / "b.jsonl", 4, {}, start=50)
    ds = Dataset.from_path("web", tmp_path / "d", on_bad_record="skip")
    ws = StaticMixtureWorkSource([ds], {"web": 1.0}, seed=1, chunk_size=16,
                                 shuffle_shards=False)
    with pytest.warns(RuntimeWarning, match="bad_record"):
        p = Pipeline(ws).batch(2, drop_last=False).options(micro_batch_size=4)
        got = [r.payload["id"] for b in p for r in b.records]
    assert got == [50, 51, 52, 53]


def test_a_lone_surrogate_is_a_bad_record_named_and_skippable(tmp_path):
    """``"a\\ud800b"`` is valid JSON text but no Unicode text: it reached tokenize as a bare
    UnicodeEncodeError. Now the read names it; skip mode counts it and delivers the rest."""
    _write(tmp_path / "d" / "a.jsonl", 12, {5: b'{"id": %d, "text": "a\\ud800b"}'})

    def tokenized(ds, **opts):
        ws = StaticMixtureWorkSource([ds], {ds.name: 1.0}, seed=5, chunk_size=40)
        return (Pipeline(ws).tokenize(tokenizer_id="__fallback__", field="text")
                .batch(6, drop_last=False).options(micro_batch_size=8, **opts))

    for opts in (dict(num_workers=0), dict(num_workers=2)):
        with pytest.raises(DataError, match=r"dataset 'web', shard .*a.jsonl, line 7: .*lone "
                           r"surrogate \\ud800"):
            for _ in tokenized(Dataset.from_path("web", tmp_path / "d"), **opts):
                pass
        p = tokenized(Dataset.from_path("web", tmp_path / "d", on_bad_record="skip"), **opts)
        with pytest.warns(RuntimeWarning, match="bad_record"):
            n = sum(len(b.records) for b in p)
        assert n == 11
        losses = p.metrics_snapshot()["losses"]
        assert losses["by_dataset"]["web"]["bad_record"]["records"] == 1
