"""The documented first pipelines: a 25/75 code/web mixture, batching, the DataLoader adapter."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from zephon import Pipeline, SampleBatch
from zephon.io import Dataset, InMemoryShard
from zephon.work import MixtureSpec, StaticMixtureWorkSource


def _ws(corpus_dir, **kw):
    code = Dataset.from_path("code", str(corpus_dir / "code"))
    web = Dataset.from_path("web", str(corpus_dir / "web"))
    kw.setdefault("seed", 42)
    return StaticMixtureWorkSource(datasets=[code, web],
                                   mixture=MixtureSpec({"code": 0.25, "web": 0.75}), **kw)


def test_seed_example_mixture_and_batches(corpus_dir):
    ws = _ws(corpus_dir, chunk_size=256)
    pipeline = Pipeline(ws).batch(microbatch_size=32)
    counts: Counter = Counter()
    n_batches = 0
    for batch in pipeline:
        assert isinstance(batch, SampleBatch)
        assert len(batch) == 32
        assert len(set(batch.lane_ids)) == 1
        for rec in batch.records:
            assert isinstance(rec.payload, dict) and rec.payload["text"]
            d, s, i = rec.meta.sample_id
            counts[d] += 1
        n_batches += 1
        if n_batches == 20:
            break
    share = counts[0] / (counts[0] + counts[1])
    assert abs(share - 0.25) < 0.02


def test_every_sample_once_per_pass_through_the_pipeline(corpus_dir):
    ws = _ws(corpus_dir, chunk_size=200)
    seen: Counter = Counter()
    for batch in Pipeline(ws).batch(microbatch_size=10, drop_last=False):
        seen.update(batch.ids)
    web = [k for k in seen if k[0] == 1]
    assert len(web) == 1800 and all(seen[k] == 1 for k in web)  # the slowest dataset: once
    code = Counter(seen[k] for k in seen if k[0] == 0)
    assert set(code) <= {1, 2}  # the faster one cycles: whole passes + part of one, no holes


def test_dataloader_adapter_yields_the_same_batches(corpus_dir):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    def first_ids(it, n=5):
        out = []
        for b in it:
            out.append(b.ids)
            if len(out) == n:
                break
        return out

    direct = first_ids(Pipeline(_ws(corpus_dir, chunk_size=128)).batch(microbatch_size=32))
    pipeline = Pipeline(_ws(corpus_dir, chunk_size=128)).batch(microbatch_size=32)
    loader = DataLoader(pipeline.to_torch_dataset(), batch_size=None, num_workers=0)
    assert first_ids(loader) == direct
    assert torch is not None


def test_without_batch_the_pipeline_yields_records(corpus_dir):
    recs = []
    for r in Pipeline(_ws(corpus_dir, chunk_size=64)):
        recs.append(r)
        if len(recs) == 10:
            break
    assert all(hasattr(r, "meta") and "text" in r.payload for r in recs)
    assert [r.meta.chunk_offset for r in recs[:5]] == [0, 1, 2, 3, 4]


def test_in_memory_minimal_shape_and_payloads_never_mutated():
    shard = InMemoryShard([{"text": "a b"}, {"text": "c"}, {"text": "d e f"}])
    original = copy.deepcopy(list(shard))
    ds = Dataset.from_dict("demo", {0: shard})
    ws = StaticMixtureWorkSource(datasets=[ds], mixture=MixtureSpec({"demo": 1.0}), chunk_size=1,
                                 seed=42)

    def mutate(p):
        p["text"] = p["text"].upper()
        p["extra"] = 1
        return p

    p = Pipeline(ws).decode_text().map_transform(mutate).batch(microbatch_size=2, drop_last=False)
    batches = list(p)
    assert [len(b) for b in batches] == [2, 1]
    texts = sorted(r.payload["text"] for b in batches for r in b.records)
    assert texts == ["A B", "C", "D E F"]
    assert list(shard) == original


def test_map_transform_none_drops_records(corpus_dir):
    ws = _ws(corpus_dir, chunk_size=128)
    p = Pipeline(ws).map_transform(lambda r: r if r["source"] == "code" else None)
    got = [r for _, r in zip(range(50), p)]
    assert got and all(r.payload["source"] == "code" for r in got)


def test_map_batch_runs_on_batches(corpus_dir):
    def tag(b):
        for r in b.records:
            r.payload = {**r.payload, "tagged": True}
        return SampleBatch(b.records)

    p = Pipeline(_ws(corpus_dir, chunk_size=64)).batch(microbatch_size=4).map_batch(tag)
    b = next(iter(p))
    assert all(r.payload["tagged"] for r in b.records)


def test_lanes_interleave_round_robin(corpus_dir):
    p = Pipeline(_ws(corpus_dir, chunk_size=64)).options(canonical_replicas=3).batch(microbatch_size=8)
    lanes = [b.lane_ids[0] for _, b in zip(range(9), p)]
    assert lanes == [0, 1, 2] * 3


def test_unknown_option_is_refused_and_second_iterator_refused(corpus_dir):
    from zephon.errors import ConfigError

    p = Pipeline(_ws(corpus_dir, chunk_size=64)).batch(microbatch_size=4)
    with pytest.raises(ConfigError, match="unknown option 'not_an_option'"):
        p.options(not_an_option=1)
    it = iter(p)
    next(it)
    with pytest.raises(RuntimeError):
        next(iter(p))


def test_explain_lists_the_plan(corpus_dir):
    p = Pipeline(_ws(corpus_dir)).decode_text().batch(microbatch_size=8)
    text = p.explain()
    assert "fetch" in text and "decode_text" in text and "batch" in text


def test_api_alias_module():
    from zephon.api import Pipeline as P2

    assert P2 is Pipeline


def test_prefetch_never_changes_the_data(corpus_dir):
    plain = [b.ids for b in Pipeline(_ws(corpus_dir, chunk_size=128)).options(num_workers=0)
             .batch(microbatch_size=16)]
    p = (Pipeline(_ws(corpus_dir, chunk_size=128)).options(num_workers=0)
         .batch(microbatch_size=16).prefetch(buffer_size=256, parallelism=2))
    assert [b.ids for b in p] == plain
    with pytest.raises(RuntimeError):
        p.prefetch()
