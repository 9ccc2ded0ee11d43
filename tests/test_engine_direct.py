"""The process engine without a coordinator process (``DirectEngine``): where the serial stage
only cuts records into batches, the training process coordinates its workers itself, maps their
results and slices them into batches, with no copy; the stream is the one the coordinator and
inline give, and nothing is left behind."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pyarrow as pa
import pytest
from conftest import shm_entries, wait_released
from test_checkpoint import _make, _sig

from zephon.block import Block, RowsOf
from zephon.engine.factory import coordinator_in_training
from zephon.engine.observe.mixture_check import MixtureCheck
from zephon.engine.observe.observer import Observer
from zephon.engine.plan.stages import compile_plan
from zephon.options import RuntimeOptions
from zephon.types import SampleBatch


def _block(n: int = 100, datasets: int = 3) -> Block:
    rng = np.random.default_rng(0)
    ds = rng.integers(0, datasets, n)
    b = Block.from_pointers(ds, np.zeros(n), np.arange(n), lane_id=0, chunk_id=0,
                            chunk_offset=np.arange(n))
    toks = [list(range(int(k))) for k in rng.integers(1, 9, n)]
    return b.with_table(pa.table({"input_ids": toks, "text": [str(i) for i in range(n)]}))


def test_rows_of_is_the_slice_it_stands_for():
    b = _block()
    v = RowsOf(b, 10, 42, is_batch=True)
    assert len(v) == 32 and v.origin == (b, 10) and v.is_batch and not v._ready
    s = b.slice(10, 42)
    assert v._ready is False  # len and origin slice nothing
    assert all(np.array_equal(v.meta[k], s.meta[k]) for k in s.meta)
    assert v.payload.equals(s.payload) and np.array_equal(v.lineage, s.lineage)
    back = pickle.loads(pickle.dumps(RowsOf(b, 3, 9)))
    assert type(back) is Block and back.ids() == b.slice(3, 9).ids() and back.origin is None


def test_a_run_of_batches_counts_as_its_batches_one_by_one():
    """The observer counts a run of batches cut from one block at once; records, tokens and
    the mixture check's judgments are those of counting every batch alone."""
    b = _block(300, datasets=3)
    cuts = [0, 7, 40, 41, 100, 180, 181, 300]
    names = ["a", "b", "c"]

    def observe(units, tolerance=0.3):
        obs = Observer(names, {}, progress=False)
        obs.mixture = MixtureCheck(names, {0: 0.2, 1: 0.3, 2: 0.5}, "tokens", tolerance, 50,
                                   lambda *a: "", min_records=3)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for u in units:
                obs.delivered(u, 0)
            snap = obs.snapshot()
        return (obs.records.tolist(), obs.tokens.tolist(), obs.mixture.windows,
                [str(w.message) for w in said],
                [(d["records"], d["tokens"]) for d in snap["datasets"].values()])

    runs = [SampleBatch._from_block(RowsOf(b, x, y, True)) for x, y in zip(cuts, cuts[1:])]
    alone = [SampleBatch._from_block(b.slice(x, y)) for x, y in zip(cuts, cuts[1:])]
    mixed = runs[:3] + alone[3:4] + runs[4:]  # a batch of another block breaks the run
    assert observe(runs) == observe(alone) == observe(mixed)
    assert observe(runs)[2] > 3  # several windows were judged
    said = observe(runs, tolerance=0.01)
    assert said == observe(alone, tolerance=0.01) and said[3]  # and a warning, the same


@pytest.mark.parametrize("seed", range(6))
def test_mixture_rows_are_judged_as_one_by_one(seed):
    rng = np.random.default_rng(seed)
    k, n = int(rng.integers(1, 60)), 3
    recs = rng.integers(0, 4, (k, n))
    toks = recs * rng.integers(1, 50, (k, n))
    for unit in ("records", "tokens"):
        a = MixtureCheck(["a", "b", "c"], {0: .5, 1: .3, 2: .2}, unit, 0.02, 37, lambda *x: "")
        b = MixtureCheck(["a", "b", "c"], {0: .5, 1: .3, 2: .2}, unit, 0.02, 37, lambda *x: "")
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            for r, t in zip(recs, toks):
                a.add(r, t, int(r.sum()))
            b.add_rows(recs, toks, recs.sum(axis=1))
        assert (a.windows, a.total, a.warned) == (b.windows, b.total, b.warned)
        assert a.counts.tolist() == b.counts.tolist()
        assert a.run_records.tolist() == b.run_records.tolist()


def test_the_training_process_coordinates_when_the_serial_stage_only_batches(corpus_dir,
                                                                            tokenizer_path):
    batched = _make(corpus_dir, tokenizer_path, "batch")
    shuffled = _make(corpus_dir, tokenizer_path, "split+shuffle+mixture+best_fit")
    auto = RuntimeOptions()
    assert coordinator_in_training(compile_plan(batched._spec().all_ops), auto)
    assert not coordinator_in_training(compile_plan(shuffled._spec().all_ops), auto)
    forced = RuntimeOptions({"coordinator": "process"})
    assert not coordinator_in_training(compile_plan(batched._spec().all_ops), forced)
    with pytest.raises(ValueError, match="coordinator"):
        RuntimeOptions().update(coordinator="elsewhere")


@pytest.mark.parametrize("mix", ["batch", "filter+batch", "records"])
def test_the_stream_is_the_coordinators_and_inlines(corpus_dir, tokenizer_path, mix):
    p = _make(corpus_dir, tokenizer_path, mix)
    inline = [_sig(x) for x in p]
    delivered = p.metrics_snapshot()["records_delivered"]
    for where in ("training", "process"):
        p = _make(corpus_dir, tokenizer_path, mix).options(num_workers=2, coordinator=where)
        it = iter(p)
        got = [_sig(next(it))]
        roles = p.metrics_snapshot()["processes"]
        direct = type(p._runtime.engine).__name__ == "DirectEngine"
        assert direct == (where == "training")
        assert (roles["coordinator"] == []) == direct and len(roles["workers"]) == 2
        got += [_sig(x) for x in it]
        assert got == inline, where
        assert p.metrics_snapshot()["records_delivered"] == delivered


def test_a_closed_direct_engine_leaves_nothing(corpus_dir, tokenizer_path):
    before = shm_entries()
    p = _make(corpus_dir, tokenizer_path, "batch").options(num_workers=2)
    it = iter(p)
    next(it)
    engine = p._runtime.engine
    assert type(engine).__name__ == "DirectEngine"
    pids, prefix = engine.pids(), engine.config.prefix
    assert len(pids) == 2
    p.close()
    wait_released(prefix, pids, timeout=30)
    assert shm_entries() <= before
