"""tokenize and its records: padding, counted truncation, whole splits, and bad values named
by dataset, shard and row (or skipped and counted)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephon import Pipeline, synthetic
from zephon.engine.plan.checkpoint_view import fingerprint as spec_fingerprint
from zephon.io import DataError, Dataset, InMemoryShard
from zephon.work import StaticMixtureWorkSource

TEXTS = synthetic.documents(40, seed=11, mean_words=30)


def fingerprint(pipeline):
    """The fingerprint a checkpoint of ``pipeline`` carries (of the spec it runs)."""
    return spec_fingerprint(pipeline._spec())


def _pipe(datasets, **opts):
    weights = {d.name: 1.0 for d in datasets}
    ws = StaticMixtureWorkSource(datasets, weights, chunk_size=16, seed=1, shuffle_shards=False)
    return Pipeline(ws).options(num_workers=0, **opts)


def _mem(texts=TEXTS, name="d"):
    parts = np.array_split(np.arange(len(texts)), 2)
    return Dataset.from_dict(name, {i: InMemoryShard([{"text": texts[j], "k": int(j)} for j in p])
                                    for i, p in enumerate(parts)})


def _fallback(p, **kw):
    return p.tokenize(tokenizer_id="__fallback__", field="text", **kw)


def _losses(p) -> dict:
    return p.metrics_snapshot()["losses"]["by_dataset"]


# -- padding -------------------------------------------------------------------------------------

def test_padding_true_leaves_records_whole_and_batches_pad_to_their_longest():
    p = _fallback(_pipe([_mem()]), padding=True).batch(microbatch_size=8)
    for b in p:
        rows = b.block.payload.column("input_ids").to_pylist()
        out = b.to_training(return_labels=True, dtype="numpy")
        width = max(map(len, rows))
        assert out["input_ids"].shape == (len(rows), width - 1)  # inputs and shifted labels
        for i, r in enumerate(rows):
            assert r[0] == 1 and r[-1] == 2  # the record as tokenized, unpadded
            assert (out["labels"][i, len(r) - 1:] == -100).all()  # pads never trained on


def test_padding_max_length_pads_short_rows_only_and_the_pads_are_masked():
    texts = ["ab", "abcdefghijklmnopqrstuvwxyz" * 2, "abc"]
    p = _fallback(_pipe([_mem(texts)]), padding="max_length", max_length=10, pad_token_id=0)
    rows = list(p)
    lengths = sorted(len(r.payload["input_ids"]) for r in rows)
    # a longer row stays whole (truncation=False); the others do not grow to its length
    assert lengths == [10, 10, 54]
    for r in rows:
        ids, mask = r.payload["input_ids"], r.payload["attention_mask"]
        n = int(np.sum(mask))
        assert ids[n - 1] == 2 and all(t == 0 for t in ids[n:]) and len(ids) == max(n, 10)
    b = next(iter(_fallback(_pipe([_mem(texts[:1] + texts[2:])]), padding="max_length",
                            max_length=10, truncation=True).batch(microbatch_size=2)))
    out = b.to_training(return_labels=True, return_padding_mask=True, dtype="numpy")
    assert out["input_ids"].shape == (2, 9)  # rows of 10: inputs and labels shifted by one
    assert out["padding_mask"].sum() == 18 - (4 + 5)
    assert (out["labels"] == -100).sum() == 18 - (3 + 4)  # every label of a pad is masked


def test_padding_does_not_depend_on_how_records_are_grouped():
    texts = ["x" * n for n in (3, 60, 5, 9, 1, 30)]

    def rows(micro):
        p = _fallback(_pipe([_mem(texts)], micro_batch_size=micro), padding="max_length",
                      max_length=12)
        return sorted((r.meta.sample_id, tuple(r.payload["input_ids"])) for r in p)

    assert rows(1) == rows(64)


def test_padding_with_split_pads_every_piece_to_max_length(tokenizer_path):
    p = _pipe([_mem()]).tokenize(tokenizer=tokenizer_path, field="text", max_length=16,
                                 split_long_samples=True, padding=True)
    whole = {r.meta.sample_id: r.payload["input_ids"]
             for r in _pipe([_mem()]).tokenize(tokenizer=tokenizer_path, field="text")}
    pieces: dict = {}
    for r in p:
        ids, mask = r.payload["input_ids"], r.payload["attention_mask"]
        assert len(ids) == 16
        n = sum(mask)
        assert r.meta.padding_length == 16 - n and all(t == 0 for t in ids[n:])  # <pad> = 0
        pieces.setdefault(r.meta.sample_id, []).append(ids[:n])
    assert {k: sum(v, []) for k, v in pieces.items()} == whole


def test_pad_id_falls_back_to_eos_then_zero():
    op = _fallback(_pipe([_mem()]), padding="max_length", max_length=8)._ops[-1]
    assert op.pad_id == 0  # the fallback tokenizer's <pad>
    with pytest.raises(ValueError, match="padding must be"):
        _fallback(_pipe([_mem()]), padding="max_lenght", max_length=8)
    with pytest.raises(ValueError, match="needs max_length"):
        _fallback(_pipe([_mem()]), padding="max_length")


# -- truncation and splits -----------------------------------------------------------------------

def test_truncation_is_counted_per_dataset_in_records_and_tokens():
    long = _mem(["y" * 50, "short", "z" * 30], name="long")
    short = _mem(["a", "bb"], name="short")
    p = _fallback(_pipe([long, short]), max_length=10, truncation=True)
    with pytest.warns(RuntimeWarning, match="truncated"):
        rows = list(p)
    assert all(len(r.payload["input_ids"]) <= 10 for r in rows)
    losses = _losses(p)
    # room for 8 text tokens: 50 - 8 and 30 - 8 tokens cut; "short" (5) fits
    assert losses == {"long": {"truncated": {"records": 2, "tokens": 42 + 22,
                                             "operators": ["tokenize"]}}}


def test_split_long_samples_delivers_every_token_and_counts_nothing():
    p = _fallback(_pipe([_mem()]), max_length=16, split_long_samples=True)
    got: dict = {}
    for r in p:
        assert len(r.payload["input_ids"]) <= 16
        got.setdefault(r.meta.sample_id, []).extend(r.payload["input_ids"])
    whole = {r.meta.sample_id: r.payload["input_ids"] for r in _fallback(_pipe([_mem()]))}
    assert got == whole and len(got) == len(TEXTS)
    assert _losses(p) == {}


# -- bad values in the text field ---------------------------------------------------------------

def _jsonl(root, name, lines: list[str]):
    d = root / name
    d.mkdir()
    (d / "part-0.jsonl").write_text("".join(line + "\n" for line in lines))
    return Dataset.from_path(name, str(d))


def test_an_int_among_strings_is_a_data_error_naming_the_row(tmp_path):
    ds = _jsonl(tmp_path, "mixed", ['{"text": "hello"}', '{"text": 5}', '{"text": "w"}'])
    with pytest.raises(DataError, match=r"dataset 'mixed', shard .*part-0\.jsonl, row 2: "
                                        r"tokenize: field 'text' holds a int value, not text") as e:
        list(_fallback(_pipe([ds])))
    assert (e.value.dataset, e.value.row) == ("mixed", 2)


def test_a_column_of_ints_is_a_data_error_with_its_location(tmp_path):
    ds = _jsonl(tmp_path, "ints", ['{"text": 1}', '{"text": 5}'])
    with pytest.raises(DataError, match=r"dataset 'ints', shard .*part-0\.jsonl, row 1: .*"
                                        r"holds a int64 value, not text"):
        list(_fallback(_pipe([ds])))
    d = tmp_path / "pq"
    d.mkdir()
    pq.write_table(pa.table({"text": pa.array([0.5, 2.0])}), d / "part-0.parquet")
    with pytest.raises(DataError, match=r"part-0\.parquet, row 1: .*holds a double value"):
        list(_fallback(_pipe([Dataset.from_path("pq", str(d))])))


def test_null_is_told_apart_from_missing(tmp_path):
    nulls = _jsonl(tmp_path, "nulls", ['{"text": "a"}', '{"text": null}'])
    with pytest.raises(KeyError, match=r"dataset 'nulls', shard .*, row 2: tokenize: field "
                                       r"'text' is null \(sample \(0, 0, 1\)"):
        list(_fallback(_pipe([nulls])))
    absent = _jsonl(tmp_path, "absent", ['{"text": "a"}', '{"body": "b"}', '{"text": "c"}'])
    with pytest.raises(DataError, match=r"row 2: tokenize: field 'text' is missing"):
        list(_fallback(_pipe([absent])))
    both = _jsonl(tmp_path, "both", ['{"text": null}', '{"body": "b"}'])  # objects, not columns
    with pytest.raises(DataError, match=r"row 1: tokenize: field 'text' is null.*1 more bad"):
        list(_fallback(_pipe([both])))
    nested = Dataset.from_dict("nested", {0: [{"m": {"t": "a"}}, {"m": {"t": None}}, {"m": None}]})
    with pytest.raises(DataError, match=r"row 2: tokenize: field 'm.t' is null"):
        list(_pipe([nested]).tokenize(tokenizer_id="__fallback__", field="m.t"))
    # missing_field="empty" reads both as empty text
    rows = list(_fallback(_pipe([both]), missing_field="empty"))
    assert [r.payload["input_ids"] for r in rows] == [[1, 2], [1, 2]]


def test_non_utf8_bytes_name_their_row(tmp_path):
    d = tmp_path / "bin"
    d.mkdir()
    pq.write_table(pa.table({"text": pa.array([b"ok", b"\xff\xfe", b"fine"])}), d / "p.parquet")
    ds = Dataset.from_path("bin", str(d))
    with pytest.raises(DataError, match=r"p\.parquet, row 2: .*not UTF-8"):
        list(_fallback(_pipe([ds])))
    rows = list(_fallback(_pipe([ds]), on_bad_record="skip"))
    assert sorted(len(r.payload["input_ids"]) for r in rows) == [4, 6]


def test_skip_drops_bad_records_and_counts_them(tmp_path):
    good = [json.dumps({"text": f"t{i}"}) for i in range(20)]
    lines = good[:5] + ['{"text": 7}', '{"text": null}'] + good[5:] + ['{"body": "x"}']
    ds = _jsonl(tmp_path, "web", lines)
    p = _fallback(_pipe([ds]), on_bad_record="skip", preserve_upstream_payload=True)
    with pytest.warns(RuntimeWarning, match="bad_record"):
        rows = list(p)
    assert sorted(r.payload["text"] for r in rows) == sorted(f"t{i}" for i in range(20))
    assert _losses(p) == {"web": {"bad_record": {"records": 3, "tokens": 0,
                                                 "operators": ["tokenize"]}}}
    with pytest.raises(ValueError, match="on_bad_record"):
        _fallback(_pipe([ds]), on_bad_record="drop")


def test_bad_record_error_crosses_from_a_worker_process(tmp_path):
    gz = tmp_path / "books"
    gz.mkdir()
    with gzip.open(gz / "b-0.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps({"text": t}) for t in ["a", "b", "c"]) + "\n")
        f.write('{"text": 3.5}\n')
    ds = Dataset.from_path("books", str(gz))
    with pytest.raises(DataError, match=r"dataset 'books', shard .*b-0\.jsonl\.gz, row 4: "
                                        r"tokenize: field 'text' holds a float value"):
        list(_fallback(_pipe([ds]).options(num_workers=1)))


def test_data_changing_settings_are_in_the_fingerprint(tokenizer_path):
    def fp(**kw):
        return fingerprint(_pipe([_mem()]).tokenize(tokenizer=tokenizer_path, field="text",
                                                     **kw))["operators"][0]

    base = fp()
    assert (base["bos_id"], base["eos_id"], base["pad_id"]) == (1, 2, 0)
    for kw in ({"on_bad_record": "skip"}, {"padding": "max_length", "max_length": 9},
               {"special_tokens": "eos"}, {"pad_token_id": 5}):
        assert fp(**kw) != base, kw
    assert fp(padding=True) != base and fp(padding="longest") == fp(padding=True)


def test_token_calibration_leaves_padding_out(tmp_path):
    from zephon.work import TokenEstimation

    synthetic.write_dataset(tmp_path, "a", 300, n_shards=2, seed=1, mean_words=20)
    synthetic.write_dataset(tmp_path, "b", 300, n_shards=2, seed=2, mean_words=5)

    def ratios(**kw):
        ds = [Dataset.from_path(n, str(tmp_path / n)) for n in "ab"]
        ws = StaticMixtureWorkSource(ds, {"a": 0.5, "b": 0.5}, chunk_size=64, seed=1,
                                     token_estimation=TokenEstimation(calibration_samples=64))
        p = _fallback(Pipeline(ws).options(num_workers=0), **kw)
        next(iter(p))
        return ws.token_ratios

    assert ratios(padding="max_length", max_length=512) == ratios()


def test_encoding_goes_in_bounded_calls_with_the_same_result(tokenizer_path):
    """A block's texts are encoded ``encode_docs()`` at a time (one call's ``Encoding`` objects
    for a 1,024-document block took ~60 MB, kept by glibc in every worker); ids are the same
    as one call's."""
    from tokenizers import Tokenizer

    from zephon.tokens import tokenizer_source as ts

    real = Tokenizer.from_file(tokenizer_path)
    calls = []

    class Counting:
        def encode_batch(self, texts, add_special_tokens=False):
            calls.append(len(texts))
            return real.encode_batch(texts, add_special_tokens=add_special_tokens)

    step = ts.encode_docs()
    texts = synthetic.documents(3 * step + 5, seed=3, mean_words=20)
    tok = ts.LoadedTokenizer(ts.TokenizerSpec("json"), backend=Counting())
    offsets, values = tok.encode(texts)
    assert calls == [step] * 3 + [5]
    whole = real.encode_batch(texts, add_special_tokens=False)
    assert values.tolist() == [i for e in whole for i in e.ids]
    assert np.diff(offsets).tolist() == [len(e.ids) for e in whole]
    assert tok.encode([])[0].tolist() == [0] and len(tok.encode([])[1]) == 0


def test_a_call_gives_each_tokenizer_thread_its_share(monkeypatch):
    """The tokenizer's pool splits a call's documents over its threads: a call carries
    ``ENCODE_DOCS_PER_THREAD`` per thread (64 at least), and 64 when the pool is off."""
    from zephon.tokens import tokenizer_source as ts

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    monkeypatch.setenv("RAYON_NUM_THREADS", "16")
    assert ts.encode_docs() == 16 * ts.ENCODE_DOCS_PER_THREAD
    monkeypatch.setenv("RAYON_NUM_THREADS", "2")
    assert ts.encode_docs() == ts.ENCODE_DOCS
    monkeypatch.setenv("RAYON_NUM_THREADS", "16")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    assert ts.encode_docs() == ts.ENCODE_DOCS
