"""tokenize -> shuffle -> ensure_mixture -> pack -> batch -> to_training, end to end."""

from __future__ import annotations

import numpy as np
import pytest

from zephon import Pipeline, synthetic
from zephon.io import Dataset, InMemoryShard
from zephon.work import MixtureSpec, StaticMixtureWorkSource, TokenEstimation


def _mem(name, texts, shards=2):
    parts = np.array_split(np.arange(len(texts)), shards)
    return Dataset.from_dict(name, {i: InMemoryShard([{"text": texts[j], "k": int(j)} for j in p])
                                    for i, p in enumerate(parts)})


def _one(texts, **kw):
    ws = StaticMixtureWorkSource([_mem("d", texts)], {"d": 1.0}, chunk_size=16, seed=1)
    return Pipeline(ws).options(num_workers=0, **kw)


def _records(p):
    return [r for r in p]


def test_tokenize_brackets_and_replaces_payload(tokenizer_path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_path)
    texts = synthetic.documents(20, seed=4, mean_words=12)
    recs = _records(_one(texts).tokenize(tokenizer=tokenizer_path, field="text"))
    for r in recs:
        ids = r.payload["input_ids"]
        text = texts[r.payload.get("k", -1)] if "k" in r.payload else None
        assert set(r.payload) == {"input_ids", "attention_mask"} and text is None
        assert ids[0] == 1 and ids[-1] == 2 and r.payload["attention_mask"] == [1] * len(ids)
    by_k = {r.meta.sample_id: r for r in recs}
    assert len(by_k) == 20
    keep = _records(_one(texts).tokenize(tokenizer=tokenizer_path, field="text",
                                         preserve_upstream_payload=True))
    for r in keep:
        assert r.payload["input_ids"][1:-1] == tok.encode(texts[r.payload["k"]],
                                                          add_special_tokens=False).ids


