"""Packed supervised fine-tuning: the loss mask travels through shuffle, ensure_mixture and
packing into labels; every assistant token is supervised exactly once per pass, nothing else
is, no label crosses conversations; inline, with workers, and across a checkpoint."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")

from tests.chat_support import conversations, write_chat_dataset, write_tokenizer_dir  # noqa: E402
from zephon import Pipeline  # noqa: E402
from zephon.io import Dataset  # noqa: E402
from zephon.work import StaticMixtureWorkSource, TokenEstimation  # noqa: E402

RECORDS = conversations(240, seed=11)
PAD = 0  # <|endoftext|>


@pytest.fixture(scope="module")
def chatml(tmp_path_factory):
    return write_tokenizer_dir(tmp_path_factory.mktemp("chatml") / "tok")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    return {"a": write_chat_dataset(root, "a", RECORDS[:160], shards=4),
            "b": write_chat_dataset(root, "b", RECORDS[160:], shards=2, fmt="parquet")}


@pytest.fixture(scope="module")
def tokenized(chatml, data):
    """Each conversation's (ids, mask) as tokenize_chat alone gives them, by record."""
    ws = StaticMixtureWorkSource([Dataset.from_path("a", data["a"])], {"a": 1.0}, seed=0)
    out = {r.payload["k"]: (tuple(r.payload["input_ids"]), tuple(r.payload["loss_mask"]))
           for r in Pipeline(ws).options(num_workers=0).tokenize_chat(
               chatml, preserve_upstream_payload=True)}
    assert len(out) == 160
    return out


def _sft(chatml, data, names=("a",), workers=0, algorithm="first_fit", **opts):
    datasets = [Dataset.from_path(n, data[n]) for n in names]
    weights = {"a": 2.0, "b": 1.0}
    ws = StaticMixtureWorkSource(datasets, {n: weights[n] for n in names}, chunk_size=32, seed=5)
    p = (Pipeline(ws).options(num_workers=workers, **opts).tokenize_chat(chatml)
         .shuffle(buffer_size=48, seed=2).ensure_mixture(max_buffer_size=40))
    kw = {"num_bins": 4} if algorithm == "first_fit" else {}
    return p.pack_flat(max_length=2048, algorithm=algorithm, pad_token_id=PAD, **kw).batch(
        microbatch_size=2)


def _training(batch):
    return batch.to_training(return_labels=True, return_cu_seqlens=True, dtype="numpy")


def test_every_assistant_token_is_supervised_exactly_once_per_pass(chatml, data, tokenized):
    """Each packed segment is a whole conversation we tokenized, each seen once; its labels
    are its next tokens where the mask is on and ignore_index everywhere else, its last
    position included (the next token is another conversation's, or padding)."""
    seen: Counter = Counter()
    supervised = 0
    masks = {ids: mask for ids, mask in tokenized.values()}
    for batch in _sft(chatml, data):
        out = _training(batch)
        payload = batch.block.payload
        rows = np.asarray(payload.column("input_ids").to_pylist())
        positions = np.asarray(payload.column("positions").to_pylist())
        labels, S = out["labels"], rows.shape[1]
        for r in range(len(rows)):
            real = S - int(batch.block.meta["padding_length"][r])
            starts = np.flatnonzero(positions[r, :real] == 0)
            # cu_seqlens (input-aligned) open a document wherever a conversation starts
            assert set(starts[starts < S - 1].tolist()) <= set(out["cu_seqlens"][r].tolist())
            for a, b in zip(starts, np.append(starts[1:], real)):
                ids = tuple(rows[r, a:b].tolist())
                assert ids in masks, "a packed segment is not a whole conversation"
                seen[ids] += 1
                mask = np.asarray(masks[ids])
                want = np.where(mask[1:] == 1, np.asarray(ids[1:]), -100)
                assert labels[r, a:b - 1].tolist() == want.tolist()
                if b < S:
                    assert labels[r, b - 1] == -100  # never across conversations
                supervised += int((labels[r, a:b - 1] != -100).sum())
            assert (labels[r, max(real - 1, 0):] == -100).all()  # nor into the padding
    assert seen == Counter(ids for ids, _ in tokenized.values())
    assert all(m[0] == 0 for m in masks.values())  # a conversation never opens on the answer
    assert supervised == sum(sum(m) for _, m in tokenized.values()) > 0


