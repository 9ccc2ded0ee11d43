"""The pretraining guide's pipeline (docs/guides/pretraining.md), used as a new user would,
loses nothing without a word.

A three-dataset corpus (JSONL, Parquet, gzipped JSONL in one root) where 5% of the documents
are longer than ``max_length`` and some are empty, an EOS-only (GPT-2-style) tokenizer, token
weights, the guide's operators with their defaults, inline and with 2 worker processes. Over a
whole run: the realised token mixture is within 2% of the weights, every record drawn is
delivered or counted as lost, and every label across a document boundary is -100.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephon import Pipeline, synthetic
from zephon.io import Dataset
from zephon.work import StaticMixtureWorkSource, TokenEstimation

MAX_LENGTH = 257
GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "pretraining.md"
WEIGHTS = {"code": 0.3, "web": 0.5, "books": 0.2}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("trust")
    docs = synthetic.documents(2400, seed=11, mean_words=40)
    rng = np.random.default_rng(5)
    long = rng.choice(len(docs), size=len(docs) // 20, replace=False)  # 5% far too long
    for i in long:
        docs[i] = " ".join([docs[i]] * 30)
    for i in range(0, len(docs), 97):
        docs[i] = ""  # empty documents too
    code, web, books = docs[:800], docs[800:2000], docs[2000:]
    (root / "code").mkdir()
    for s in range(2):
        with open(root / "code" / f"part-{s}.jsonl", "w") as f:
            for d in code[s::2]:
                f.write(json.dumps({"text": d}) + "\n")
    (root / "web").mkdir()
    pq.write_table(pa.table({"text": web[:600]}), root / "web" / "a.parquet", row_group_size=128)
    with open(root / "web" / "b.jsonl", "w") as f:  # one root, two formats
        for d in web[600:]:
            f.write(json.dumps({"text": d}) + "\n")
    (root / "books").mkdir()
    with gzip.open(root / "books" / "books.jsonl.gz", "wt") as f:
        for d in books:
            f.write(json.dumps({"text": d}) + "\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs[:600], trainer=trainer)
    tok.save(str(root / "gpt2-style.json"))
    return root


def guide_pipeline(root, workers: int) -> Pipeline:
    ws = StaticMixtureWorkSource(
        datasets=[Dataset.from_path(n, root / n) for n in WEIGHTS],
        mixture=WEIGHTS, seed=42, token_estimation=TokenEstimation())
    return (Pipeline(ws)
            .tokenize(tokenizer=str(root / "gpt2-style.json"), field="text")
            .shuffle(buffer_size=256, seed=1)
            .ensure_mixture()
            .pack_flat(max_length=MAX_LENGTH, algorithm="best_fit", num_bins=16, pad_token_id=0)
            .batch(microbatch_size=8)
            .options(num_workers=workers))


def test_this_is_the_guides_pipeline():
    """The pipeline below is the guide's first example, operator for operator, with its
    defaults: token weights, tokenize -> shuffle -> ensure_mixture -> pack_flat(best_fit) ->
    batch, and no option that drops or cuts anything."""
    code = re.search(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S).group(1)
    assert "token_estimation=TokenEstimation()" in code
    ops = re.findall(r"^\s*\.(\w+)\(", code, flags=re.M)
    assert ops == ["tokenize", "shuffle", "ensure_mixture", "pack_flat", "batch"], ops
    assert 'algorithm="best_fit"' in code
    assert not re.search(r"oversized=|drop_oversized|truncation=|drop_last=|on_bad_record", code)


def drawn_records(ws) -> np.ndarray:
    """Pointers the work source hands out over the run, per dataset."""
    n = np.zeros(len(WEIGHTS), dtype=np.int64)
    chunk = 0
    while (c := ws.lane_chunk(0, 1, chunk)) is not None:
        n += np.bincount(c.dataset_id, minlength=len(WEIGHTS))
        chunk += 1
    return n


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_the_guides_pipeline_delivers_or_counts_every_record(corpus, workers, tmp_path,
                                                              monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))
    p = guide_pipeline(corpus, workers)
    tokens = np.zeros(len(WEIGHTS), dtype=np.int64)
    boundaries = 0
    for batch in p:
        labels = np.asarray(batch.to_training(return_labels=True, dtype=None)["labels"])
        rows = np.asarray(batch.column("input_ids").values).reshape(len(batch), MAX_LENGTH)
        pos = np.asarray(batch.column("positions").values).reshape(len(batch), MAX_LENGTH)
        # a label whose next token starts another document of the row is never trained on
        starts = pos[:, 1:] == 0
        assert (labels[starts] == -100).all()
        boundaries += int(starts.sum())
        # elsewhere the label is the next token, or -100 over padding
        pad = np.asarray(batch.block.meta["padding_length"])
        for r in range(len(batch)):
            real = MAX_LENGTH - int(pad[r])  # tokens before the padding
            keep = ~starts[r, :real - 1]
            assert (labels[r, :real - 1][keep] == rows[r, 1:real][keep]).all()
            assert (labels[r, real - 1:] == -100).all()
        comp = batch.block.meta["comp_tokens"]
        tokens += comp[:, :len(WEIGHTS)].sum(axis=0)
    snap = p.metrics_snapshot()
    p.close()
    assert boundaries > 100
    # every record drawn is delivered (once, however many pieces it was cut into) or counted
    drawn = drawn_records(p._primed)  # the work source as the run primed it (a copy)
    names = list(WEIGHTS)
    delivered = np.array([snap["datasets"][n]["records"] for n in names])
    lost = np.array([sum(r["records"] for r in snap["losses"]["by_dataset"].get(n, {}).values())
                     for n in names])
    assert (drawn == delivered + lost).all(), (drawn, delivered, lost, snap["losses"])
    assert lost.sum() == 0  # the defaults drop nothing: long documents were split, not dropped
    # the realised token mixture follows the weights
    share = tokens / tokens.sum()
    for i, n in enumerate(names):
        assert abs(share[i] - WEIGHTS[n]) < 0.02, (n, share, WEIGHTS)
