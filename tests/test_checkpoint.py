"""Exact resume: checkpoint anywhere, restore into a fresh pipeline, get the same remaining stream."""

from __future__ import annotations

import json

import pytest

from zephon import Pipeline, merge_checkpoints
from zephon.io import Dataset
from zephon.work import StaticMixtureWorkSource

MIXES = {
    "batch": lambda p, tok: p.batch(microbatch_size=5),
    "filter+batch": lambda p, tok: p.map_transform(
        lambda r: None if r["doc_id"].endswith("7") else r).batch(microbatch_size=4),
    "shuffle": lambda p, tok: p.shuffle(buffer_size=64, seed=3).batch(microbatch_size=4),
    "split+shuffle+mixture+best_fit": lambda p, tok: (
        p.tokenize(tokenizer=tok, field="text", max_length=48, split_long_samples=True)
        .shuffle(buffer_size=40, seed=1).ensure_mixture(max_buffer_size=30)
        .pack_flat(max_length=49, algorithm="best_fit", num_bins=4, pad_token_id=0)
        .batch(microbatch_size=3)),
    "first_fit": lambda p, tok: (
        p.tokenize(tokenizer=tok, field="text")
        .pack_flat(max_length=96, algorithm="first_fit", num_bins=3, pad_token_id=0)
        .batch(microbatch_size=2)),
    "wrap": lambda p, tok: (
        p.tokenize(tokenizer=tok, field="text").pack_flat(max_length=64, algorithm="wrap")
        .batch(microbatch_size=2)),
    "best_fit_wrap": lambda p, tok: (
        p.tokenize(tokenizer=tok, field="text")
        .pack_flat(max_length=64, algorithm="best_fit_wrap", candidate_pool_size=16,
                   pad_token_id=0).batch(microbatch_size=2)),
    "records": lambda p, tok: p.shuffle(buffer_size=16, seed=5),
}


def _make(corpus_dir, tok, mix, lanes=2, chunk_size=90, micro=37, **opts):
    ds = [Dataset.from_path("code", str(corpus_dir / "code")),
          Dataset.from_path("web", str(corpus_dir / "web"))]
    ws = StaticMixtureWorkSource(ds, {"code": 0.25, "web": 0.75}, seed=7, chunk_size=chunk_size)
    p = Pipeline(ws).options(num_workers=0, canonical_replicas=lanes, micro_batch_size=micro,
                             **opts)
    return MIXES[mix](p, tok)


def _sig(item):
    if hasattr(item, "block"):
        b = item.block
        return (tuple(item.ids), tuple(map(tuple, b.lineage.tolist())),
                json.dumps(b.payload_list(), sort_keys=True, default=str))
    return (item.meta.sample_id, item.meta.lineage, json.dumps(item.payload, sort_keys=True))


