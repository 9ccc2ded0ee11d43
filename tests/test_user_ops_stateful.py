"""stateful_transform: per-lane state, serial pushes, flush, should_flush, transform, and exact
resume through it (also from between the two halves of a pair)."""

from __future__ import annotations

import pytest
from test_user_ops_helpers import (
    held_counts,
    make_pipeline,
    pair_flush,
    pair_init,
    pair_push,
    resume_matches,
    stream,
)

from zephon.ops import UserFunctionError
from zephon.types import SampleRecord

CUTS = [0, 1, 2, 3, 4, 5, 8, 13, 21]


def pairs(workers: int = 0, micro: int = 5, *, batch: int | None = 3, transform: bool = True):
    p = make_pipeline(workers, micro).stateful_transform(
        "pairs", init_state=pair_init, push=pair_push, flush=pair_flush,
        transform=(lambda rs: [SampleRecord(r.meta, {**r.payload, "len": len(r.payload["text"])})
                               for r in rs]) if transform else None,
        preserves_cursor_order=False)
    return p.batch(batch, drop_last=False) if batch else p


def test_pairs_two_in_one_out_same_stream_with_0_and_2_workers():
    inline = stream(pairs(0))
    records = stream(pairs(0, batch=None))
    assert all('"len": ' in s[-1] and "+" in s[-1] for s in records[:-2])
    assert len(records) > 60
    assert stream(pairs(2)) == inline


def test_state_is_per_lane_and_pushes_are_serial_in_order():
    seen: dict[int, list] = {}

    def push(state, records):
        for r in records:
            seen.setdefault(r.meta.lane_id, []).append((r.meta.chunk_id, r.meta.chunk_offset))
            assert state["lane"] in (None, r.meta.lane_id)
            state = {"lane": r.meta.lane_id, "n": state["n"] + 1}
        return state, records

    out = list(make_pipeline(0, lanes=3).stateful_transform(
        "order", init_state=lambda: {"lane": None, "n": 0}, push=push))
    assert set(seen) == {0, 1, 2} and len(out) == sum(map(len, seen.values()))
    for lane in seen.values():
        assert lane == sorted(lane)  # each lane's records arrive in cursor order


@pytest.mark.parametrize("batch", [None, 3])
def test_resume_from_between_the_two_halves_of_a_pair(batch):
    def build(**kw):
        return pairs(batch=batch, **kw)

    states = resume_matches(build, CUTS, restore_opts={"micro": 7})
    halves = [n for s in states for n in held_counts(s, 0)]
    assert max(halves) == 1  # some checkpoints fall between the two halves of a pair ...
    assert set(halves) <= {0, 1}  # ... and the replay window never grows past one record
    if batch:  # the batch holds pairs: restored from their recipes
        assert max(n for s in states for n in held_counts(s, 2)) >= 1


def test_resume_between_halves_into_the_process_engine():
    resume_matches(lambda **kw: pairs(**kw), [1, 5], restore_opts={"workers": 2})


def _context(*, protocol: bool):
    """A state that never returns to init: each record learns the previous record's text."""
    def push(state, records):
        out = []
        for r in records:
            prev = state.payload["text"] if state is not None else ""
            out.append(SampleRecord(r.meta, {**r.payload, "prev": prev}))
            state = r
        return state, out

    extra = dict(state_records=lambda s: [] if s is None else [s],
                 state_from_records=lambda rs: rs[-1] if rs else None) if protocol else {}

    def build(**kw):
        return (make_pipeline(**kw).stateful_transform(
            "context", init_state=lambda: None, push=push, flush=lambda s: [], **extra)
                .batch(4, drop_last=False))
    return build


def test_state_that_never_resets_is_replayed_exactly():
    states = resume_matches(_context(protocol=False), [3, 9], restore_opts={"micro": 3})
    assert max(held_counts(states[-1], 0)) > 10  # the window is everything since the start


def test_state_records_protocol_gives_o1_checkpoints():
    states = resume_matches(_context(protocol=True), [1, 3, 9, 14], restore_opts={"micro": 3})
    assert {n for s in states for n in held_counts(s, 0)} <= {0, 1}


def test_should_flush_emits_and_starts_over():
    def push(state, records):
        return state + list(records), []

    def flush(state):
        first = state[0]
        return [SampleRecord(first.meta, {"text": "/".join(r.payload["text"] for r in state),
                                          "n": len(state)})]

    def build(**kw):
        return (make_pipeline(**kw).stateful_transform(
            "triples", init_state=list, push=push, flush=flush,
            should_flush=lambda s: len(s) == 3, preserves_cursor_order=False)
            .batch(2, drop_last=False))

    units = [u for b in build() for u in b.records]
    assert units and sum(u.payload["n"] != 3 for u in units) <= 2  # one remainder per lane
    resume_matches(build, [1, 2, 5, 11], restore_opts={"micro": 4})


def test_buffering_without_flush_loses_records_with_a_warning():
    p = make_pipeline(0).stateful_transform("no-flush", init_state=pair_init, push=pair_push)
    with pytest.warns(UserWarning, match="no flush"):
        paired = list(p)
    with_flush = list(make_pipeline(0).stateful_transform(
        "with-flush", init_state=pair_init, push=pair_push, flush=pair_flush))
    assert len(paired) < len(with_flush)


def test_exception_in_push_names_operator_and_sample():
    def push(state, records):
        for r in records:
            if r.payload["text"] == "b5":
                raise RuntimeError("cannot pair this")
        return state, records

    with pytest.raises(UserFunctionError) as e:
        list(make_pipeline(0).stateful_transform("picky", init_state=pair_init, push=push))
    assert e.value.op_name == "picky" and e.value.sample_id == (1, 0, 5)
    assert "picky" in str(e.value) and "(1, 0, 5)" in str(e.value)


def test_exception_in_flush_names_operator():
    def flush(state):
        raise ValueError("flush failed")

    with pytest.raises(UserFunctionError, match="operator explode-at-end"):
        list(make_pipeline(0).stateful_transform("explode-at-end", init_state=pair_init,
                                                 push=pair_push, flush=flush))


def test_wrong_returns_are_refused():
    with pytest.raises(TypeError, match=r"\(new_state, outputs\)"):
        list(make_pipeline(0).stateful_transform("a", init_state=list,
                                                 push=lambda s, rs: rs))
    with pytest.raises(TypeError, match="Unsupported element type dict"):
        list(make_pipeline(0).stateful_transform(
            "b", init_state=list, push=lambda s, rs: (s, [r.payload for r in rs])))
    with pytest.raises(ValueError, match="both"):
        make_pipeline(0).stateful_transform("c", init_state=list, push=pair_push,
                                            state_records=list)
    with pytest.warns(UserWarning, match="after batch"):
        p = make_pipeline(0).batch(2).stateful_transform("d", init_state=list, push=pair_push)
    with pytest.raises(TypeError, match="before batch"):
        list(p)
