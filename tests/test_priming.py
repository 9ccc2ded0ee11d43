"""Token-estimation priming: precise from a small sample, cached per node, reused, never stale."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from zephon import Pipeline, synthetic
from zephon.block import Block
from zephon.engine.lanes.lane import apply_ops
from zephon.engine.priming import token_ratios as priming
from zephon.engine.priming import token_sampling
from zephon.io import Dataset
from zephon.ops.fetch import FetchOp
from zephon.ops.tokenize import TokenizeOp
from zephon.ragged_columns import ragged_column
from zephon.work import StaticMixtureWorkSource, TokenEstimation
from zephon.work import calibration as cal


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """JSONL, Parquet (small row groups) and gzipped JSONL datasets of unlike lengths."""
    root = tmp_path_factory.mktemp("prime")
    synthetic.write_dataset(root, "code", 3000, n_shards=6, fmt="jsonl", seed=1, mean_words=80)
    synthetic.write_dataset(root, "web", 3000, n_shards=6, fmt="parquet", seed=2, mean_words=120)
    books = synthetic.write_dataset(root, "books", 600, n_shards=3, fmt="jsonl", seed=3,
                                    mean_words=700)
    for p in books.glob("*.jsonl"):
        with open(p, "rb") as f, gzip.open(f"{p}.gz", "wb") as g:
            shutil.copyfileobj(f, g)
        p.unlink()
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "node-cache"))
    return tmp_path / "node-cache" / "token-estimates"


NAMES = ("code", "web", "books")


def pipeline(root, tokenizer, names=NAMES, te=None):
    ws = StaticMixtureWorkSource([Dataset.from_path(n, Path(root) / n) for n in names],
                                 mixture={n: 1.0 / len(names) for n in names}, seed=3,
                                 token_estimation=te or TokenEstimation())
    return (Pipeline(ws).tokenize(tokenizer=tokenizer, field="text")
            .shuffle(buffer_size=64, seed=1).batch(microbatch_size=4))


def prime(p):
    """Prime ``p`` as its session does: (the primed copy of its work source, what was done)."""
    return priming.prime(p._spec())


def true_tokens_per_record(ds, tokenizer) -> float:
    tok = TokenizeOp(tokenizer, field="text")
    total = 0
    for sid, n in zip(ds.ids().tolist(), ds.counts().tolist()):
        meta = {"dataset_id": np.zeros(n, np.int64), "shard_id": np.full(n, sid, np.int64),
                "sample_idx": np.arange(n, dtype=np.int64), "lane_id": np.zeros(n, np.int64),
                "chunk_id": np.zeros(n, np.int64), "chunk_offset": np.arange(n, dtype=np.int64)}
        out = apply_ops([FetchOp([ds]), tok], Block(meta, None))
        total += int(ragged_column(out.payload, "input_ids")[0][-1])
    return total / ds.total()


def test_each_estimate_is_within_one_percent_of_the_truth_from_a_small_sample(
        corpus, tokenizer_path, cache):
    ws, report = prime(pipeline(corpus, tokenizer_path))
    for name in NAMES:
        info = report["datasets"][name]
        assert info["source"] == "measured"
        assert info["precision"] <= 0.01
        ds = ws.datasets[NAMES.index(name)]
        if ds.total() > TokenEstimation().calibration_samples:
            assert info["tokenized"] <= 512  # a small part of it went through the tokenizer
        else:  # no more records than a sample may tokenize: all of them, exactly
            assert info["tokenized"] == ds.total() and info["precision"] == 0.0
        truth = true_tokens_per_record(ds, tokenizer_path)
        assert abs(info["tokens_per_record"] / truth - 1) < 0.01, (name, info, truth)
        # the work source charges tokens per stored byte: the same figure
        mean_bytes = ds.raw_bytes().sum() / ds.total()
        assert ws.token_ratios[name] * mean_bytes == pytest.approx(info["tokens_per_record"])


def first_batches(p, k=6):
    """The first k batches' ids, and where each dataset's figure came from."""
    out = []
    for b in p:
        out.append(b.ids)
        if len(out) == k:
            break
    sources = {n: i["source"] for n, i in p.metrics_snapshot()["priming"]["datasets"].items()}
    p.close()
    return out, sources


def test_a_second_pipeline_reuses_the_node_cache_and_streams_the_same(
        corpus, tokenizer_path, cache, monkeypatch):
    first = pipeline(corpus, tokenizer_path).options(num_workers=0)
    assert "code: to be measured" in first.explain()
    stream, sources = first_batches(first)
    assert set(sources.values()) == {"measured"}
    assert len(list(cache.glob("*.json"))) == 3

    def no_measuring(*a, **k):
        raise AssertionError("measured again")

    monkeypatch.setattr(priming, "measure", no_measuring)
    second = pipeline(corpus, tokenizer_path).options(num_workers=0)
    assert "code: node cache, web: node cache, books: node cache" in second.explain()
    again, sources = first_batches(second)
    assert again == stream
    assert set(sources.values()) == {"node cache"}
    assert second._primed.token_ratios == first._primed.token_ratios  # the primed copies
    # the user's work source answers with the figures its pipeline measured (as in the reference)
    assert first.work_source.token_ratios == first._primed.token_ratios


def test_a_changed_tokenizer_or_dataset_is_measured_again(corpus, tokenizer_path, cache,
                                                          tmp_path):
    prime(pipeline(corpus, tokenizer_path, names=("code",)))
    other_tok = tmp_path / "other.json"
    synthetic.train_tokenizer(synthetic.documents(200, seed=5, mean_words=50), 600, other_tok)
    _, report = prime(pipeline(corpus, str(other_tok), names=("code",)))
    assert report["datasets"]["code"]["source"] == "measured"
    copy = tmp_path / "copy"
    shutil.copytree(Path(corpus) / "code", copy / "code")
    assert prime(pipeline(copy, tokenizer_path, names=("code",)))[1] \
        ["datasets"]["code"]["source"] == "measured"  # another place: another dataset
    assert prime(pipeline(copy, tokenizer_path, names=("code",)))[1] \
        ["datasets"]["code"]["source"] == "node cache"
    with open(copy / "code" / "shard-00000.jsonl", "a") as f:
        f.write(json.dumps({"text": "one more document"}) + "\n")
    assert prime(pipeline(copy, tokenizer_path, names=("code",)))[1] \
        ["datasets"]["code"]["source"] == "measured"
    # other estimation settings: another figure
    assert prime(pipeline(copy, tokenizer_path, names=("code",),
                         te=TokenEstimation(precision=0.02)))[1] \
        ["datasets"]["code"]["source"] == "measured"


@pytest.mark.parametrize("garbage", ["{not json", '{"key": "x", "tokens_per_byte": 0.3}',
                                     "KEY-1.5", "KEY-nan", "KEY-true"])
def test_a_corrupt_cache_entry_is_not_believed(corpus, tokenizer_path, cache, garbage):
    p = pipeline(corpus, tokenizer_path, names=("code",))
    primed, _ = prime(p)
    good = primed.token_ratios["code"]
    (entry,) = cache.glob("*.json")
    key = entry.stem
    if garbage.startswith("KEY-"):
        value = garbage[4:]
        garbage = json.dumps({"key": key, "tokens_per_byte": "VALUE"}).replace(
            '"VALUE"', value.replace("nan", "NaN"))
    entry.write_text(garbage)
    again = pipeline(corpus, tokenizer_path, names=("code",))
    primed, report = prime(again)
    assert report["datasets"]["code"]["source"] == "measured"
    assert primed.token_ratios["code"] == good
    assert json.loads(entry.read_text())["tokens_per_byte"] == good  # and the entry is mended


def test_a_restore_takes_the_checkpoints_figures(corpus, tokenizer_path, cache, monkeypatch):
    p = pipeline(corpus, tokenizer_path, names=("code", "web")).options(num_workers=0)
    it = iter(p)
    next(it)
    state = p.checkpoint()
    p.close()
    monkeypatch.setattr(priming, "measure", lambda *a, **k: pytest.fail("measured again"))
    shutil.rmtree(cache.parent)  # not even the node cache is needed
    restored = pipeline(corpus, tokenizer_path, names=("code", "web")).options(num_workers=0)
    restored.restore(state)
    _, sources = first_batches(restored, 1)
    assert set(sources.values()) == {"checkpoint"}


def test_build_index_with_a_tokenizer_stores_the_figure_every_node_reads(
        corpus, tokenizer_path, cache, tmp_path, monkeypatch):
    from zephon.__main__ import main

    root = tmp_path / "indexed"
    shutil.copytree(Path(corpus) / "web", root / "web")
    assert main(["build-index", "parquet", str(root / "web"), "--no-progress",
                 "--tokenizer", tokenizer_path]) == 0
    doc = json.loads((root / "web" / "index.json").read_text())
    (entry,) = doc["token_estimates"].values()
    assert entry["precision"] <= 0.01
    monkeypatch.setattr(priming, "measure", lambda *a, **k: pytest.fail("measured again"))
    p = pipeline(root, tokenizer_path, names=("web",))
    ws = p.work_source
    ws2 = StaticMixtureWorkSource(ws.datasets, mixture={"web": 1.0}, seed=3,
                                  token_estimation=TokenEstimation())
    p2 = Pipeline(ws2).tokenize(tokenizer=tokenizer_path, field="text").batch(microbatch_size=4)
    _, report = prime(p2)
    assert report["datasets"]["web"]["source"] == "index.json"


def test_calibration_clusters_are_deterministic_distinct_and_spread_over_shards():
    ids, counts = np.arange(10), np.full(10, 1000)
    taken: set = set()
    a = cal.plan_clusters(ids, counts, 4, 40, seed=1, taken=taken, rows=32)
    b = cal.plan_clusters(ids, counts, 4, 40, seed=1, taken=set(), rows=32)
    assert [(c.shard_id, c.start) for c in a] == [(c.shard_id, c.start) for c in b]
    assert len({(c.shard_id, c.start) for c in a}) == 40
    assert {c.shard_id for c in a} == {0, 3, 6, 9}  # spaced across the catalog
    more = cal.plan_clusters(ids, counts, 4, 200, seed=1, taken=taken, rows=32)
    assert not {(c.shard_id, c.start) for c in more} & {(c.shard_id, c.start) for c in a}
    assert len(more) == 4 * 32 - 40  # every slot of the four shards, then no more


def test_the_two_phase_estimate_leans_on_lengths_and_grows_only_the_phase_that_needs_it():
    rng = np.random.default_rng(0)
    x = rng.lognormal(6, 0.9, 200_000)  # lengths with a CV near 1
    t = 2 + x / 4.1 * rng.normal(1, 0.03, len(x))  # tokens follow the length closely
    truth = t.mean()
    sample = cal.Sample(population=len(x))
    for i in range(40):  # 40 scanned clusters of 512, 8 of them tokenized (32 records each)
        sample.x_a.append(x[i * 512:(i + 1) * 512])
    for i in range(8):
        sample.x_b.append(x[i * 512:i * 512 + 32])
        sample.t_b.append(t[i * 512:i * 512 + 32])
    est = cal.estimate(sample, 0.95, with_lengths=True)
    assert abs(est.mean_tokens / truth - 1) < 3 * est.rel_half_width / 1.96
    assert est.var_b < est.var_a  # 256 tokenized records are plenty; the lengths are not
    add_a, add_b = cal.next_round(est, 0.01, 0.95, sample.n_a, sample.n_b, 65536, 2048)
    assert add_a > 0 and add_b == 0
    # with the mean length known, tokens per byte alone: no scanning at all
    known = cal.Sample(population=len(x), x_mean=float(x.mean()), x_b=sample.x_b, t_b=sample.t_b)
    est = cal.estimate(known, 0.95, with_lengths=True)
    assert est.rel_half_width < 0.01 and abs(est.mean_tokens / truth - 1) < 0.01


def test_a_token_aware_mixture_is_weighted_by_the_estimates(corpus, tokenizer_path, cache):
    """Realised token shares follow the weights once the estimates are in."""
    p = pipeline(corpus, tokenizer_path, names=("code", "books")).options(num_workers=0)
    tokens = {0: 0, 1: 0}
    for k, b in enumerate(p):
        offsets, _ = ragged_column(b.block.payload, "input_ids")
        lens = np.diff(offsets)
        for d in (0, 1):
            tokens[d] += int(lens[b.block.meta["dataset_id"] == d].sum())
        if k == 400:
            break
    p.close()
    share = tokens[0] / (tokens[0] + tokens[1])
    assert abs(share - 0.5) < 0.05, share


def test_measuring_without_a_text_field_falls_back_to_the_plain_mean(corpus, cache):
    te = TokenEstimation(measure=lambda payload: len(payload["text"]) // 5)
    ws = StaticMixtureWorkSource([Dataset.from_path("web", Path(corpus) / "web")],
                                 mixture={"web": 1.0}, seed=0, token_estimation=te)
    p = Pipeline(ws).batch(microbatch_size=4)
    with pytest.warns(UserWarning, match="within ±"):  # no lengths to lean on: said, not hidden
        _, report = prime(p)
    assert report["datasets"]["web"]["source"] == "measured"
    assert report["datasets"]["web"]["tokenized"] >= 256
    assert token_sampling.cal is cal
