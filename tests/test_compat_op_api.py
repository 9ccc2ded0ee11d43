"""The operator API as the reference library spells it: generic accumulators, the
``zephon.ops.accumulators`` / ``zephon.ops.traits`` module paths, and ``calibration_replayable``
(an operator that token-aware priming may run between fetch and tokenize)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from zephon import Pipeline, synthetic
from zephon.io import Dataset
from zephon.ops import BaseOp, CountingAccumulator, OpTraits
from zephon.types import SampleRecord
from zephon.work import StaticMixtureWorkSource, TokenEstimation

pytestmark = pytest.mark.filterwarnings("ignore::zephon.validation.ValidationWarning")


def test_reference_module_paths_hold_the_same_classes():
    acc = importlib.import_module("zephon.ops.accumulators")
    traits = importlib.import_module("zephon.ops.traits")
    from zephon import ops

    assert acc.Accumulator is ops.Accumulator
    assert acc.CountingAccumulator is ops.CountingAccumulator
    assert acc.PassthroughAccumulator is ops.PassthroughAccumulator
    assert traits.OpTraits is ops.OpTraits


def test_accumulators_are_generic_so_typed_operators_import():
    from zephon.ops.accumulators import Accumulator, CountingAccumulator, ReadyBatch

    class Pairs(Accumulator[SampleRecord]):  # a typed user accumulator, no has_pending_data
        def __init__(self) -> None:
            self.buf: list[SampleRecord] = []

        def push_many(self, elems: list[SampleRecord]) -> list[ReadyBatch[SampleRecord]]:
            self.buf.extend(elems)
            out = []
            while len(self.buf) >= 2:
                out.append((self.buf[:2], 0))
                self.buf = self.buf[2:]
            return out

        def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list:
            out, self.buf = ([(self.buf, 0)] if self.buf else []), []
            return out

    assert Accumulator[Any] is not None
    grouped = CountingAccumulator[Any](max_batch=2)
    assert isinstance(grouped, CountingAccumulator)
    assert Pairs().has_pending_data() is False  # the reference's default


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("texts")
    synthetic.write_dataset(root, "d", 400, n_shards=2, fmt="jsonl", seed=4, mean_words=30)
    return str(root / "d")


def _token_source(path: str) -> StaticMixtureWorkSource:
    # token-aware: priming measures tokens per stored byte through the ops before tokenize
    return StaticMixtureWorkSource([Dataset.from_path("d", path)], {"d": 1.0}, chunk_size=64,
                                   seed=1, token_estimation=TokenEstimation(calibration_samples=64))


def twice(records: list) -> list:
    """Doubles every text: tokens per stored byte double too."""
    for r in records:
        r.payload = {**r.payload, "text": r.payload["text"] + " " + r.payload["text"]}
    return records


def _measured(pipeline: Pipeline) -> float:
    """Tokens per record that priming measured (priming works on a copy of the work source)."""
    next(iter(pipeline))
    measured = pipeline.metrics_snapshot()["priming"]["datasets"]["d"]
    pipeline.close()
    assert measured["source"] in ("measured", "node cache")
    return measured["tokens_per_record"]


def _tokenized(p: Pipeline) -> Pipeline:
    return (p.options(num_workers=0)
            .tokenize(tokenizer_id="__fallback__", field="text").batch(4))


def test_function_form_calibration_replayable_op_is_replayed_by_priming(text_dir):
    plain = _measured(_tokenized(Pipeline(_token_source(text_dir))))
    doubled = _measured(_tokenized(Pipeline(_token_source(text_dir)).add_op(
        "twice", process_many=twice, preserves_cursor_order=True,
        calibration_replayable=True)))
    # the op ran on the calibration samples: about twice the tokens per stored byte
    assert 1.8 < doubled / plain < 2.2, (plain, doubled)


def test_an_op_not_declared_replayable_still_stops_measuring(text_dir):
    p = _tokenized(Pipeline(_token_source(text_dir)).add_op(
        "twice", process_many=twice, preserves_cursor_order=True))
    with pytest.raises(ValueError, match="calibration_replayable"):
        next(iter(p))


class Twice(BaseOp):
    def __init__(self, replayable: bool) -> None:
        self.replayable = replayable

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, calibration_replayable=self.replayable)

    def process_many(self, elems: list) -> list:
        return twice(elems)


def test_instance_form_takes_calibration_replayable_from_its_traits(text_dir):
    assert OpTraits(preserves_cursor_order=True).calibration_replayable is False
    plain = _measured(_tokenized(Pipeline(_token_source(text_dir))))
    doubled = _measured(_tokenized(Pipeline(_token_source(text_dir)).add_op(Twice(True))))
    assert 1.8 < doubled / plain < 2.2
    with pytest.raises(ValueError, match="calibration_replayable"):
        next(iter(_tokenized(Pipeline(_token_source(text_dir)).add_op(Twice(False)))))
    with pytest.raises(ValueError):  # the instance form takes traits from traits() only
        Pipeline(_token_source(text_dir)).add_op(Twice(True), calibration_replayable=True)


def pairs_sum(records: list) -> list:
    """Depends on its group: one record alone gives another payload than in a pair."""
    total = sum(len(r.payload["text"]) for r in records)
    for r in records:
        r.payload = {**r.payload, "group_len": total}
    return records


def test_validator_flags_a_declared_replayable_op_whose_output_depends_on_grouping(text_dir):
    p = Pipeline(_token_source(text_dir)).add_op(
        "pairs", process_many=pairs_sum, preserves_cursor_order=True,
        accumulator=lambda: CountingAccumulator(max_batch=2), calibration_replayable=True)
    assert "OP_CALIBRATION_REPLAY_MISMATCH" in p.validate().codes()
    ok = Pipeline(_token_source(text_dir)).add_op(
        "twice", process_many=twice, preserves_cursor_order=True,
        accumulator=lambda: CountingAccumulator(max_batch=2), calibration_replayable=True)
    assert "OP_CALIBRATION_REPLAY_MISMATCH" not in ok.validate().codes()
