"""The curriculum's data semantics: weights, quotas, orders, passes and termination."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from zephon.work import MixtureSpec, StaticMixtureWorkSource
from zephon.work.quotas import QuotaSchedule


class FakeDataset:
    """The duck-typed dataset interface the curriculum consumes."""

    def __init__(self, name, counts, ids=None):
        self.name = name
        self._counts = np.asarray(counts, dtype=np.int64)
        self._ids = (np.arange(len(counts), dtype=np.int64) * 10 + 5 if ids is None
                     else np.asarray(ids, dtype=np.int64))

    def ids(self):
        return self._ids

    def counts(self):
        return self._counts

    def total(self):
        return int(self._counts.sum())

    def raw_bytes(self):
        return None


def drain(ws):
    chunks = []
    while (c := ws.next_chunk()) is not None:
        chunks.append(c)
    return chunks


def stream(chunks):
    """All pointers in read order as an (n, 3) array."""
    return np.stack([np.concatenate([c.dataset_id for c in chunks]),
                     np.concatenate([c.shard_id for c in chunks]),
                     np.concatenate([c.sample_idx for c in chunks])], axis=1)


def all_samples(ds):
    return {(int(s), i) for s, n in zip(ds.ids(), ds.counts()) for i in range(int(n))}


def passes_of(ptrs, d, ds):
    """Dataset d's pointers cut into passes of len(ds) (the last may be partial)."""
    own = [(int(s), int(i)) for dd, s, i in ptrs if dd == d]
    n = ds.total()
    return [own[a:a + n] for a in range(0, len(own), n)]


def assert_exact_passes(ptrs, d, ds):
    """Whole passes are permutations of the dataset; a partial last pass has no repeats."""
    passes = passes_of(ptrs, d, ds)
    for p in passes[:-1]:
        assert len(p) == ds.total() and set(p) == all_samples(ds)
    assert len(set(passes[-1])) == len(passes[-1]) and set(passes[-1]) <= all_samples(ds)
    return passes


# -- MixtureSpec ------------------------------------------------------------------------------

def test_mixture_normalises_exactly():
    assert MixtureSpec({"a": 0.25, "b": 0.75}) == MixtureSpec({"a": 1, "b": 3})
    assert MixtureSpec({"a": 0.1, "b": 0.3}).exact == {"a": Fraction(1, 4), "b": Fraction(3, 4)}
    assert MixtureSpec({"a": 2, "b": 2}).weights == {"a": 0.5, "b": 0.5}


@pytest.mark.parametrize("weights", [{}, {"a": 0}, {"a": -1}, {"a": float("nan")},
                                     {"a": float("inf")}, {"a": True}, {"a": "1"}, {"": 1}])
def test_mixture_rejects_bad_weights(weights):
    with pytest.raises(ValueError):
        MixtureSpec(weights)


def test_mixture_names_missing_and_extra():
    with pytest.raises(ValueError, match=r"no weight for dataset\(s\) \['b'\].*unknown.*\['c'\]"):
        MixtureSpec({"a": 1, "c": 1}).check_names(["a", "b"])
    ds = [FakeDataset("a", [5]), FakeDataset("b", [5])]
    with pytest.raises(ValueError, match="'c'"):
        StaticMixtureWorkSource(ds, {"a": 1, "b": 1, "c": 1})


# -- quotas -----------------------------------------------------------------------------------

def _random_weights(rng, rare):
    c = rng.randint(1, 7)
    raw = [Fraction(rng.randint(1, 1000)) if not rare or rng.random() < 0.6
           else Fraction(rng.randint(1, 5)) for _ in range(c)]
    return [w / sum(raw) for w in raw]


@pytest.mark.parametrize("rare", [False, True])
def test_quota_rules_sum_stay_within_one_and_never_decrease(rare):
    rng = random.Random(7 + rare)
    for _ in range(50 if rare else 120):
        weights = _random_weights(rng, rare)
        cs = rng.choice([1, 3, 4, 16, 100] if rare else [500, 1000, 16384])
        q = QuotaSchedule(weights, cs)
        prev = q.cum(0)
        for k in range(1, 120):
            cur = q.cum(k)
            assert sum(cur) == k * cs
            for c in range(len(weights)):
                assert cur[c] >= prev[c]
                assert abs(cur[c] - q.target(c, k)) < 1
            prev = cur
        for k in rng.sample(range(1000), 3):  # random access on a fresh schedule
            assert QuotaSchedule(weights, cs).cum(k) == q.cum(k)


