"""Packing keeps long documents by default; truncate/drop are counted; split pieces resume exactly.

The fallback tokenizer is byte-level (one token per byte, ids 4..259, BOS 1, EOS 2), so the
tokens of every document are known without running the pipeline.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from zephon import Pipeline
from zephon.io import Dataset, InMemoryShard
from zephon.work import StaticMixtureWorkSource

L = 16
TOK = {"tokenizer_id": "__fallback__", "field": "text", "special_tokens": "bos_eos",
       "bos_token_id": 1, "eos_token_id": 2}


def _texts(n: int, seed: int, long_every: int = 3) -> list[str]:
    """Documents of 1..12 bytes, every ``long_every``-th one 2..5 rows long."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        size = int(rng.integers(2 * L, 5 * L)) if i % long_every == 0 else int(rng.integers(1, 12))
        out.append("".join(chr(97 + int(c)) for c in rng.integers(0, 26, size)))
    return out


def _dataset(name: str, texts: list[str], shards: int = 2) -> Dataset:
    parts = np.array_split(np.arange(len(texts)), shards)
    return Dataset.from_dict(name, {i: InMemoryShard([{"text": texts[j]} for j in p])
                                    for i, p in enumerate(parts)})


def _pipeline(texts: list[str], workers: int = 0, lanes: int = 1, **kw) -> Pipeline:
    ws = StaticMixtureWorkSource([_dataset("d", texts)], {"d": 1.0}, chunk_size=12, seed=3)
    return (Pipeline(ws).options(num_workers=workers, canonical_replicas=lanes,
                                 micro_batch_size=7)
            .tokenize(**TOK))


def _content(batches) -> tuple[int, int, int]:
    """(content tokens, BOS tokens, rows) delivered: padding excluded."""
    tokens = bos = rows = 0
    for b in batches:
        ids = np.asarray(b.block.payload.column("input_ids").to_pylist())
        pad = b.block.meta["padding_length"]
        for row, p in zip(ids, pad):
            content = row[: len(row) - int(p)]
            tokens += len(content)
            bos += int((content == 1).sum())
            rows += 1
    return tokens, bos, rows


