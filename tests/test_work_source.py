"""The WorkSource API: lanes, random access, checkpoints, validation, token-aware weights."""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pytest

from zephon.work import StaticMixtureWorkSource, TokenEstimation, WorkChunk, WorkSource


class FakeDataset:
    def __init__(self, name, counts, bytes_per_sample=None):
        self.name = name
        self._counts = np.asarray(counts, dtype=np.int64)
        self._bps = bytes_per_sample

    def ids(self):
        return np.arange(len(self._counts), dtype=np.int64)

    def counts(self):
        return self._counts

    def total(self):
        return int(self._counts.sum())

    def raw_bytes(self):
        return None if self._bps is None else self._counts * self._bps


def datasets():
    return [FakeDataset("code", [30, 20, 50]), FakeDataset("web", [70] * 6),
            FakeDataset("math", [9, 11])]


W = {"code": 0.25, "web": 0.6, "math": 0.15}


def source(**kw):
    kw.setdefault("chunk_size", 16)
    return StaticMixtureWorkSource(datasets(), W, **kw)


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return (a.global_index == b.global_index and a.chunk_id == b.chunk_id
            and all(np.array_equal(getattr(a, f), getattr(b, f))
                    for f in ("dataset_id", "shard_id", "sample_idx")))


# -- lanes and random access ------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["modulo", "permute"])
@pytest.mark.parametrize("lanes", [1, 2, 3, 8])
def test_random_access_equals_sequential_and_lanes_partition_the_stream(mode, lanes):
    ws = source(seed=5, lane_assignment=mode)
    n_global = ws.num_chunks()
    seen = []
    for lane in range(lanes):
        clone = ws.clone_for_lane(lane, lanes)
        seq = []
        while (c := clone.next_chunk()) is not None:
            seq.append(c)
        assert len(seq) == clone.num_chunks()
        assert sum(len(c) for c in seq) == clone.total_samples
        for j in (0, 1, len(seq) // 2, len(seq) - 1):
            assert same(ws.lane_chunk(lane, lanes, j), seq[j])
        assert ws.lane_chunk(lane, lanes, len(seq)) is None
        for j, c in enumerate(seq):
            assert c.lane_id == lane and c.chunk_id == j
            assert c.global_index // lanes == j  # one chunk of each block of L
            assert same(c, _replace(ws.lane_chunk(0, 1, c.global_index), j, c.global_index))
        seen += [c.global_index for c in seq]
    assert sorted(seen) == list(range(n_global))


def _replace(chunk, chunk_id, g):
    return WorkChunk(chunk.dataset_id, chunk.shard_id, chunk.sample_idx, chunk_id=chunk_id,
                     global_index=g)


def test_permute_routing_differs_from_modulo_and_is_seeded():
    a = source(seed=1, exhausted_policy="repeat")
    b = source(seed=1, exhausted_policy="repeat", lane_assignment="modulo")
    c = source(seed=2, exhausted_policy="repeat")
    ga = [a.lane_chunk(0, 8, j).global_index for j in range(10)]
    gb = [b.lane_chunk(0, 8, j).global_index for j in range(10)]
    gc = [c.lane_chunk(0, 8, j).global_index for j in range(10)]
    assert gb == [8 * j for j in range(10)] and ga != gb and ga != gc


def test_clone_rules():
    ws = source()
    clone = ws.clone_for_lane(1, 2)
    assert (clone.lane_id, clone.canonical_replicas) == (1, 2) and (ws.lane_id, ws.canonical_replicas) == (0, 1)
    with pytest.raises(RuntimeError):
        clone.clone_for_lane(0, 2)
    for lane, lanes in ((2, 2), (-1, 2), (0, 0), (True, 2)):
        with pytest.raises(ValueError):
            ws.clone_for_lane(lane, lanes)
    ws.next_chunk()
    assert ws.clone_for_lane(0, 1).next_chunk().chunk_id == 0  # clones start at their lane's start


def test_pickles_with_its_position():
    ws = source(seed=4).clone_for_lane(1, 2)
    ws.next_chunk()
    copy = pickle.loads(pickle.dumps(ws))
    assert same(copy.next_chunk(), ws.next_chunk())
    with pytest.raises(RuntimeError):
        copy.clone_for_lane(0, 2)


def test_terminal_none_has_no_side_effects():
    ws = source(exhausted_policy="stop")
    n = ws.num_chunks()
    for _ in range(n):
        assert ws.next_chunk() is not None
    state = ws.state_dict()
    assert ws.next_chunk() is None and ws.next_chunk() is None
    assert ws.state_dict() == state


# -- checkpoints ------------------------------------------------------------------------------

@pytest.mark.parametrize("lanes", [1, 4])
def test_state_round_trip_continues_the_exact_sequence(lanes):
    kw = dict(seed=3, shuffle_within_shard=True, shuffle_block_size="auto")
    ref = source(**kw).clone_for_lane(lanes - 1, lanes)
    expected = [ref.next_chunk() for _ in range(12)]
    run = source(**kw).clone_for_lane(lanes - 1, lanes)
    for _ in range(5):
        run.next_chunk()
    state = json.loads(json.dumps(run.state_dict()))  # JSON-serialisable and small
    assert len(json.dumps(state)) < 2000
    resumed = source(**kw).clone_for_lane(lanes - 1, lanes)
    resumed.load_state_dict(state)
    for k in range(5, 12):
        assert same(resumed.next_chunk(), expected[k])


def test_checkpoint_configuration_wins_over_defaults():
    run = source(seed=9, exhausted_policy="stop", shuffle_block_size="auto", chunk_size=8)
    for _ in range(3):
        run.next_chunk()
    state = run.state_dict()
    fresh = source()  # other seed, chunk size, policy and block size, all left at defaults
    fresh.load_state_dict(state)
    assert fresh.resolved_block_sizes == run.resolved_block_sizes
    assert fresh.chunk_size == 8 and fresh.seed == 9
    while (c := run.next_chunk()) is not None:
        assert same(fresh.next_chunk(), c)
    assert fresh.next_chunk() is None


def test_resolved_block_size_is_frozen_in_checkpoints():
    def build(a_counts):
        return StaticMixtureWorkSource([FakeDataset("a", a_counts), FakeDataset("b", [100] * 10)],
                                       {"a": 1, "b": 1}, chunk_size=16, shuffle_block_size="auto")

    state = build([10, 20]).state_dict()
    grown = build([10, 20, 120])  # a new, larger shard raises "auto" from 800 to 960
    assert state["block_sizes"] == {"a": 30, "b": 800}
    assert grown.resolved_block_sizes == {"a": 150, "b": 960}
    with pytest.warns(UserWarning, match="changed size"):
        grown.load_state_dict(state)
    assert grown.resolved_block_sizes == {"a": 30, "b": 800}


def test_restore_errors_name_what_differs():
    state = source().clone_for_lane(1, 4).state_dict()
    with pytest.raises(RuntimeError, match="lane_id"):
        source().clone_for_lane(2, 4).load_state_dict(state)
    with pytest.raises(RuntimeError, match="canonical_replicas"):
        source().clone_for_lane(1, 8).load_state_dict(state)
    other = StaticMixtureWorkSource([FakeDataset("code", [5]), FakeDataset("books", [5])],
                                    {"code": 1, "books": 1}).clone_for_lane(1, 4)
    with pytest.raises(RuntimeError, match=r"missing \['web', 'math'\], extra \['books'\]"):
        other.load_state_dict(state)
    reordered = StaticMixtureWorkSource(datasets()[::-1], W).clone_for_lane(1, 4)
    with pytest.raises(RuntimeError, match="order"):
        reordered.load_state_dict(state)
    explicit = source(exhausted_policy="repeat").clone_for_lane(1, 4)
    with pytest.raises(RuntimeError, match="exhausted_policy"):
        source(exhausted_policy="stop").clone_for_lane(1, 4).load_state_dict(
            explicit.state_dict())
    tokens = source(token_estimation=TokenEstimation(primer=0.3)).clone_for_lane(1, 4)
    with pytest.raises(RuntimeError, match="allocat"):
        tokens.load_state_dict(state)


# -- API surface ------------------------------------------------------------------------------

def test_work_source_surface():
    ws = source()
    assert isinstance(ws, WorkSource)
    assert ws.chunk_size_hint() == 16 and not ws.supports_indexing()
    assert ws.component_ids() == {"code": 0, "web": 1, "math": 2}
    assert [d.name for d in ws.datasets_by_id.values()] == ["code", "web", "math"]
    with pytest.raises(TypeError):
        ws.sample_id_at(0)
    assert isinstance(len(ws), int) and len(ws) == ws.total_samples
    c = ws.next_chunk()
    assert len(c) == 16 and c.target_mixture is None and c.global_index == 0
    assert sum(len(v) for v in c.components.values()) == 16
    assert list(c.components) == ["code", "web", "math"] and c.counts()["web"] == 10
    assert all(isinstance(x, int) for x in c.components["web"][0])
    with pytest.raises(ValueError):
        c.sample_idx[0] = 1
    assert ws.next_chunk().seed != c.seed
    assert "StaticMixtureWorkSource" in repr(ws)


@pytest.mark.parametrize("kwargs", [
    dict(chunk_size=0), dict(chunk_size=True), dict(chunk_size=2.5), dict(seed="x"),
    dict(lane_assignment="round_robin"), dict(shuffle_block_size=True),
    dict(shuffle_block_size=0), dict(shuffle_block_size="big"), dict(shuffle_shards="yes"),
    dict(exhausted_policy="drop"), dict(exhausted_policy={"nope": "stop"}),
    dict(exhausted_policy="spread"), dict(max_repeats=-1), dict(max_repeats=True),
    dict(max_repeats={"nope": 1}), dict(stop_after_passes=0), dict(stop_after_passes=True),
    dict(exhausted_policy={"code": "stop"}, stop_after_passes=1),
    dict(reshuffle_on_repeat="no"), dict(reshuffle_on_repeat={"nope": False}),
    dict(token_estimation="measure"),
])
def test_constructor_validation(kwargs):
    with pytest.raises(ValueError):
        source(**kwargs)


def test_dataset_validation():
    with pytest.raises(ValueError, match="empty"):
        StaticMixtureWorkSource([], {})
    with pytest.raises(ValueError, match="unique"):
        StaticMixtureWorkSource([FakeDataset("a", [3]), FakeDataset("a", [3])], {"a": 1})
    with pytest.raises(ValueError, match="'b' is empty"):
        StaticMixtureWorkSource([FakeDataset("a", [3]), FakeDataset("b", [0, 0])],
                                {"a": 1, "b": 1})


def test_termination_table():
    assert source().total_samples < float("inf")  # default: one-pass floor
    assert source(exhausted_policy="repeat").total_samples == float("inf")
    assert source(stop_after_passes=None).total_samples == float("inf")
    two = source(stop_after_passes=2).total_samples
    assert two > source().total_samples
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ws = source(exhausted_policy={"math": "stop"}, max_repeats={"math": 3})
    assert any("ignored" in str(w.message) for w in caught)
    assert ws.total_samples == source(exhausted_policy={"math": "stop"}).total_samples


# -- token-aware mixtures ---------------------------------------------------------------------

def test_token_estimation_validation():
    TokenEstimation(primer={"code": 0.3}, calibration_shards_min=2, calibration_shards_max=2)
    for bad in (dict(primer="guess"), dict(primer=0.0), dict(primer=float("nan")),
                dict(primer={"code": -1}), dict(primer=True), dict(calibration_samples=0),
                dict(calibration_shards_min=5, calibration_shards_max=4),
                dict(fallback_tokens_per_byte=0), dict(measure=3)):
        with pytest.raises(ValueError):
            TokenEstimation(**bad)
    with pytest.raises(ValueError, match="unknown"):
        source(token_estimation=TokenEstimation(primer={"books": 0.2}))


def test_token_aware_allocation():
    ds = [FakeDataset("short", [10**6], bytes_per_sample=100),
          FakeDataset("long", [10**6], bytes_per_sample=400)]
    ws = StaticMixtureWorkSource(ds, {"short": 1, "long": 1}, chunk_size=1000,
                                 token_estimation=TokenEstimation())
    assert ws.datasets_to_measure() == ["short", "long"]
    for call in (ws.next_chunk, lambda: ws.total_samples):
        with pytest.raises(RuntimeError, match="not primed"):
            call()
    ws.set_token_ratios({"short": 0.25, "long": 0.25})
    c = ws.next_chunk()
    # Equal token shares: the long documents get a quarter as many pointers.
    assert np.bincount(c.dataset_id).tolist() == [800, 200]
    assert c.target_mixture == {"short": 0.5, "long": 0.5}
    with pytest.raises(RuntimeError):
        ws.set_token_ratios({"short": 0.25, "long": 0.25})
    state = ws.state_dict()
    assert state["allocation"] == "tokens" and state["token_ratios"] == {"short": 0.25, "long": 0.25}
    again = StaticMixtureWorkSource(ds, {"short": 1, "long": 1}, chunk_size=1000,
                                    token_estimation=TokenEstimation())
    again.load_state_dict(state)  # primed from the checkpoint, never re-measured
    assert again.datasets_to_measure() == []
    assert same(again.next_chunk(), ws.next_chunk())
    pinned = StaticMixtureWorkSource(ds, {"short": 1, "long": 1}, chunk_size=1000,
                                     token_estimation=TokenEstimation(primer=0.5))
    assert pinned.datasets_to_measure() == [] and len(pinned.next_chunk()) == 1000


def test_with_real_in_memory_datasets():
    io = pytest.importorskip("zephon.io")
    code = io.Dataset.from_dict("code", {0: [f"c{i}" for i in range(7)], 3: ["c7", "c8"]})
    web = io.Dataset.from_dict("web", {1: [f"w{i}" for i in range(20)]})
    ws = StaticMixtureWorkSource([code, web], {"code": 1, "web": 2}, chunk_size=6, seed=42,
                                 shuffle_within_shard=True)
    seen = []
    while (c := ws.next_chunk()) is not None:
        for d, s, i in c.pointers():
            seen.append(ws.datasets_by_id[d].read_payloads(s, [i])[0])
    web_seen = [p for p in seen if p.startswith("w")]
    assert sorted(web_seen) == sorted(f"w{i}" for i in range(20))  # exactly one pass of web
    assert seen[-1].startswith("w") and len(seen) == ws.total_samples
