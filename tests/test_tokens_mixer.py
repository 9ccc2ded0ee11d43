"""MixtureBalancer: holds a target mixture, conserves records, resumes exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kernel_twins import examples, twin_fixture

from zephon.tokens import MixtureBalancer, quantize_shares

impl = twin_fixture("shuffle")


def source(n: int, p_first: float, seed: int = 0, components: int = 2):
    rng = np.random.default_rng(seed)
    probs = [p_first] + [(1 - p_first) / (components - 1)] * (components - 1)
    comps = rng.choice(components, size=n, p=probs).astype(np.int64)
    return comps, rng.integers(1, 400, n), np.arange(n, dtype=np.int64)


def feed(mb: MixtureBalancer, comps, weights, ids, block: int = 64) -> list[int]:
    out = []
    for a in range(0, len(ids), block):
        out += mb.push(comps[a:a + block], weights[a:a + block], ids[a:a + block]).tolist()
    return out


def test_holds_fifty_fifty_from_sixty_forty_by_samples(impl):
    comps, _, ids = source(4000, 0.6)
    mb = MixtureBalancer({0: 1.0, 1: 1.0}, max_buffer_size=1000)
    out = feed(mb, comps, np.ones(len(ids), np.int64), ids)
    share = np.mean(comps[out] == 0)
    assert abs(share - 0.5) <= 0.05, share
    # every prefix after a short warm-up stays on target too
    prefix = np.cumsum(comps[out] == 0) / np.arange(1, len(out) + 1)
    assert np.all(np.abs(prefix[200:] - 0.5) <= 0.05)
    flushed = mb.flush()
    assert sorted(out + flushed.emitted.tolist()) == list(range(4000))
    assert len(flushed.dropped) == 0 and not mb.has_pending()


def test_token_weighting_tracks_token_shares(impl):
    comps, weights, ids = source(4000, 0.6, seed=3)
    mb = MixtureBalancer([1.0, 1.0], max_buffer_size=1000)
    out = np.array(feed(mb, comps, weights, ids))
    tokens = np.bincount(comps[out], weights=weights[out], minlength=2)
    assert abs(tokens[0] / tokens.sum() - 0.5) <= 0.05
    np.testing.assert_array_equal(mb.emitted_weight(), tokens.astype(np.int64))


def test_strict_mode_is_exact_and_drops_the_surplus(impl):
    comps, _, ids = source(6000, 0.6, seed=1)
    mb = MixtureBalancer([1.0, 3.0], max_buffer_size=None)
    ones = np.ones(len(ids), np.int64)
    out = feed(mb, comps, ones, ids)
    flushed = mb.flush()
    out += flushed.emitted.tolist()
    counts = np.bincount(comps[out], minlength=2)
    assert abs(counts[1] - 3 * counts[0]) <= 3
    assert sorted(out + flushed.dropped.tolist()) == list(range(6000))
    assert np.all(np.diff(flushed.dropped) > 0)   # dropped in arrival order


def test_locally_lopsided_stream_is_smoothed(impl):
    comps = np.repeat(np.tile([0, 1], 20), 150)        # runs of 150 of each component
    ids = np.arange(len(comps))
    mb = MixtureBalancer([1.0, 1.0], max_buffer_size=1000)
    out = np.array(feed(mb, comps, np.ones(len(ids), np.int64), ids, block=7))
    windows = (comps[out][: len(out) // 100 * 100] == 0).reshape(-1, 100).mean(axis=1)
    assert np.all(np.abs(windows[2:] - 0.5) <= 0.05)


def test_obsolete_components_get_their_reserved_share(impl):
    comps, _, ids = source(3000, 0.4, seed=5, components=3)   # component 2 is not in the target
    mb = MixtureBalancer([1.0, 1.0], max_buffer_size=400, obsolete_drain_rate=0.1)
    out = np.array(feed(mb, comps, np.ones(len(ids), np.int64), ids))
    obsolete_share = np.mean(comps[out] == 2)
    assert 0.05 <= obsolete_share <= 0.35
    flushed = mb.flush()
    assert sorted(out.tolist() + flushed.emitted.tolist()) == list(range(3000))


@examples(40)
@given(n=st.integers(0, 400), max_buf=st.sampled_from([None, 1, 5, 50]),
       ratio=st.sampled_from([0.0, 0.5, 0.8, 1.0]), data=st.data())
def test_state_round_trip_and_push_granularity(impl, n, max_buf, ratio, data):
    comps, weights, ids = source(n, 0.55, seed=n, components=3)
    cfg = {"target": [2.0, 1.0, 0.0], "max_buffer_size": max_buf, "drain_target_ratio": ratio}
    ref = MixtureBalancer(**cfg)
    reference = feed(ref, comps, weights, ids, block=1)
    ref_flush = ref.flush()
    cut = data.draw(st.integers(0, n))
    first = MixtureBalancer(**cfg)
    head = feed(first, comps[:cut], weights[:cut], ids[:cut], block=max(1, cut))
    state = json.loads(json.dumps(first.get_state()))
    resumed = MixtureBalancer.from_state(json.loads(json.dumps(first.config)), state)
    tail = feed(resumed, comps[cut:], weights[cut:], ids[cut:], block=13)
    assert head + tail == reference
    flushed = resumed.flush()
    assert flushed.emitted.tolist() == ref_flush.emitted.tolist()
    assert flushed.dropped.tolist() == ref_flush.dropped.tolist()


def test_set_target_and_shares(impl):
    shares = quantize_shares([1, 0, 1e-9, 3])
    assert shares.sum() == 1 << 20 and shares[1] == 0 and shares[2] == 1
    mb = MixtureBalancer([1.0, 1.0], max_buffer_size=100)
    mb.set_target({1: 1.0})                             # component 0 becomes obsolete
    out = mb.push([0, 1, 1], [1, 1, 1], [10, 11, 12])
    assert out.tolist() == [11, 12]
    assert mb.pending == 1 and mb.realized_shares().tolist() == [0.0, 1.0]


@pytest.mark.parametrize("kwargs, match", [
    ({"target": []}, "target"),
    ({"target": [0.0, 0.0]}, "target"),
    ({"target": [1.0, -1.0]}, "target"),
    ({"target": [1.0], "max_buffer_size": 0}, "max_buffer_size"),
    ({"target": [1.0], "drain_target_ratio": 1.5}, "drain_target_ratio"),
    ({"target": [1.0], "obsolete_drain_rate": -0.1}, "obsolete_drain_rate"),
])
def test_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MixtureBalancer(**kwargs)
    mb = MixtureBalancer([1.0])
    with pytest.raises(ValueError, match="weights"):
        mb.push([0], [-1], [0])
    with pytest.raises(ValueError, match="component"):
        mb.push([-1], [1], [0])
    with pytest.raises(ValueError, match="malformed"):
        MixtureBalancer.from_state(mb.config, {**mb.get_state(), "shares": [5]})
