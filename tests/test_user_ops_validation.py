"""pipeline.validate() and auto-validation on the first iteration of add_op pipelines."""

from __future__ import annotations

import random
import warnings
from collections import Counter

import pytest
from test_user_ops_helpers import ByParity, GroupedPairs, counting3, group_sum, make_pipeline, shout

from zephon.ops import Accumulator, BaseOp, CountingAccumulator, OpTraits
from zephon.types import SampleRecord
from zephon.validation import Issue, ValidationError, ValidationReport, ValidationWarning


def _counter_op():
    calls = {"n": 0}

    def counted(records):  # depends on a counter across calls: output changes call to call
        calls["n"] += 1
        for r in records:
            r.payload = {**r.payload, "call": calls["n"]}
        return records

    return counted


def _with(fn, **kw):
    kw.setdefault("preserves_cursor_order", True)
    return make_pipeline(0).add_op("probe-me", process_many=fn, **kw)


def test_clean_operators_pass():
    for p in (_with(shout), _with(group_sum, accumulator=counting3),
              make_pipeline(0).add_op(GroupedPairs()),
              _with(group_sum, accumulator=ByParity, batch_shape_sensitive=True)):
        report = p.validate()
        assert report.ok and not report.errors, report.format()


def test_counter_across_calls_is_an_error_and_strict_iteration_raises():
    p = _with(_counter_op())
    report = p.validate()
    assert not report.ok
    issue = report.errors[0]
    assert isinstance(issue, Issue) and issue.code == "OP_NONDETERMINISTIC"
    assert issue.op_name == "probe-me" and "probe-me" in report.format()
    with pytest.warns(ValidationWarning), pytest.raises(ValidationError) as e:
        list(p)  # auto_validation defaults to "strict"
    assert isinstance(e.value, RuntimeError) and isinstance(e.value.report, ValidationReport)
    assert "OP_NONDETERMINISTIC" in str(e.value) and "probe-me" in str(e.value)
    with pytest.raises(ValidationError):
        p.validate(strict=True)


def test_unseeded_randomness_is_caught_at_runtime_and_in_the_source():
    def noisy(records):
        for r in records:
            r.payload = {**r.payload, "noise": random.random()}
        return records

    report = _with(noisy).validate()
    assert {"OP_NONDETERMINISTIC", "OP_UNSEEDED_RANDOM"} <= set(report.codes())
    assert next(i for i in report.issues if i.code == "OP_UNSEEDED_RANDOM").severity == "warning"


def test_dependence_on_earlier_calls():
    seen: list = []

    def remembers(records):  # same call twice: same output; but lane 1 alone differs
        first = records[0].meta.lane_id
        if first not in seen:
            seen.append(first)
        for r in records:
            r.payload = {**r.payload, "rank": seen.index(first)}
        return records

    assert "OP_DEPENDS_ON_PREVIOUS_CALLS" in _with(remembers).validate().codes()


def test_grouping_dependent_stateless_op():
    def rank_in_group(records):
        for i, r in enumerate(records):
            r.payload = {**r.payload, "rank": i}
        return records

    assert "OP_GROUPING_DEPENDENT" in _with(rank_in_group).validate().codes()
    ok = _with(rank_in_group, accumulator=counting3, batch_shape_sensitive=True).validate()
    assert ok.ok, ok.format()


def test_bare_dicts_and_identity_problems():
    assert _with(lambda rs: [r.payload for r in rs]).validate().codes() == ["OP_INVALID_OUTPUT"]

    def dup(records):
        return [SampleRecord(r.meta, r.payload) for r in records for _ in range(2)]

    assert "OP_DUPLICATE_CURSOR" in _with(dup).validate().codes()


class LosesOne(Accumulator):
    def __init__(self) -> None:
        self.buf: dict[int, list] = {}

    def push_many(self, elems):
        out = []
        for e in elems:
            b = self.buf.setdefault(e.meta.lane_id, [])
            b.append(e)
            if len(b) == 3:
                out.append((b[:2], 0))  # the third record silently disappears
                self.buf[e.meta.lane_id] = []
        return out

    def flush(self, *, reset=False, lane_id=None):
        lanes = [lane_id] if lane_id is not None else sorted(self.buf)
        return [(self.buf.pop(k), 0) for k in lanes if self.buf.get(k)]

    def has_pending_data(self, lane_id=None):
        return any(v for k, v in self.buf.items() if lane_id in (None, k))