def test_quota_rule_choice_and_chunk_reaching():
    assert QuotaSchedule([Fraction(1, 4), Fraction(3, 4)], 4).closed_form
    rare = QuotaSchedule([Fraction(1, 1000), Fraction(999, 1000)], 16)
    assert not rare.closed_form
    assert rare.cum(rare.period + 3) == tuple(
        a + b for a, b in zip(rare.cum(3), rare.cum(rare.period)))
    for c, count in ((0, 1), (0, 7), (1, 1), (1, 5000)):
        k = rare.chunk_reaching(c, count)
        assert rare.cum(k)[c] < count <= rare.cum(k + 1)[c]


# -- stream semantics -------------------------------------------------------------------------

def three_datasets():
    return [FakeDataset("code", [40, 25, 35]), FakeDataset("web", [60] * 5),
            FakeDataset("math", [7, 0, 13])]


W3 = {"code": 0.2, "web": 0.5, "math": 0.3}


def test_same_seed_same_stream_other_seed_other_order_same_samples():
    a = stream(drain(StaticMixtureWorkSource(three_datasets(), W3, chunk_size=32, seed=1)))
    b = stream(drain(StaticMixtureWorkSource(three_datasets(), W3, chunk_size=32, seed=1)))
    c = stream(drain(StaticMixtureWorkSource(three_datasets(), W3, chunk_size=32, seed=2)))
    assert np.array_equal(a, b)
    assert a.shape == c.shape and not np.array_equal(a, c)
    ds = three_datasets()
    # web (300 samples at weight .5) is the slowest: seen exactly once under both seeds.
    for s in (a, c):
        web = {(int(x[1]), int(x[2])) for x in s if x[0] == 1}
        assert len(web) == int((s[:, 0] == 1).sum()) and web == all_samples(ds[1])


def test_default_ends_when_the_last_dataset_completes_one_pass():
    ds = three_datasets()
    chunks = drain(StaticMixtureWorkSource(ds, W3, chunk_size=32, seed=3))
    ptrs = stream(chunks)
    full = [assert_exact_passes(ptrs, d, ds[d]) for d in range(3)]
    assert [len(p) for p in full[1]] == [300]  # slowest: exactly one pass
    assert len(full[0]) >= 1 and len(full[2]) >= 2
    assert ptrs[-1][0] == 1  # the stream ends with the sample completing that pass
    assert all(len(c) == 32 for c in chunks[:-1]) and 1 <= len(chunks[-1]) <= 32


def test_stop_policy_ends_at_first_exhaustion_and_delivers_everything():
    ds = three_datasets()
    ws = StaticMixtureWorkSource(ds, W3, chunk_size=32, seed=3, exhausted_policy="stop")
    chunks = drain(ws)
    ptrs = stream(chunks)
    # math (20 samples at .3) runs out first: its 20th and 21st samples fall in one chunk, so
    # the stream ends right after the 20th (no sample of the pass is left out)
    assert ptrs[-1][0] == 2
    assert [len(p) for p in assert_exact_passes(ptrs, 2, ds[2])] == [20]
    assert all(len(c) == 32 for c in chunks[:-1])
    for d in (0, 1):
        assert_exact_passes(ptrs, d, ds[d])
    assert len(ptrs) == ws.total_samples == len(ws)


def test_stop_after_passes_and_max_repeats():
    ds = three_datasets()
    ptrs = stream(drain(StaticMixtureWorkSource(ds, W3, chunk_size=32, stop_after_passes=2)))
    passes = [assert_exact_passes(ptrs, d, ds[d]) for d in range(3)]
    assert [len(p) for p in passes[1]] == [300, 300]
    assert all(sum(len(p) for p in pp) >= 2 * d.total() for pp, d in zip(passes, ds))
    capped = stream(drain(StaticMixtureWorkSource(ds, W3, chunk_size=32, max_repeats=1)))
    # math (20 samples at .3) completes its 2nd pass first: the stream ends right there.
    assert capped[-1][0] == 2 and int((capped[:, 0] == 2).sum()) == 40
    assert_exact_passes(capped, 2, ds[2])