@pytest.mark.parametrize("algorithm", ["first_fit", "best_fit"])
def test_long_documents_are_kept_by_default(algorithm):
    texts = _texts(40, seed=1)
    p = (_pipeline(texts).pack_flat(max_length=L, algorithm=algorithm, num_bins=3, pad_token_id=0)
         .batch(microbatch_size=2, drop_last=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # nothing is counted as lost
        batches = list(p)
    tokens, bos, _ = _content(batches)
    assert tokens == sum(len(t) + 2 for t in texts) and bos == len(texts)
    assert p.metrics_snapshot()["losses"]["records"] == 0


def test_a_corpus_of_only_long_documents_gives_batches():
    texts = _texts(12, seed=2, long_every=1)
    p = (_pipeline(texts).pack_flat(max_length=L, algorithm="best_fit", num_bins=4, pad_token_id=0)
         .batch(microbatch_size=2))
    batches = list(p)
    assert len(batches) >= sum(len(t) + 2 for t in texts) // (2 * L) - 1 > 0


@pytest.mark.parametrize("policy, kw, reason", [
    ("truncate", {"oversized": "truncate"}, "truncated"),
    ("drop", {"oversized": "drop"}, "oversized"),
    ("drop", {"drop_oversized": True}, "oversized"),        # the old keyword still works
])
def test_truncate_and_drop_are_counted(policy, kw, reason):
    texts = _texts(30, seed=3)
    p = (_pipeline(texts).pack_flat(max_length=L, algorithm="best_fit", num_bins=3, pad_token_id=0,
                                    **kw)
         .batch(microbatch_size=2, drop_last=False))
    with pytest.warns(RuntimeWarning, match=f"pack_flat counted .*'{reason}'"):
        batches = list(p)
    sizes = [len(t) + 2 for t in texts]
    over = [n for n in sizes if n > L]
    tokens, bos, _ = _content(batches)
    losses = p.metrics_snapshot()["losses"]["by_dataset"]["d"][reason]
    assert losses["operators"] == ["pack_flat"] and losses["records"] == len(over)
    if policy == "truncate":
        assert tokens == sum(min(n, L) for n in sizes) and bos == len(texts)
        assert losses["tokens"] == sum(n - L for n in over)
    else:
        assert tokens == sum(n for n in sizes if n <= L) and bos == len(texts) - len(over)
        assert losses["tokens"] == sum(over)


def test_drop_oversized_false_splits_and_contradictions_are_refused():
    texts = _texts(20, seed=4)
    p = (_pipeline(texts).pack_flat(max_length=L, algorithm="first_fit", num_bins=2,
                                    pad_token_id=0, drop_oversized=False)
         .batch(microbatch_size=1))
    assert _content(p)[0] == sum(len(t) + 2 for t in texts)
    with pytest.raises(ValueError, match="contradicts"):
        _pipeline(texts).pack_flat(max_length=L, algorithm="best_fit", num_bins=2,
                                   pad_token_id=0, drop_oversized=True, oversized="split")


def test_wrap_delivers_the_end_of_the_stream_padded():
    texts = _texts(25, seed=5)
    p = _pipeline(texts).pack_flat(max_length=L, algorithm="wrap").batch(microbatch_size=1)
    batches = list(p)
    tokens, _, rows = _content(batches)
    assert tokens == sum(len(t) + 2 for t in texts)
    pads = [int(b.block.meta["padding_length"][0]) for b in batches]
    assert pads[:-1] == [0] * (rows - 1) and pads[-1] == rows * L - tokens


@pytest.mark.parametrize("algorithm", ["first_fit", "wrap"])
def test_pack_sequences_pieces_of_a_long_document_join_back(algorithm):
    texts = [t for t in _texts(12, seed=6)]
    kw = {"num_bins": 2} if algorithm == "first_fit" else {}
    p = _pipeline(texts).pack_sequences(max_length=L, algorithm=algorithm, **kw)
    got = [tok for r in p for seg in r.payload["packed_samples"] for tok in seg["input_ids"]]
    want = [tok for t in texts for tok in [1, *(4 + np.frombuffer(t.encode(), np.uint8)), 2]]
    assert sorted(got) == sorted(int(x) for x in want)
    assert all(len(seg["input_ids"]) <= L for r in p for seg in r.payload["packed_samples"])


@pytest.mark.parametrize("algorithm", ["wrap", "best_fit_wrap"])
def test_max_sequences_per_bin_caps_wrap_algorithms(algorithm):
    texts = _texts(30, seed=7, long_every=5)
    kw = {"candidate_pool_size": 4} if algorithm == "best_fit_wrap" else {}
    seqs = list(_pipeline(texts).pack_sequences(max_length=L, algorithm=algorithm,
                                                max_sequences_per_bin=2, **kw))
    assert all(len(r.payload["packed_samples"]) <= 2 for r in seqs)
    assert sum(len(s["input_ids"]) for r in seqs for s in r.payload["packed_samples"]) == \
        sum(len(t) + 2 for t in texts)
    with pytest.raises(ValueError, match="pad_token_id"):
        _pipeline(texts).pack_flat(max_length=L, algorithm="wrap", max_sequences_per_bin=2)
    flat = (_pipeline(texts).pack_flat(max_length=L, algorithm=algorithm, pad_token_id=0,
                                       max_sequences_per_bin=2, **kw)
            .batch(microbatch_size=3, drop_last=False))
    batches = list(flat)
    assert _content(batches)[0] == sum(len(t) + 2 for t in texts)
    for b in batches:
        assert (b.block.meta["comp_samples"].sum(axis=1) <= 2).all()


# -- exact resume while a document's pieces are spread over bins and batches -------------------

RESUME = {
    "best_fit": dict(algorithm="best_fit", num_bins=3, pad_token_id=0),
    "first_fit+truncate": dict(algorithm="first_fit", num_bins=2, pad_token_id=0,
                               oversized="truncate"),
    "wrap": dict(algorithm="wrap"),
    "best_fit_wrap": dict(algorithm="best_fit_wrap", candidate_pool_size=3, pad_token_id=0),
}


def _resumable(name: str, workers: int) -> Pipeline:
    texts = _texts(36, seed=8)
    return (_pipeline(texts, workers=workers, lanes=2).shuffle(buffer_size=5, seed=2)
            .pack_flat(max_length=L, **RESUME[name]).batch(microbatch_size=2, drop_last=False))


def _sig(b) -> str:
    return json.dumps([b.ids, b.block.lineage.tolist(), b.block.payload_list()], default=str)


def _resume_from(name: str, workers: int, cut: int) -> list[str]:
    p = _resumable(name, workers)
    it = iter(p)
    head = [_sig(next(it)) for _ in range(cut)]
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    return head + [_sig(b) for b in _resumable(name, workers).restore(state)]


@pytest.mark.parametrize("name", sorted(RESUME))
def test_resume_with_split_pieces_is_exact_at_every_batch(name):
    batches = list(_resumable(name, 0))
    full = [_sig(b) for b in batches]
    # a packed row's lineage ends with the token start of its first piece: rows that begin
    # inside a document (past its first max_length tokens) exist, so pieces are in flight
    starts = np.concatenate([b.block.lineage[:, -1] for b in batches])
    assert (starts >= L).any() or name == "first_fit+truncate"
    for cut in range(len(full) + 1):
        assert _resume_from(name, 0, cut) == full, cut


@pytest.mark.slow
def test_resume_with_split_pieces_is_exact_with_two_workers():
    batches = list(_resumable("best_fit", 0))
    full = [_sig(b) for b in batches]
    assert (np.concatenate([b.block.lineage[:, -1] for b in batches]) >= L).any()
    assert [_sig(b) for b in _resumable("best_fit", 2)] == full
    for cut in (1, len(full) // 2, len(full) - 1):
        assert _resume_from("best_fit", 2, cut) == full, cut
