"""Hypothesis: random pipelines, random cut points, random micro-batch sizes: resume is exact."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zephon import Pipeline, synthetic
from zephon.io import Dataset, InMemoryShard
from zephon.work import StaticMixtureWorkSource

_TEXTS = {name: synthetic.documents(n, seed=s, mean_words=w)
          for name, n, s, w in (("a", 90, 1, 12), ("b", 160, 2, 5))}
_DATA = {name: Dataset.from_dict(name, {i: InMemoryShard([{"text": t, "n": j} for j, t in
                                                          enumerate(texts) if j % 3 == i])
                                        for i in range(3)})
         for name, texts in _TEXTS.items()}


def _ops(p, spec):
    if spec["filter"]:
        p = p.map_transform(lambda r: None if r["n"] % 5 == 0 else r)
    if spec["tokenize"]:
        p = p.tokenize(tokenizer_id="__fallback__", field="text",
                       **({"max_length": 24, "split_long_samples": True} if spec["split"] else {}))
    if spec["shuffle"]:
        p = p.shuffle(buffer_size=spec["shuffle"], seed=4, algorithm=spec["shuffle_alg"])
    if spec["mixture"]:
        p = p.ensure_mixture(max_buffer_size=12,
                             weight_by="auto" if spec["tokenize"] else "samples")
    if spec["tokenize"] and spec["pack"]:
        alg = spec["pack"]
        kw = {"num_bins": 3} if alg in ("first_fit", "best_fit") else {}
        if alg == "best_fit_wrap":
            kw["candidate_pool_size"] = 6
        p = p.pack_flat(max_length=40, algorithm=alg, pad_token_id=0, **kw)
    if spec["batch"]:
        p = p.batch(microbatch_size=spec["batch"], drop_last=spec["drop_last"])
    return p


def _make(spec, micro):
    ws = StaticMixtureWorkSource([_DATA["a"], _DATA["b"]], {"a": 0.4, "b": 0.6},
                                 chunk_size=spec["chunk_size"], seed=spec["seed"])
    p = Pipeline(ws).options(num_workers=0, canonical_replicas=spec["lanes"],
                             micro_batch_size=micro)
    return _ops(p, spec)


def _sig(x):
    if hasattr(x, "block"):
        return json.dumps([x.ids, x.block.payload_list()], default=str)
    return json.dumps([x.meta.sample_id, x.meta.lineage, x.payload], default=str)


spec_st = st.fixed_dictionaries({
    "lanes": st.integers(1, 3), "chunk_size": st.integers(8, 70), "seed": st.integers(0, 3),
    "filter": st.booleans(), "tokenize": st.booleans(), "split": st.booleans(),
    "shuffle": st.sampled_from([0, 1, 7, 30]),
    "shuffle_alg": st.sampled_from(["streaming", "block", "block_warmup"]),
    "mixture": st.booleans(),
    "pack": st.sampled_from([None, "first_fit", "best_fit", "wrap", "best_fit_wrap"]),
    "batch": st.sampled_from([0, 1, 3]), "drop_last": st.booleans(),
})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_st, st.integers(3, 50), st.integers(3, 50), st.floats(0, 1))
def test_random_pipelines_resume_exactly(spec, micro_a, micro_b, where):
    full = [_sig(x) for x in _make(spec, micro_a)]
    cut = int(where * len(full))
    p = _make(spec, micro_a)
    it = iter(p)
    head = [_sig(next(it)) for _ in range(cut)]
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    tail = [_sig(x) for x in _make(spec, micro_b).restore(state)]
    assert head + tail == full
