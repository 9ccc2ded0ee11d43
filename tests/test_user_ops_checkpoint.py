"""Checkpoints through user operators: records they hold, and rows they built that wait in a
downstream buffer, are named by cursor and restored exactly, like the built-ins'."""

from __future__ import annotations

import pytest
from test_user_ops_helpers import (
    ByParity,
    GroupedPairs,
    WarmUp,
    counting3,
    group_sum,
    held_counts,
    make_pipeline,
    pair_flush,
    pair_init,
    pair_push,
    resume_matches,
    shout,
    split_in_two,
    stream,
)

from zephon.engine.lanes.chain import LaneChain
from zephon.engine.plan.stages import compile_plan
from zephon.ops import OpContext

CUTS = [0, 1, 2, 3, 5, 8, 13]


def _pairs(p):
    return p.stateful_transform("pairs", init_state=pair_init, push=pair_push, flush=pair_flush,
                                preserves_cursor_order=False)


BUILDS = {
    # serial position 0: the user op; the batch after it holds rows the op built
    "counting+batch": lambda p: p.add_op("gsum", process_many=group_sum,
                                         preserves_cursor_order=True,
                                         accumulator=counting3).batch(4, drop_last=False),
    "instance-combining+batch": lambda p: p.add_op(GroupedPairs()).batch(3, drop_last=False),
    "fan-out+counting+batch": lambda p: p.add_op(
        "split", process_many=split_in_two, preserves_cursor_order=True).add_op(
        "gsum", process_many=group_sum, preserves_cursor_order=True,
        accumulator=counting3).batch(5, drop_last=False),
    # user ops chained: a stateful op's rows go into a grouping op, then a batch
    "pairs+counting+batch": lambda p: _pairs(p).add_op(
        "gsum", process_many=group_sum, preserves_cursor_order=True,
        accumulator=counting3).batch(2, drop_last=False),
    # a stateless user op between a combining op and the buffer keeps the rows' recipes
    "pairs+stateless+shuffle+batch": lambda p: _pairs(p).add_op(
        "shout", process_many=shout, preserves_cursor_order=True).shuffle(
        buffer_size=6, seed=1).batch(2, drop_last=False),
}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_resume_through_user_operators_is_exact(name):
    def build(micro: int = 5, workers: int = 0):
        return BUILDS[name](make_pipeline(workers, micro))

    states = resume_matches(build, CUTS, restore_opts={"micro": 3})
    held = [n for s in states for n in held_counts(s, 0)]
    assert max(held) >= 1  # checkpoints were taken while the user operator held records


def test_checkpoint_names_held_records_by_cursor_only():
    p = BUILDS["counting+batch"](make_pipeline(0))
    it = iter(p)
    next(it)
    lane = next(v for v in p.checkpoint()["lanes"].values() if v)
    user_state, batch_state = lane["base"]["ops"][0], lane["base"]["ops"][1]
    assert set(user_state) == {"held"}
    assert set(user_state["held"]) == {"chunk_id", "chunk_offset", "lineage"}  # no payloads
    assert "recipe" in batch_state["held"]  # rows built by gsum, held by batch: a recipe each
    p.close()


def test_rows_of_the_last_serial_op_carry_no_recipe():
    with_batch = BUILDS["counting+batch"](make_pipeline(0))
    assert "__recipe" in next(iter(with_batch)).block.payload.column_names
    with_batch.close()
    alone = make_pipeline(0).add_op("gsum", process_many=group_sum, preserves_cursor_order=True,
                                    accumulator=counting3).map_transform(lambda p: p)
    assert list(alone)
    # nothing downstream holds rows: the plan says so, and the op's lanes are told
    plan = compile_plan(alone._spec().all_ops)
    assert plan.recipes_needed == [False, False]
    assert LaneChain(plan, 0, OpContext()).stages[0].emit_recipes is False
    assert compile_plan(with_batch._spec().all_ops).recipes_needed == [True, False]


def test_custom_grouping_accumulator_is_restored_from_its_held_records():
    def build(micro: int = 5):
        return (make_pipeline(0, micro).add_op(
            "parity", process_many=group_sum, preserves_cursor_order=False,
            accumulator=ByParity, batch_shape_sensitive=True).batch(3, drop_last=False))

    assert build().validate().ok
    states = resume_matches(build, CUTS, restore_opts={"micro": 2})
    assert max(n for s in states for n in held_counts(s, 0)) >= 1


def test_restore_refuses_an_accumulator_it_cannot_rebuild():
    def build():
        return make_pipeline(0, micro=1).add_op(
            "warm", process_many=group_sum, preserves_cursor_order=True,
            accumulator=WarmUp, batch_shape_sensitive=True)

    assert "ACC_NOT_RESTORABLE" in build().validate().codes()
    p = build().options(auto_validation="off")
    it = iter(p)
    for _ in range(8):  # lane 0 has released its 2, then 4; it holds 2 or 3 records now
        next(it)
    state = p.checkpoint()
    p.close()
    assert max(held_counts(state, 0)) >= 2
    with pytest.raises(RuntimeError, match="warm.*released a group"):
        stream(build().options(auto_validation="off").restore(state))


def test_resume_user_op_then_pack_then_batch():
    def build(micro: int = 5):
        return (make_pipeline(0, micro).tokenize(tokenizer_id="__fallback__", field="text")
                .add_op("gsum", process_many=group_sum, preserves_cursor_order=True,
                        accumulator=counting3)
                .pack_flat(max_length=12, algorithm="first_fit", num_bins=2, pad_token_id=0)
                .batch(2, drop_last=False))

    resume_matches(build, [1, 2, 3, 5])