def test_termination_only_truncates_the_infinite_stream():
    ds = three_datasets()
    inf = StaticMixtureWorkSource(ds, W3, chunk_size=32, seed=4, exhausted_policy="repeat")
    assert inf.total_samples == float("inf") and inf.num_chunks() is None
    with pytest.raises(TypeError):
        len(inf)
    fin = drain(StaticMixtureWorkSource(ds, W3, chunk_size=32, seed=4))
    for k, c in enumerate(fin):
        ref = inf.lane_chunk(0, 1, k)
        assert np.array_equal(c.sample_idx, ref.sample_idx[:len(c)])
        assert np.array_equal(c.dataset_id, ref.dataset_id[:len(c)])


def test_quotas_sum_and_cumulative_counts_stay_within_one():
    ds = three_datasets()
    chunks = drain(StaticMixtureWorkSource(ds, W3, chunk_size=37, seed=5))
    w = MixtureSpec(W3).exact
    cum = np.zeros(3, dtype=np.int64)
    for k, c in enumerate(chunks[:-1], start=1):
        assert len(c) == 37
        cum += np.bincount(c.dataset_id, minlength=3)
        for d, name in enumerate(["code", "web", "math"]):
            assert abs(cum[d] - k * 37 * w[name]) < 1


def test_mixture_windows_track_weights():
    ds = [FakeDataset("a", [10**6]), FakeDataset("b", [10**6]), FakeDataset("c", [10**6])]
    weights = {"a": 0.13, "b": 0.57, "c": 0.3}
    ws = StaticMixtureWorkSource(ds, weights, chunk_size=997, seed=9)
    counts = np.array([np.bincount(ws.lane_chunk(0, 1, k).dataset_id, minlength=3)
                       for k in range(60)])
    for a in range(0, 51):
        share = counts[a:a + 10].sum(axis=0) / (10 * 997)
        assert np.allclose(share, [0.13, 0.57, 0.3], atol=0.02 * np.array([0.13, 0.57, 0.3]))


def test_spec_a2_mixture_realisation():
    ds = [FakeDataset("a", [5000]), FakeDataset("b", [5000])]
    x = StaticMixtureWorkSource(ds, {"a": 1, "b": 3}, chunk_size=50, seed=42)
    y = StaticMixtureWorkSource(ds, MixtureSpec({"a": 0.25, "b": 0.75}), chunk_size=50, seed=42)
    drawn = b = 0
    for _ in range(40):
        cx, cy = x.next_chunk(), y.next_chunk()
        assert np.array_equal(cx.dataset_id, cy.dataset_id)
        assert np.array_equal(cx.sample_idx, cy.sample_idx)
        drawn += len(cx)
        b += int((cx.dataset_id == 1).sum())
        assert abs(b - 0.75 * drawn) <= 1


def test_spec_a3_shuffle_knobs():
    ds = [FakeDataset("a", [5, 3, 4]), FakeDataset("b", [6, 6])]
    off = dict(shuffle_shards=False, shuffle_within_shard=False, shuffle_block_size=None)
    ptrs = stream(drain(StaticMixtureWorkSource(ds, {"a": 1, "b": 1}, chunk_size=4, **off)))
    first_b = [(int(s), int(i)) for d, s, i in ptrs if d == 1][:12]
    assert first_b == [(5, i) for i in range(6)] + [(15, i) for i in range(6)]
    base = stream(drain(StaticMixtureWorkSource(ds, {"a": 1, "b": 1}, chunk_size=4, seed=1, **off)))
    for knob in ({"shuffle_shards": True}, {"shuffle_within_shard": True},
                 {"shuffle_block_size": 4}, {"shuffle_block_size": "global"}):
        kw = {**off, **knob}
        one = stream(drain(StaticMixtureWorkSource(ds, {"a": 1, "b": 1}, chunk_size=4, seed=1, **kw)))
        again = stream(drain(StaticMixtureWorkSource(ds, {"a": 1, "b": 1}, chunk_size=4, seed=1, **kw)))
        other = stream(drain(StaticMixtureWorkSource(ds, {"a": 1, "b": 1}, chunk_size=4, seed=7, **kw)))
        assert np.array_equal(one, again)
        assert not np.array_equal(one, base) and not np.array_equal(one, other)
    auto = StaticMixtureWorkSource([FakeDataset("a", [5, 3]), FakeDataset("b", [100, 100])],
                                   {"a": 1, "b": 1}, shuffle_block_size="auto")
    assert auto.resolved_block_sizes == {"a": 8, "b": 200}  # 8 x 100, clamped to each total
    assert StaticMixtureWorkSource(ds, {"a": 1, "b": 1}, shuffle_block_size=5).resolved_block_sizes \
        == {"a": 5, "b": 5}