class MixesAndSticks(CountingAccumulator):
    """Groups across lanes and keeps buffered records through a reset."""

    def __init__(self) -> None:
        super().__init__(max_batch=4)
        self.all: list = []

    def push_many(self, elems):
        self.all.extend(elems)
        out = []
        while len(self.all) >= 4:
            out.append((self.all[:4], 0))
            self.all = self.all[4:]
        return out

    def flush(self, *, reset=False, lane_id=None):
        if reset:
            return []
        out, self.all = ([(self.all, 0)] if self.all else []), []
        return out

    def has_pending_data(self, lane_id=None):
        return bool(self.all)


def test_accumulator_problems_are_reported_per_operator():
    lost = _with(group_sum, accumulator=LosesOne, batch_shape_sensitive=True).validate()
    assert "ACC_LOST_RECORDS" in lost.codes()
    assert all(i.op_name == "probe-me" for i in lost.issues)
    mixed = _with(group_sum, accumulator=MixesAndSticks, batch_shape_sensitive=True).validate()
    codes = Counter(mixed.codes())
    assert codes["ACC_MIXES_LANES"] and codes["ACC_STATE_AFTER_RESET"]
    assert codes["ACC_PENDING_DATA_MISMATCH"]


def test_modes_warn_and_off():
    warn = _with(_counter_op()).options(auto_validation="warn")
    with pytest.warns(ValidationWarning, match="OP_NONDETERMINISTIC"):
        assert list(warn)
    off = _with(_counter_op()).options(auto_validation="off")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ValidationWarning)
        assert list(off)
    with pytest.raises(ValueError):
        make_pipeline(0).options(auto_validation="sometimes")


def test_validation_runs_once_until_the_graph_changes(monkeypatch):
    import zephon.validation.harness as validation  # auto_validate calls it there

    runs = Counter()
    real = validation.validate_pipeline

    def counting(pipeline, **kw):
        runs["n"] += 1
        return real(pipeline, **kw)

    monkeypatch.setattr(validation, "validate_pipeline", counting)
    p = _with(shout)
    list(p)
    list(p)
    assert runs["n"] == 1  # probed on the first iteration only
    p.map_transform(lambda x: x)
    list(p)
    assert runs["n"] == 2  # the chain changed: probed again
    list(p.options(auto_validation="off"))
    assert runs["n"] == 2


def test_generic_payload_rejection_and_instance_form_degradations():
    report = _with(lambda rs: [r for r in rs if r.payload["needs"]]).validate()
    assert report.ok and report.codes() == ["OP_REJECTS_GENERIC_PAYLOAD"]

    class NeedsSetup(BaseOp):
        def traits(self):
            return OpTraits(preserves_cursor_order=True)

        def setup(self, ctx):
            super().setup(ctx)
            self.model = str.upper

        def process_many(self, elems):
            return [SampleRecord(r.meta, self.model(r.payload["text"])) for r in elems]

    report = make_pipeline(0).add_op(NeedsSetup()).validate()
    assert report.codes() == ["OP_INSTANCE_RUNTIME_CHECKS_SKIPPED"]

    class BadSamples(NeedsSetup):
        def validation_samples(self):
            return [{"text": "x"}]

    report = make_pipeline(0).add_op(BadSamples()).validate()
    assert report.codes() == ["OP_RAISES_ON_SYNTHETIC_INPUT"] and not report.ok

    def broken_factory():
        raise OSError("samples file missing")

    report = _with(shout, validation_samples=broken_factory).validate()
    assert report.codes() == ["OP_VALIDATION_SAMPLES_FACTORY_FAILED"] and report.ok


def test_source_check_flags_writes_to_self():
    class Memo(BaseOp):
        def traits(self):
            return OpTraits(preserves_cursor_order=True)

        def process_many(self, elems):
            self.last = len(elems)
            return elems

    assert "OP_WRITES_SELF" in make_pipeline(0).add_op(Memo()).validate().codes()


def test_stateful_and_map_transforms_are_not_probed():
    p = (make_pipeline(0).map_transform(lambda x: {**x, "r": random.random()})
         .stateful_transform("s", init_state=list, push=lambda s, rs: (s, rs)))
    assert p.validate().issues == []