@pytest.mark.slow
def test_workers_and_restores_give_the_same_batches(chatml, data):
    def sig(batch):
        out = _training(batch)
        return (tuple(batch.ids), out["input_ids"].tobytes(), out["labels"].tobytes(),
                out["cu_seqlens"].tobytes())

    names = ("a", "b")
    full = [sig(b) for b in _sft(chatml, data, names)]
    assert len(full) > 10
    assert [sig(b) for b in _sft(chatml, data, names, workers=2)] == full
    for workers, cut in ((0, 3), (2, len(full) // 2)):
        p = _sft(chatml, data, names, workers=workers)
        it = iter(p)
        head = [sig(next(it)) for _ in range(cut)]
        state = json.loads(json.dumps(p.checkpoint()))
        p.close()
        q = _sft(chatml, data, names, workers=workers).restore(state)
        assert head + [sig(b) for b in q] == full, f"resume at {cut} with {workers} workers"


@pytest.mark.parametrize("algorithm", ["wrap", "best_fit_wrap"])
@pytest.mark.parametrize("flat", [True, False], ids=["pack_flat", "pack_sequences"])
def test_cut_conversations_keep_their_mask(chatml, data, algorithm, flat):
    """Packers that cut records carry each piece's mask with its tokens: every segment (named
    by the row's recipe: record, first token, length) holds its conversation's ids and mask
    over that range."""
    from zephon.state.refs import RECIPE_COLUMN

    ws = StaticMixtureWorkSource([Dataset.from_path("a", data["a"])], {"a": 1.0},
                                 chunk_size=32, seed=5)
    whole = {(r.meta.chunk_id, r.meta.chunk_offset): r.payload for r in
             Pipeline(ws).options(num_workers=0).tokenize_chat(chatml)}
    p = Pipeline(ws).options(num_workers=0).tokenize_chat(chatml)
    kw = {"pad_token_id": PAD} if algorithm == "best_fit_wrap" else {}
    p = (p.pack_flat if flat else p.pack_sequences)(max_length=200, algorithm=algorithm, **kw)
    cut = 0
    for batch in p.batch(microbatch_size=1, drop_last=False):
        table = batch.block.payload
        recipe = table.column(RECIPE_COLUMN).to_pylist()[0]
        pieces = ([None] * len(recipe) if flat else table.column("packed_samples").to_pylist()[0])
        at = 0
        for seg, piece in zip(recipe, pieces):
            src = whole[(seg["chunk_id"], seg["chunk_offset"])]
            a, n = seg["start"], seg["len"]
            cut += n < len(src["input_ids"])
            if flat:
                piece = {k: table.column(k).to_pylist()[0][at:at + n]
                         for k in ("input_ids", "loss_mask")}
                at += n
            assert piece["input_ids"] == src["input_ids"][a:a + n]
            assert piece["loss_mask"] == src["loss_mask"][a:a + n]
    assert cut > 0


def test_token_aware_mixtures_count_chat_tokens_scaffolding_included(chatml, data):
    """Priming measures tokens through tokenize_chat (JSONL: per stored byte; Parquet: by the
    bytes of the message texts) and lands on the conversations' mean length, template
    scaffolding included."""
    from zephon.engine.priming.token_ratios import prime

    datasets = [Dataset.from_path("a", data["a"]), Dataset.from_path("b", data["b"])]
    te = TokenEstimation(precision=0.05, confidence=0.95)
    ws = StaticMixtureWorkSource(datasets, {"a": 0.5, "b": 0.5}, seed=1, token_estimation=te)
    p = Pipeline(ws).options(num_workers=0).tokenize_chat(chatml).ensure_mixture()
    _, report = prime(p._spec())  # priming works on a copy of the work source
    for name, ds in zip("ab", datasets):
        alone = StaticMixtureWorkSource([ds], {name: 1.0}, seed=0)
        lengths = [len(r.payload["input_ids"]) for r in
                   Pipeline(alone).options(num_workers=0).tokenize_chat(chatml)]
        got = report["datasets"][name]["tokens_per_record"]
        assert abs(got - np.mean(lengths)) / np.mean(lengths) < 0.05, name
