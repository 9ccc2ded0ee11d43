"""StreamShuffler: a seeded permutation that ignores push boundaries and never shrinks mid-run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kernel_twins import examples, twin_fixture

from zephon.tokens import StreamShuffler, record_keys

MODES = ["streaming", "block", "block_warmup"]


impl = twin_fixture("shuffle")


def keys_for(n: int, seed: int = 0) -> np.ndarray:
    ids = np.arange(n)
    return record_keys(np.zeros(n, np.int64), ids % 3, ids + seed * 1000)


def shuffle_all(sh: StreamShuffler, keys: np.ndarray, cuts) -> list[int]:
    bounds = sorted({0, len(keys), *[c for c in cuts if 0 < c < len(keys)]})
    out = [sh.push(keys[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    return np.concatenate(out + [sh.flush()]).tolist()


@examples(40)
@given(mode=st.sampled_from(MODES), size=st.integers(1, 40), n=st.integers(0, 150),
       cuts=st.lists(st.integers(0, 150), max_size=8), seed=st.integers(0, 2**63))
def test_permutation_independent_of_push_boundaries(impl, mode, size, n, cuts, seed):
    keys = keys_for(n)
    whole = shuffle_all(StreamShuffler(size, seed, mode), keys, [])
    assert sorted(whole) == list(range(n))
    assert shuffle_all(StreamShuffler(size, seed, mode), keys, cuts) == whole
    assert shuffle_all(StreamShuffler(size, seed, mode), keys, range(n)) == whole


@examples(40)
@given(mode=st.sampled_from(MODES), size=st.integers(1, 40), n=st.integers(0, 150),
       data=st.data())
def test_state_round_trip_gives_identical_continuation(impl, mode, size, n, data):
    keys = keys_for(n, 1)
    reference = shuffle_all(StreamShuffler(size, 5, mode, lane_id=3), keys, [])
    cut = data.draw(st.integers(0, n))
    first = StreamShuffler(size, 5, mode, lane_id=3)
    head = first.push(keys[:cut]).tolist()
    state = json.loads(json.dumps(first.get_state()))
    resumed = StreamShuffler.from_state(json.loads(json.dumps(first.config)), state)
    assert resumed.arrivals == cut
    assert head + shuffle_all(resumed, keys[cut:], []) == reference


@pytest.mark.parametrize("size", [1, 2, 16, 100, 1000])
def test_streaming_window_grows_and_is_never_cut_short(impl, size):
    sh = StreamShuffler(size, seed=9)
    keys = keys_for(4 * size + 50)
    pending = []
    for k in keys:
        sh.push(k[None])
        pending.append(sh.pending)
    w0 = 0 if size == 1 else max(1, min(128, size // 16))
    assert pending[0] == min(1, w0)
    assert all(b >= a for a, b in zip(pending, pending[1:]))  # never shrinks mid-run
    assert pending[-1] == size and pending.index(size) <= 2 * size
    assert len(sh.flush()) == size and sh.pending == 0 and sh.arrivals == 0


@pytest.mark.parametrize("mode", ["block", "block_warmup"])
def test_blocks_are_full_permutations_of_their_arrivals(impl, mode):
    sh = StreamShuffler(64, seed=2, algorithm=mode, warmup_growth=2.0)
    keys = keys_for(500)
    emitted_groups = [g for g in (sh.push(k[None]) for k in keys) if len(g)]
    sizes = [len(g) for g in emitted_groups]
    if mode == "block":
        assert sizes == [64] * (500 // 64)
    else:
        assert sizes[:4] == [4, 8, 16, 32] and set(sizes[4:]) == {64}
    start = 0
    for g in emitted_groups:
        assert sorted(g.tolist()) == list(range(start, start + len(g)))
        start += len(g)
    assert sorted(sh.flush().tolist()) == list(range(start, 500))


def test_order_depends_on_seed_lane_and_identity(impl):
    keys = keys_for(300)
    base = shuffle_all(StreamShuffler(32, seed=1), keys, [])
    assert base != list(range(300))
    assert shuffle_all(StreamShuffler(32, seed=2), keys, []) != base
    assert shuffle_all(StreamShuffler(32, seed=1, lane_id=1), keys, []) != base
    assert shuffle_all(StreamShuffler(32, seed=1), keys_for(300, seed=7), []) != base
    # mixing: records leave well away from their arrival position
    displacement = np.abs(np.array(base) - np.arange(300))
    assert displacement.mean() > 8


def test_record_keys_are_identity_hashes(impl):
    a = record_keys([0, 0, 1], [0, 0, 0], [5, 5, 5], [[0, -1], [1, -1], [0, -1]])
    assert a.dtype == np.uint64 and len(set(a.tolist())) == 3
    np.testing.assert_array_equal(a, record_keys([0, 0, 1], [0, 0, 0], [5, 5, 5], [0, 1, 0]))
    assert record_keys([0], [0], [5])[0] != a[0]


def test_validation():
    with pytest.raises(ValueError, match="algorithm"):
        StreamShuffler(algorithm="reservoir")
    with pytest.raises(ValueError, match="buffer_size"):
        StreamShuffler(0)
    with pytest.raises(ValueError, match="warmup_growth"):
        StreamShuffler(8, algorithm="block_warmup", warmup_growth=0.5)
    assert StreamShuffler(None).buffer_size == 8192
    sh = StreamShuffler(4)
    sh.push(keys_for(3))
    state = sh.get_state()
    with pytest.raises(ValueError, match="algorithm"):
        StreamShuffler.from_state({**sh.config, "algorithm": "block"}, state)
    with pytest.raises(ValueError, match="malformed"):
        StreamShuffler.from_state(sh.config, {**state, "buffer": [[99, 1]]})
    with pytest.raises(ValueError, match="malformed"):
        StreamShuffler.from_state(sh.config, {**state, "window": 10})
