"""add_op in both forms: stateless and grouped, 0 and 2 workers, setup per worker, errors."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from test_user_ops_helpers import (
    GroupedPairs,
    Tagger,
    counting3,
    group_sum,
    make_pipeline,
    shout,
    split_in_two,
    stream,
)

from zephon.ops import BaseOp, CountingAccumulator, OpTraits, UserFunctionError
from zephon.types import SampleBatch

# Tagger needs setup() for its resource, which validation never calls: it warns and skips it
pytestmark = pytest.mark.filterwarnings("ignore::zephon.validation.ValidationWarning")


def _forms(kind: str, workers: int, tmp_path):
    p = make_pipeline(workers)
    if kind == "function":
        return p.add_op("shout", process_many=shout, preserves_cursor_order=True, parallelism=2)
    if kind == "function-counting":
        return (p.add_op("split", process_many=split_in_two, preserves_cursor_order=True)
                .add_op("gsum", process_many=group_sum, preserves_cursor_order=True,
                        accumulator=counting3, batch_shape_sensitive=True)
                .batch(4, drop_last=False))
    if kind == "instance":
        return p.add_op(Tagger(str(tmp_path))).add_op(GroupedPairs(), name="pairs")
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["function", "function-counting", "instance"])
def test_each_form_same_stream_with_0_and_2_workers(kind, tmp_path):
    inline = stream(_forms(kind, 0, tmp_path))
    assert len(inline) > 20
    assert stream(_forms(kind, 2, tmp_path)) == inline


def test_counting_accumulator_groups_stay_in_one_lane_and_are_at_most_max_batch():
    groups = Counter()
    for r in make_pipeline(0).add_op("gsum", process_many=group_sum, preserves_cursor_order=True,
                                     accumulator=lambda: CountingAccumulator(max_batch=3)):
        assert 1 <= r.payload["group"] <= 3
        groups[(r.meta.lane_id, r.payload["group_sum"])] += 1
    assert max(groups.values()) <= 3


def test_setup_runs_once_per_worker_process(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    units = list(make_pipeline(2).add_op(Tagger(str(markers))))
    assert units and all(u.payload["text"].endswith("!") for u in units)
    calls = sorted(os.listdir(markers))
    pids = [c.split(".")[1] for c in calls]
    assert len(calls) == 2, calls  # one per worker, never per block
    assert len(set(pids)) == 2 and str(os.getpid()) not in pids


def test_setup_runs_once_inline(tmp_path):
    units = list(make_pipeline(0).add_op(Tagger(str(tmp_path), suffix="?")))
    assert units and len(os.listdir(tmp_path)) == 1


def test_fan_out_with_spawn_child_gives_distinct_lineage():
    units = list(make_pipeline(0).add_op("split", process_many=split_in_two,
                                         preserves_cursor_order=True))
    by_parent = Counter((u.meta.lane_id, u.meta.chunk_id, u.meta.chunk_offset) for u in units)
    assert set(by_parent.values()) == {2}
    assert {u.meta.lineage[-1] for u in units} == {0, 1}


def test_batch_level_op_sees_sample_batches():
    def tag(batches):
        out = []
        for b in batches:
            assert isinstance(b, SampleBatch)
            if len(b) == 4:
                out.append(SampleBatch([r for r in b.records]))
        return out

    with pytest.warns(UserWarning, match="after batch"):
        p = make_pipeline(0).batch(4, drop_last=False).add_op(
            "full-only", process_many=tag, preserves_cursor_order=True)
    units = list(p)
    assert units and all(isinstance(u, SampleBatch) and len(u) == 4 for u in units)


# -- refusals --------------------------------------------------------------------------------


def test_bare_dicts_are_refused_with_what_to_return():
    p = make_pipeline(0).add_op("dicts", process_many=lambda rs: [r.payload for r in rs],
                                preserves_cursor_order=True).options(auto_validation="off")
    with pytest.raises(TypeError, match="Unsupported element type dict") as e:
        list(p)
    assert "dicts" in str(e.value) and "record.payload" in str(e.value)


def test_function_form_requirements():
    p = make_pipeline(0)
    with pytest.raises(ValueError, match="preserves_cursor_order"):
        p.add_op("x", process_many=shout)
    with pytest.raises(ValueError, match="process_many"):
        p.add_op("x", preserves_cursor_order=True)
    with pytest.raises(ValueError, match="positionally"):
        p.add_op(name="x", process_many=shout, preserves_cursor_order=True)
    with pytest.raises(ValueError):
        p.add_op()
    with pytest.raises(ValueError, match="stall_on_epoch_boundary"):
        p.add_op("x", process_many=shout, preserves_cursor_order=True,
                 stall_on_epoch_boundary=True)


def test_instance_form_requirements(tmp_path):
    p = make_pipeline(0)
    with pytest.raises(ValueError, match="cannot be combined"):
        p.add_op(Tagger(str(tmp_path)), preserves_cursor_order=True)
    with pytest.raises(TypeError, match="instance"):
        p.add_op(Tagger)

    class NoTraits(BaseOp):
        def process_many(self, elems):
            return elems

    with pytest.raises(TypeError):
        NoTraits()
    p.add_op(Tagger(str(tmp_path)), name="tagger")
    assert p._ops[-1].op_name == "tagger"


class Exploding(BaseOp):
    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True)

    def process_many(self, elems):
        for r in elems:
            if r.payload.get("text") == "b7":
                raise ZeroDivisionError("cannot divide this one")
        return elems


@pytest.mark.parametrize("workers", [0, 2])
def test_exception_names_operator_and_sample_id(workers):
    p = make_pipeline(workers).add_op(Exploding(), name="exploder")
    with pytest.raises(UserFunctionError) as e:
        list(p)
    assert e.value.op_name == "exploder"
    assert e.value.sample_id == (1, 0, 7)  # the record at fault, not the first of its block
    assert "exploder" in str(e.value) and "(1, 0, 7)" in str(e.value)
    assert "ZeroDivisionError" in str(e.value)


def test_exception_in_grouped_op_names_operator_and_sample_id():
    def fails_on_a3(records):
        if any(r.payload.get("text") == "a3" for r in records):
            raise KeyError("no such thing")
        return records

    p = make_pipeline(0).add_op("grouped", process_many=fails_on_a3, preserves_cursor_order=True,
                                accumulator=counting3)
    with pytest.raises(UserFunctionError, match="grouped") as e:
        list(p)
    assert e.value.sample_id == (0, 0, 3)