def test_spec_a4_termination_defaults_small_dataset_cycles_reshuffled():
    small, big = FakeDataset("small", [10]), FakeDataset("big", [1000])
    ws = StaticMixtureWorkSource([small, big], {"small": 1, "big": 1}, chunk_size=4, seed=42,
                                 shuffle_within_shard=True)
    ptrs = stream(drain(ws))
    assert [len(p) for p in assert_exact_passes(ptrs, 1, big)] == [1000]
    passes = assert_exact_passes(ptrs, 0, small)
    assert len(passes) == 100
    assert len({tuple(p) for p in passes}) > 50  # reshuffled on each repeat
    stop = StaticMixtureWorkSource([small, big], {"small": 1, "big": 1}, chunk_size=4,
                                   exhausted_policy="stop")
    assert stop.total_samples == 20  # 10 of small and 10 of big: 5 whole chunks, then the end
    with pytest.raises(ValueError):
        StaticMixtureWorkSource([small, big], {"small": 1, "big": 1}, exhausted_policy="stop",
                                stop_after_passes=1)
    with pytest.raises(ValueError):
        StaticMixtureWorkSource([small, big], {"small": 1, "big": 1}, max_repeats=2,
                                stop_after_passes=2)


def test_reshuffle_off_replays_the_same_order():
    small, big = FakeDataset("small", [4, 3]), FakeDataset("big", [500])
    for value in (False, {"small": False}):
        ws = StaticMixtureWorkSource([small, big], {"small": 1, "big": 1}, chunk_size=6,
                                     reshuffle_on_repeat=value, shuffle_within_shard=True)
        passes = assert_exact_passes(stream(drain(ws)), 0, small)
        assert len({tuple(p) for p in passes[:-1]}) == 1


def test_dataset_smaller_than_its_quota_wraps_inside_a_chunk():
    tiny, big = FakeDataset("tiny", [2, 1]), FakeDataset("big", [10**5])
    ws = StaticMixtureWorkSource([tiny, big], {"tiny": 1, "big": 1}, chunk_size=64,
                                 exhausted_policy="repeat")
    c = ws.next_chunk()
    assert int((c.dataset_id == 0).sum()) == 32
    own = [(int(s), int(i)) for d, s, i in zip(c.dataset_id, c.shard_id, c.sample_idx) if d == 0]
    for a in range(0, 30, 3):  # ten and a bit whole epochs, each a permutation
        assert set(own[a:a + 3]) == all_samples(tiny)


def test_compiled_and_numpy_sources_agree(monkeypatch):
    from zephon._ext import compiled

    if compiled("curriculum") is None:
        pytest.skip("curriculum extension not built")
    kw = dict(chunk_size=50, seed=11, shuffle_within_shard=True, shuffle_block_size=16)
    a = [StaticMixtureWorkSource(three_datasets(), W3, **kw).lane_chunk(1, 3, k) for k in range(9)]
    monkeypatch.setenv("ZEPHON_DISABLE_EXT", "1")
    b = [StaticMixtureWorkSource(three_datasets(), W3, **kw).lane_chunk(1, 3, k) for k in range(9)]
    for x, y in zip(a, b):
        assert (x is None) == (y is None)
        if x is not None:
            assert np.array_equal(x.shard_id, y.shard_id)
            assert np.array_equal(x.sample_idx, y.sample_idx)


def test_rare_component_below_one_sample_per_chunk():
    ds = [FakeDataset("rare", [3]), FakeDataset("bulk", [5000])]
    ws = StaticMixtureWorkSource(ds, {"rare": 1, "bulk": 199}, chunk_size=10, seed=2)
    chunks = drain(ws)
    ptrs = stream(chunks)
    assert_exact_passes(ptrs, 0, ds[0])
    assert [len(p) for p in assert_exact_passes(ptrs, 1, ds[1])] == [5000]
    seen = np.cumsum([int((c.dataset_id == 0).sum()) for c in chunks])
    for k, n in enumerate(seen[:-1], start=1):
        assert abs(n - k * 10 / 200) < 1 and math.isfinite(n)