def test_split_long_samples_pieces_concatenate_back(tokenizer_path):
    texts = synthetic.documents(30, seed=5, mean_words=40)
    whole = {r.meta.sample_id: r.payload["input_ids"]
             for r in _records(_one(texts).tokenize(tokenizer=tokenizer_path, field="text"))}
    pieces: dict = {}
    for r in _records(_one(texts).tokenize(tokenizer=tokenizer_path, field="text",
                                           max_length=16, split_long_samples=True)):
        assert len(r.payload["input_ids"]) <= 16
        pieces.setdefault(r.meta.sample_id, []).append((r.meta.lineage, r.payload["input_ids"]))
    for sid, parts in pieces.items():
        lineages = [lin for lin, _ in parts]
        assert lineages == [(i,) for i in range(len(parts))]
        assert sum((ids for _, ids in parts), []) == whole[sid]
        assert len(parts) == -(-len(whole[sid]) // 16)


def test_truncation_caps_at_max_length_and_keeps_specials(tokenizer_path):
    texts = synthetic.documents(10, seed=6, mean_words=60)
    for r in _records(_one(texts).tokenize(tokenizer=tokenizer_path, field="text",
                                           max_length=9, truncation=True)):
        ids = r.payload["input_ids"]
        assert len(ids) <= 9 and ids[0] == 1 and ids[-1] == 2


def test_missing_field_names_the_sample():
    ds = Dataset.from_dict("d", {0: InMemoryShard([{"text": "a"}, {"body": "b"}])})
    ws = StaticMixtureWorkSource([ds], {"d": 1}, chunk_size=2, seed=0, shuffle_shards=False)
    p = Pipeline(ws).options(num_workers=0).tokenize(tokenizer_id="__fallback__", field="text")
    with pytest.raises(KeyError, match=r"\(0, 0, 1\)"):
        list(p)
    p2 = Pipeline(ws).options(num_workers=0).tokenize(tokenizer_id="__fallback__", field="text",
                                                      missing_field="empty")
    assert sorted(len(r.payload["input_ids"]) for r in p2) == [2, 3]


def test_bad_tokenize_options_are_refused():
    p = _one(["x"])
    with pytest.raises(ValueError):
        p.tokenize(tokenizer_id="__fallback__", field="text", truncation=True)
    with pytest.raises(ValueError):
        p.tokenize(tokenizer_id="__fallback__", field="text", max_length=4, truncation=True,
                   split_long_samples=True)
    with pytest.raises(ValueError):
        p.tokenize(tokenizer_id="__fallback__", field="text", special_tokens="none",
                   bos_token_id=5)
    with pytest.raises(FileNotFoundError):
        p.tokenize(tokenizer_id="nobody/nothing-here", field="text")


def _lopsided(root):
    # "long" documents are 4x longer than "short" ones
    synthetic.write_dataset(root, "long", 1500, n_shards=3, seed=1, mean_words=160)
    synthetic.write_dataset(root, "short", 6000, n_shards=3, seed=2, mean_words=40)
    return [Dataset.from_path("long", str(root / "long")),
            Dataset.from_path("short", str(root / "short"))]


def test_token_aware_mixture_delivers_tokens_in_ratio(tmp_path, tokenizer_path):
    ds = _lopsided(tmp_path)
    ws = StaticMixtureWorkSource(ds, {"long": 0.5, "short": 0.5}, chunk_size=512, seed=3,
                                 token_estimation=TokenEstimation(calibration_samples=512))
    p = (Pipeline(ws).options(num_workers=0).tokenize(tokenizer=tokenizer_path, field="text")
         .batch(microbatch_size=64))
    tokens = np.zeros(2)
    for i, b in enumerate(p):
        out = b.to_training(dtype="numpy", tokens_field="input_ids")
        lengths = (np.asarray(b.block.payload.column("input_ids").to_pylist(), dtype=object))
        for d, ids in zip(b.block.meta["dataset_id"], lengths):
            tokens[d] += len(ids)
        assert out["input_ids"].shape[0] == 64
        if i == 60:
            break
    share = tokens[0] / tokens.sum()
    assert abs(share - 0.5) < 0.03, share
    # the sample counts are deliberately skewed to get there: priming measured both datasets
    measured = p.metrics_snapshot()["priming"]["datasets"]
    assert {n: m["source"] for n, m in measured.items()} == {"long": "measured",
                                                             "short": "measured"}
    assert measured["long"]["tokens_per_record"] > 3 * measured["short"]["tokens_per_record"]


def test_ensure_mixture_holds_a_target_the_source_does_not(tmp_path):
    synthetic.write_dataset(tmp_path, "a", 6000, n_shards=2, seed=1, mean_words=5)
    synthetic.write_dataset(tmp_path, "b", 4000, n_shards=2, seed=2, mean_words=5)
    ds = [Dataset.from_path("a", str(tmp_path / "a")), Dataset.from_path("b", str(tmp_path / "b"))]
    ws = StaticMixtureWorkSource(ds, {"a": 0.6, "b": 0.4}, chunk_size=500, seed=1)
    p = (Pipeline(ws).options(num_workers=0)
         .ensure_mixture(mixture={"a": 0.5, "b": 0.5}, weight_by="samples", max_buffer_size=1000))
    comps = [r.meta.sample_id[0] for _, r in zip(range(4000), p)]
    share = comps.count(0) / len(comps)
    assert abs(share - 0.5) < 0.05, share


def test_pack_flat_best_fit_to_training(tokenizer_path):
    texts = synthetic.documents(200, seed=7, mean_words=20)
    p = (_one(texts).tokenize(tokenizer=tokenizer_path, field="text")
         .pack_flat(max_length=65, algorithm="best_fit", num_bins=8, pad_token_id=0)
         .batch(microbatch_size=4, drop_last=False))
    seen_docs = 0
    for b in p:
        out = b.to_training(return_labels=True, return_cu_seqlens=True, return_loss_mask=True,
                            dtype="numpy")
        B = len(b)
        assert out["input_ids"].shape == (B, 64) and out["labels"].shape == (B, 64)
        pad = b.block.meta["padding_length"]
        pos = np.asarray(b.block.payload.column("positions").to_pylist())
        for i in range(B):
            row = np.asarray(b.block.payload.column("input_ids")[i].as_py())
            content = 65 - pad[i]
            assert (row[content:] == 0).all()
            assert (out["labels"][i, content - 1:] == -100).all()
            # within a document a label is the next token; where the next token opens
            # another document (position 0), it is masked
            inside = pos[i, 1:content] != 0
            assert (out["labels"][i, :content - 1][inside] == row[1:content][inside]).all()
            assert (out["labels"][i, :content - 1][~inside] == -100).all()
            seen_docs += int((row[:content] == 1).sum())
        assert out["loss_mask"].dtype == np.float32
    lengths = [len(r.payload["input_ids"])
               for r in _one(texts).tokenize(tokenizer=tokenizer_path, field="text")]
    # best_fit keeps every document: the oversized ones in max_length pieces (BOS in the first)
    assert seen_docs == len(texts) and max(lengths) > 65


def test_pack_flat_wrap_rows_are_full_and_positions_restart(tokenizer_path):
    texts = synthetic.documents(100, seed=8, mean_words=15)
    p = (_one(texts).tokenize(tokenizer=tokenizer_path, field="text")
         .pack_flat(max_length=33, algorithm="wrap").batch(microbatch_size=2, drop_last=False))
    batches = list(p)
    for b in batches:
        out = b.to_training(dtype="numpy")
        assert out["input_ids"].shape[1] == 33
        pos = out["positions"]
        starts = out["input_ids"] == 1
        assert (pos[starts] == 0).all()
    pads = np.concatenate([b.block.meta["padding_length"] for b in batches])
    tokens = sum(len(r.payload["input_ids"])
                 for r in _one(texts).tokenize(tokenizer=tokenizer_path, field="text"))
    # every row is full but the last, which carries the end of the stream, padded: no token
    # is left behind
    assert (pads[:-1] == 0).all() and 0 < pads[-1] < 33
    assert len(pads) * 33 - pads.sum() == tokens


def test_pack_sequences_keeps_whole_payloads(tokenizer_path):
    texts = synthetic.documents(40, seed=9, mean_words=10)
    p = (_one(texts).tokenize(tokenizer=tokenizer_path, field="text", preserve_upstream_payload=True)
         .pack_sequences(max_length=80, algorithm="first_fit", num_bins=4))
    total = 0
    for r in p:
        segs = r.payload["packed_samples"]
        assert sum(len(s["input_ids"]) for s in segs) <= 80
        total += len(segs)
    assert total == 40


def test_to_training_options_on_a_packed_batch(tokenizer_path):
    texts = synthetic.documents(60, seed=10, mean_words=12)
    p = (_one(texts).tokenize(tokenizer=tokenizer_path, field="text")
         .pack_flat(max_length=49, algorithm="first_fit", num_bins=2, pad_token_id=0)
         .batch(microbatch_size=2))
    b = next(iter(p))
    flat = b.to_training(return_labels=True, flatten=True, return_cu_seqlens=True,
                         return_num_valid_tokens=True, dtype=None,
                         rename_fields={"input_ids": "tokens"}, exclude_fields=["texts"])
    assert len(flat["tokens"]) == 2 * 48 and isinstance(flat["tokens"], list)
    assert flat["cu_seqlens"][-1] == 2 * 48 and "texts" not in flat
    assert flat["num_valid_tokens"] == sum(1 for x in flat["labels"] if x != -100)
    torch = pytest.importorskip("torch")
    t = b.to_training(return_labels=True)
    assert t["input_ids"].dtype == torch.int64 and t["input_ids"].is_contiguous()
    with pytest.raises(ValueError):
        b.to_training(return_loss_mask=True)
    with pytest.raises(TypeError):
        b.to_training(exclude_fields="texts")


def test_minimal_shape_from_the_spec():
    ds = Dataset.from_dict("demo", {0: InMemoryShard([{"text": "hello"}, {"text": "big"},
                                                      {"text": "world"}])})
    ws = StaticMixtureWorkSource(datasets=[ds], mixture=MixtureSpec({"demo": 1.0}), chunk_size=1,
                                 seed=42)
    p = (Pipeline(ws).decode_text()
         .tokenize(tokenizer_id="__fallback__", field="text", preserve_upstream_payload=True)
         .batch(microbatch_size=2, drop_last=False))
    batches = list(p)
    assert [len(b) for b in batches] == [2, 1]
    texts = [t for b in batches for t in b.to_training(dtype=None)["texts"]]
    assert sorted(texts) == ["big", "hello", "world"]


def test_cross_document_labels_are_masked_where_cu_seqlens_cut(tokenizer_path):
    texts = synthetic.documents(80, seed=11, mean_words=8)
    p = (_one(texts).tokenize(tokenizer=tokenizer_path, field="text", special_tokens="bos_eos",
                              bos_token_id=1, eos_token_id=2)
         .pack_flat(max_length=41, algorithm="wrap").batch(microbatch_size=4, drop_last=False))
    boundaries = 0
    for b in p:
        out = b.to_training(return_labels=True, return_cu_seqlens=True, flatten=True,
                            dtype="numpy")
        kept = b.to_training(return_labels=True, boundary_mask_loss=False, flatten=True,
                             dtype="numpy")
        ids, labels = out["input_ids"], out["labels"]
        W = 40
        pos = np.asarray(b.block.payload.column("positions").to_pylist())
        cut = (pos[:, 1:] == 0).reshape(-1)              # the next token opens a document
        pad = np.concatenate([np.arange(W) >= W - int(n) for n in b.block.meta["padding_length"]])
        # cu_seqlens cuts where the labels are masked: at the last position of each document
        starts = out["cu_seqlens"][:-1]
        assert cut[starts[starts % W != 0] - 1].all()
        # the end of a document never predicts the start of the next one; everything else does
        assert (labels[cut] == -100).all() and (ids[cut & ~pad] == 2).all()
        assert (labels[~cut & ~pad] == kept["labels"][~cut & ~pad]).all()
        assert (kept["labels"][cut & ~pad] == 1).all()   # kept: EOS -> BOS of the next document
        boundaries += int((cut & ~pad).sum())
    assert boundaries > 30


def test_packed_rows_without_positions_refuse_to_mislabel(tokenizer_path):
    texts = synthetic.documents(20, seed=12, mean_words=6)
    p = (_one(texts).tokenize(tokenizer=tokenizer_path, field="text")
         .pack_flat(max_length=64, algorithm="first_fit", num_bins=2, pad_token_id=0,
                    emit_positions=False).batch(microbatch_size=2))
    b = next(iter(p))
    with pytest.raises(ValueError, match="boundary_mask_loss=False"):
        b.to_training(return_labels=True)
    assert b.to_training(return_labels=True, boundary_mask_loss=False)["labels"].shape == (2, 63)
