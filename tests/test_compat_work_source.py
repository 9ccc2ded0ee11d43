"""A user-written WorkSource speaking the reference's protocol (``clone_for_lane`` then
``next_chunk()`` until None, ``state_dict``/``load_state_dict``), and ``MixtureReadConfig``."""

from __future__ import annotations

import json

import pytest
from compat_sources import AlternatingSource, StatefulSource

from zephon import Pipeline
from zephon.work import (
    ComponentOrder,
    MixtureReadConfig,
    MixtureReadMode,
    StaticMixtureWorkSource,
    WorkChunk,
)


def texts(unit) -> list[str]:
    return [r.payload["text"] for r in unit.records]


def build(source, workers: int = 0, shuffle: bool = True, **opts) -> Pipeline:
    p = Pipeline(source).options(num_workers=workers, canonical_replicas=2, micro_batch_size=3,
                                 **opts)
    if shuffle:
        p.shuffle(buffer_size=5, seed=1)
    return p.batch(4, drop_last=False)


def test_a_streaming_user_source_is_read_lane_by_lane_in_chunk_order():
    got = [texts(b) for b in build(StatefulSource(), shuffle=False)]
    # lane 0 reads global chunks 0, 2, 4...; lane 1 chunks 1, 3, 5...; batches alternate lanes;
    # a chunk of 4+4 pointers interleaves its two components (SWRR, a first on ties)
    assert got[0] == ["a0", "b0", "a1", "b1"] and got[1] == ["a4", "b4", "a5", "b5"]
    assert got[2] == ["a2", "b2", "a3", "b3"]
    flat = sorted(t for b in got for t in b)
    assert flat == sorted([f"a{i}" for i in range(60)] + [f"b{i}" for i in range(60)])


def test_process_workers_give_the_same_stream():
    assert ([texts(b) for b in build(StatefulSource(), workers=2)]
            == [texts(b) for b in build(StatefulSource())])


@pytest.mark.parametrize("cls", [StatefulSource, AlternatingSource])
@pytest.mark.parametrize("cut", [1, 5, 12])
def test_checkpoint_restores_the_exact_remaining_stream(cls, cut):
    full = [texts(b) for b in build(cls())]
    p = build(cls())
    it = iter(p)
    head = [texts(next(it)) for _ in range(cut)]
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    q = build(cls()).restore(state)
    assert head + [texts(b) for b in q] == full


def test_a_stateful_source_resumes_from_its_saved_state_not_from_the_start():
    p = build(StatefulSource(), shuffle=False)
    it = iter(p)
    for _ in range(20):
        next(it)
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    points = [lane["base"]["source"] for lane in state["lanes"].values()]
    assert all(pt["chunk"] >= 4 and pt["state"]["pos"] >= 7 for pt in points), points
    StatefulSource.pulls = 0
    rest = list(build(StatefulSource(), shuffle=False).restore(state))
    assert rest
    # 15 global chunks; each lane clone restarted at its saved position (a replay from the
    # start would pull every chunk of both lanes again)
    assert StatefulSource.pulls <= 2 * 4 + 2, StatefulSource.pulls


class Broken(StatefulSource):
    def __init__(self, flaw: str) -> None:
        super().__init__()
        self.flaw = flaw

    def component_ids(self) -> dict[str, int]:
        return {"a": 0, "b": 0} if self.flaw == "ids" else super().component_ids()

    def next_chunk(self):
        chunk = super().next_chunk()
        if self.flaw == "type":
            return chunk.pointers() if chunk is not None else None
        if self.flaw == "exhausted" and chunk is not None:
            return WorkChunk(components=chunk.components, source_exhausted=("b",))
        return chunk


@pytest.mark.parametrize("flaw, error, words", [
    ("ids", ValueError, "unique int"),
    ("type", TypeError, "return a WorkChunk"),
    ("exhausted", ValueError, "declared them exhausted"),
])
def test_protocol_violations_are_reported(flaw, error, words):
    with pytest.raises(error, match=words):
        list(build(Broken(flaw)))