def _take(it, n):
    out = []
    for _ in range(n):
        out.append(_sig(next(it)))
    return out


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_resume_equals_uninterrupted(corpus_dir, tokenizer_path, mix):
    full = [_sig(x) for _, x in zip(range(400), _make(corpus_dir, tokenizer_path, mix))]
    n = len(full)
    cuts = sorted({0, 1, 7, n // 2, n - 1})
    for cut in cuts:
        p = _make(corpus_dir, tokenizer_path, mix)
        head = _take(iter(p), cut)
        state = json.loads(json.dumps(p.checkpoint()))
        p.close()
        q = _make(corpus_dir, tokenizer_path, mix, micro=53).restore(state)
        tail = [_sig(x) for _, x in zip(range(n - cut), q)]
        assert head + tail == full, f"{mix}: resume at {cut} diverged"


def test_after_the_end_restores_to_an_empty_stream(corpus_dir, tokenizer_path):
    p = _make(corpus_dir, tokenizer_path, "shuffle", chunk_size=60)
    items = list(p)
    assert items
    state = json.loads(json.dumps(p.checkpoint()))
    assert list(_make(corpus_dir, tokenizer_path, "shuffle", chunk_size=60).restore(state)) == []


def test_three_chained_resumes_equal_one_run(corpus_dir, tokenizer_path):
    mix = "split+shuffle+mixture+best_fit"
    full = [_sig(x) for _, x in zip(range(120), _make(corpus_dir, tokenizer_path, mix))]
    got, state = [], None
    for k in (13, 29, 41, 37):
        p = _make(corpus_dir, tokenizer_path, mix)
        if state is not None:
            p.restore(state)
        got += _take(iter(p), k)
        state = json.loads(json.dumps(p.checkpoint()))
        p.close()
    assert got == full


def test_checkpoint_right_after_restore_is_the_pending_state(corpus_dir, tokenizer_path):
    p = _make(corpus_dir, tokenizer_path, "shuffle")
    _take(iter(p), 5)
    state = p.checkpoint()
    q = _make(corpus_dir, tokenizer_path, "shuffle").restore(state)
    assert q.checkpoint() == state


def test_mismatched_restore_names_the_difference(corpus_dir, tokenizer_path):
    p = _make(corpus_dir, tokenizer_path, "shuffle")
    _take(iter(p), 3)
    state = p.checkpoint()
    other = _make(corpus_dir, tokenizer_path, "batch")
    with pytest.raises(RuntimeError, match="operators"):
        other.restore(state)
    lanes = _make(corpus_dir, tokenizer_path, "shuffle", lanes=3)
    with pytest.raises(RuntimeError, match="canonical_replicas"):
        lanes.restore(state)
    ds = [Dataset.from_path("code", str(corpus_dir / "code")),
          Dataset.from_path("web", str(corpus_dir / "web"))]
    ws = StaticMixtureWorkSource(ds, {"code": 0.25, "web": 0.75}, seed=8, chunk_size=90)
    seeded = Pipeline(ws).options(canonical_replicas=2).shuffle(buffer_size=64, seed=3).batch(
        microbatch_size=4)
    with pytest.raises(RuntimeError, match="seed"):
        seeded.restore(state)
    with pytest.raises(ValueError):
        p.restore({"lanes": {}})


def test_checkpoint_size_does_not_grow_with_chunk_size_or_progress(corpus_dir, tokenizer_path):
    sizes = {}
    for chunk_size in (64, 1024):
        for steps in (5, 60):
            p = _make(corpus_dir, tokenizer_path, "first_fit", chunk_size=chunk_size)
            _take(iter(p), steps)
            sizes[(chunk_size, steps)] = len(json.dumps(p.checkpoint()))
            p.close()
    assert max(sizes.values()) < 2.0 * min(sizes.values()), sizes


def _run_ranks(corpus_dir, tok, world, state, steps, mix="split+shuffle+mixture+best_fit"):
    """Each rank of ``world`` takes ``steps`` global steps (4 lanes: 4/world batches a step)."""
    per_rank, ckpts = [], []
    for rank in range(world):
        p = _make(corpus_dir, tok, mix, lanes=4, world_size=world, global_rank=rank)
        if state is not None:
            p.restore(state)
        it = iter(p)
        per_rank.append([next(it) for _ in range(steps * 4 // world)])
        ckpts.append(json.loads(json.dumps(p.checkpoint())))
        p.close()
    return per_rank, merge_checkpoints(ckpts)


def test_elastic_resume_keeps_every_lane_and_every_global_step(corpus_dir, tokenizer_path):
    mix = "split+shuffle+mixture+best_fit"
    one = _make(corpus_dir, tokenizer_path, mix, lanes=4)
    ref = [next(iter_) for iter_ in [iter(one)] for _ in range(4 * 12)]
    ref_steps = [sorted(_sig(b) for b in ref[4 * s:4 * s + 4]) for s in range(12)]
    ref_lanes = {lane: [_sig(b) for b in ref if b.lane_ids[0] == lane] for lane in range(4)}
    got_steps: list = []
    got_lanes: dict = {lane: [] for lane in range(4)}
    state = None
    for world, steps in ((1, 3), (2, 3), (4, 3), (2, 3)):
        per_rank, state = _run_ranks(corpus_dir, tokenizer_path, world, state, steps, mix)
        for s in range(steps):
            k = 4 // world
            step = [b for r in per_rank for b in r[s * k:(s + 1) * k]]
            got_steps.append(sorted(_sig(b) for b in step))
            for b in step:
                got_lanes[b.lane_ids[0]].append(_sig(b))
    assert got_lanes == ref_lanes
    assert got_steps == ref_steps