def test_objects_without_the_protocol_are_still_refused():
    with pytest.raises(TypeError, match="next_chunk"):
        Pipeline(object())


# -- MixtureReadConfig ---------------------------------------------------------------------------


def test_read_config_enums_and_defaults():
    cfg = MixtureReadConfig()
    assert cfg.mode is MixtureReadMode.WEIGHTED_ROUND_ROBIN and cfg.seed is None
    assert cfg.within_component is ComponentOrder.AS_IS and cfg.precompute is False
    assert MixtureReadMode("weighted_random") is MixtureReadMode.WEIGHTED_RANDOM
    assert MixtureReadConfig(within_component="shuffle").within_component is ComponentOrder.SHUFFLE
    with pytest.raises(ValueError):
        MixtureReadConfig(mode="round_robin")
    with pytest.raises(AttributeError):
        cfg.seed = 3  # frozen


def _chunk() -> WorkChunk:
    return WorkChunk(components={"a": [(0, 0, i) for i in range(30)],
                                 "b": [(1, 0, i) for i in range(10)]}, seed=7)


def test_iter_samples_follows_the_config():
    chunk = _chunk()
    plain = list(chunk.iter_samples())
    assert plain == chunk.pointers()
    shuffled = list(chunk.iter_samples(MixtureReadConfig(within_component=ComponentOrder.SHUFFLE)))
    # same component at every position, each component's pointers permuted
    assert [p[0] for p in shuffled] == [p[0] for p in plain]
    assert sorted(shuffled) == sorted(plain) and shuffled != plain
    rnd = list(chunk.iter_samples(MixtureReadConfig(mode=MixtureReadMode.WEIGHTED_RANDOM,
                                                    seed=3)))
    assert sorted(rnd) == sorted(plain)
    assert [p for p in rnd if p[0] == 1] == [p for p in plain if p[0] == 1]  # AS_IS within
    assert [p[0] for p in rnd] != [p[0] for p in plain]
    assert rnd == list(chunk.iter_samples(MixtureReadConfig(mode="weighted_random", seed=3)))
    assert chunk.sample_at(5, MixtureReadConfig(mode="weighted_random", seed=3)) == rnd[5]


def test_weighted_random_draws_follow_the_counts():
    chunk = WorkChunk(components={"a": [(0, 0, i) for i in range(3000)],
                                  "b": [(1, 0, i) for i in range(1000)]}, seed=1)
    comps = [p[0] for p in chunk.iter_samples(MixtureReadConfig(mode="weighted_random"))]
    assert 0.2 < sum(comps[:400]) / 400 < 0.3  # b's share a quarter from the start
    assert sum(comps) == 1000


def _mixture_pipeline(config=None) -> Pipeline:
    from compat_sources import datasets

    ws = StaticMixtureWorkSource(datasets(), {"a": 0.5, "b": 0.5}, chunk_size=20, seed=2)
    p = Pipeline(ws).options(num_workers=0, micro_batch_size=8)
    if config is not None:
        p.options(mixture_config=config)
    return p.batch(4, drop_last=False)


def test_options_mixture_config_changes_the_read_order_and_checkpoints_know_it():
    plain = [texts(b) for b in _mixture_pipeline()]
    cfg = MixtureReadConfig(within_component=ComponentOrder.SHUFFLE, seed=5)
    shuffled = [texts(b) for b in _mixture_pipeline(cfg)]
    assert shuffled != plain
    assert sorted(sum(shuffled, [])) == sorted(sum(plain, []))
    p = _mixture_pipeline(cfg)
    it = iter(p)
    head = [texts(next(it)) for _ in range(7)]
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    assert head + [texts(b) for b in _mixture_pipeline(cfg).restore(state)] == shuffled
    with pytest.raises(RuntimeError, match="mixture_config"):
        _mixture_pipeline().restore(state)
    with pytest.raises(TypeError):
        _mixture_pipeline().options(mixture_config="shuffle")
