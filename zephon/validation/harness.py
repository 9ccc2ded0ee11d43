"""The validation harness for user operators (``pipeline.validate()`` and auto-validation).

Zephon's guarantees (execution knobs never change data, exact resume) rest on operators being
pure functions of their input, and on accumulators that neither lose nor invent records. A user
operator that breaks this silently changes the data, so on the first iteration of a pipeline
with ``add_op`` operators (``options(auto_validation="strict" | "warn" | "off")``) each of them
is fed synthetic records -- payload ``{"text": str, "value": int}``, 3 lanes x 4 records, or the
operator's ``validation_samples()`` -- and the harness reports, per operator:

- ``OP_INVALID_OUTPUT``: output is not a list of SampleRecord / SampleBatch (error);
- ``OP_NONDETERMINISTIC``: the same input twice gives different output (error);
- ``OP_DEPENDS_ON_PREVIOUS_CALLS``: a lane's output changes with the calls made before (error);
- ``OP_GROUPING_DEPENDENT``: a stateless op whose output depends on how records are grouped,
  i.e. on ``micro_batch_size`` (error; declare ``batch_shape_sensitive=True`` if intended);
- ``OP_SAMPLE_ID_CHANGED`` / ``OP_LANE_CHANGED`` / ``OP_DUPLICATE_CURSOR``: identity (error);
- ``OP_CALIBRATION_REPLAY_MISMATCH``: declared ``calibration_replayable`` but one record at a
  time gives other outputs than the grouped run (error);
- ``ACC_*``: accumulator checks, see ``accumulator_checks.py`` (errors);
- ``OP_WRITES_SELF`` / ``OP_WRITES_SHARED_STATE`` / ``OP_UNSEEDED_RANDOM``: source checks,
  see ``source_checks.py`` (warnings);
- ``OP_REJECTS_GENERIC_PAYLOAD`` / ``OP_INSTANCE_RUNTIME_CHECKS_SKIPPED``: the operator raised on
  the synthetic payload, runtime checks skipped (warnings); ``OP_RAISES_ON_SYNTHETIC_INPUT``: it
  raised on its own ``validation_samples()`` (error); ``OP_VALIDATION_SAMPLES_FACTORY_FAILED``.

The harness never calls ``setup()``.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from zephon.errors import ValidationError
from zephon.ops.add_op import UserOp
from zephon.ops.batch import BatchOp
from zephon.types import SampleBatch, SampleMeta, SampleRecord

DOC_LINK = "docs/guides/operators.md#validation"
LANES, PER_LANE = 3, 4
Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Issue:
    severity: Severity
    code: str
    op_name: str
    message: str
    doc_link: str = DOC_LINK


@dataclass
class ValidationReport:
    issues: list[Issue] = field(default_factory=list)

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def codes(self) -> list[str]:
        return [i.code for i in self.issues]

    def format(self) -> str:
        head = (f"operator validation: {len(self.errors)} error(s), "
                f"{len(self.warnings)} warning(s)")
        lines = [head] + [f"  {i.severity.upper()} {i.code} [{i.op_name}]: {i.message} "
                          f"(see {i.doc_link})" for i in self.issues]
        return "\n".join(lines)


class ValidationWarning(UserWarning):
    pass


def validate_pipeline(pipeline: Any, *, strict: bool = False) -> ValidationReport:
    """Probe every ``add_op`` operator of ``pipeline`` (a ``Pipeline``, or the ``PipelineSpec``
    it hands the engine); raise when ``strict`` and it has errors."""
    ops = getattr(pipeline, "ops", None)
    if ops is None:  # a Pipeline: it validates the spec it runs
        return pipeline.validate(strict=strict)
    report = ValidationReport()
    seen_batch = False
    for op in ops:
        if isinstance(op, BatchOp):
            seen_batch = True
        if isinstance(op, UserOp) and op.auto_validate:
            report.issues.extend(validate_op(op, after_batch=seen_batch))
    if strict and not report.ok:
        raise ValidationError(report)
    return report


def auto_validate(spec: Any) -> None:
    """The first-iteration hook (``spec``, the ``PipelineSpec`` about to run):
    ``auto_validation`` strict (warn, raise on errors) | warn | off."""
    mode = spec.options.get("auto_validation")
    if mode == "off" or not any(isinstance(o, UserOp) and o.auto_validate for o in spec.ops):
        return
    report = validate_pipeline(spec)
    if report.issues:
        warnings.warn(report.format(), ValidationWarning, stacklevel=3)
    if mode == "strict" and not report.ok:
        raise ValidationError(report)


# -- one operator ----------------------------------------------------------------------------


def synthetic_records() -> list[SampleRecord]:
    return [SampleRecord(SampleMeta((0, lane, i), lane, 0, i, {0: 1}),
                         {"text": f"synthetic sample {i} of lane {lane}", "value": 10 * lane + i})
            for lane in range(LANES) for i in range(PER_LANE)]


def _as_records(samples: list) -> list[SampleRecord]:
    """Samples as records: records keep their metas, bare payloads are spread over the lanes."""
    out = []
    for k, s in enumerate(samples):
        if isinstance(s, SampleRecord):
            out.append(s)
        else:
            lane, i = k % LANES, k // LANES
            out.append(SampleRecord(SampleMeta((0, lane, i), lane, 0, i, {0: 1}), s))
    return out


def validate_op(op: UserOp, *, after_batch: bool = False) -> list[Issue]:
    from zephon.validation.accumulator_checks import probe_accumulator
    from zephon.validation.source_checks import static_issues

    issues: list[Issue] = []

    def add(severity: Severity, code: str, message: str) -> None:
        issues.append(Issue(severity, code, op.op_name, message))

    for code, message in static_issues(op):
        add("warning", code, message)
    own = None
    try:
        own = op.validation_samples()
    except Exception as e:
        add("warning", "OP_VALIDATION_SAMPLES_FACTORY_FAILED",
            f"validation_samples() raised {type(e).__name__}: {e}; using synthetic records")
    if not own and not op.function_form:
        # spec 10.8: an instance-form operator without validation_samples() is not probed on
        # synthetic records (they need not be what it reads); its source checks stand
        add("warning", "OP_INSTANCE_RUNTIME_CHECKS_SKIPPED", "instance-form operator without "
            "validation_samples(): runtime checks skipped (define validation_samples() to "
            "have them run)")
        return issues
    records = _as_records(list(own)) if own else synthetic_records()
    lanes: dict[int, list] = {}
    for r in records:
        lanes.setdefault(r.meta.lane_id, []).append(r)
    if after_batch:
        lanes = {lane: [SampleBatch(rs)] for lane, rs in lanes.items()}
    if probe_process_many(op, lanes, add, own_samples=bool(own)):
        probe_accumulator(op, lanes, add, fresh)
    return issues


def fresh(elems: list) -> list:
    """Copies the operator may mutate freely (each call gets its own)."""
    out = []
    for e in elems:
        if isinstance(e, SampleBatch):
            out.append(SampleBatch([SampleRecord(r.meta, copy.deepcopy(r.payload)) for r in e]))
        else:
            out.append(SampleRecord(e.meta, copy.deepcopy(e.payload)))
    return out


def _canon(x: Any) -> Any:
    if isinstance(x, dict):
        return tuple(sorted((str(k), _canon(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_canon(v) for v in x)
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape, _canon(x.tolist()))
    return x


def signature(elem: Any) -> tuple:
    if isinstance(elem, SampleRecord):
        m = elem.meta
        return ("record", m.sample_id, m.lane_id, m.chunk_id, m.chunk_offset, tuple(m.lineage),
                repr(_canon(elem.payload)))
    if isinstance(elem, SampleBatch):
        return ("batch", tuple(elem.ids), tuple(elem.lineage_paths),
                repr(_canon(elem.block.payload_list())))
    return ("other", type(elem).__name__, repr(elem))


def probe_process_many(op: UserOp, lanes: dict[int, list], add: Callable[..., None], *,
                       own_samples: bool) -> bool:
    """The process_many checks; False when the runtime checks cannot go on."""
    from zephon.ops.user_calls import user_outputs

    order = sorted(lanes)
    # Probes run on copies made before any call, the way each worker process receives the
    # operator: the live instance is left untouched, and calls on the second copy in another
    # order show whether the output depends on earlier calls.
    subject, twin = _twin(op.inner), _twin(op.inner)
    subject = subject if subject is not None else op.inner

    def run(lane_order: list[int], split: bool = False, inner: Any = None) -> dict[int, list]:
        fn = (inner or subject).process_many
        res = {}
        for lane in lane_order:
            if split:  # one call per element, outputs concatenated
                res[lane] = [o for e in lanes[lane] for o in fn(fresh([e]))]
            else:
                res[lane] = fn(fresh(lanes[lane]))
        return res

    try:
        first = run(order)
    except Exception as e:
        what = f"raised {type(e).__name__}: {e}"
        if own_samples:
            add("error", "OP_RAISES_ON_SYNTHETIC_INPUT", f"process_many {what} on its own "
                "validation_samples()")
        elif op.function_form:
            add("warning", "OP_REJECTS_GENERIC_PAYLOAD", f"process_many {what} on the synthetic "
                "payload {'text', 'value'}; runtime checks skipped (give validation_samples=)")
        else:
            add("warning", "OP_INSTANCE_RUNTIME_CHECKS_SKIPPED", f"process_many {what} on the "
                "synthetic payload; runtime checks skipped (define validation_samples())")
        return False
    try:
        for out in first.values():
            user_outputs(op.op_name, out)
    except TypeError as e:
        add("error", "OP_INVALID_OUTPUT", str(e))
        return False

    def sigs(res: dict[int, list]) -> dict[int, list]:
        return {lane: [signature(o) for o in out] for lane, out in res.items()}

    def attempt(*args: Any, **kw: Any) -> dict[int, list]:
        try:
            return sigs(run(*args, **kw))
        except Exception as e:  # raising where the first run did not: a difference too
            return {-1: [("raised", type(e).__name__, str(e))]}

    base = sigs(first)
    if attempt(order) != base:
        add("error", "OP_NONDETERMINISTIC", "two identical calls on the same records gave "
            "different outputs: process_many must not keep state across calls or use unseeded "
            "randomness (derive randomness from the record, e.g. its sample_id)")
    elif twin is not None and attempt(order[::-1], inner=twin) != base:
        add("error", "OP_DEPENDS_ON_PREVIOUS_CALLS", "a lane's output changes with the calls "
            "made before it: process_many must depend only on its argument")
    _identity_checks(first, lanes, add)
    grouped = not op.traits().requires_serial_state and not op.traits().batch_shape_sensitive
    if grouped and not any(isinstance(e, SampleBatch) for es in lanes.values() for e in es):
        if attempt(order, split=True) != base:
            add("error", "OP_GROUPING_DEPENDENT", "the output depends on how records are "
                "grouped into calls; groups follow micro_batch_size, so the data would too. "
                "Group explicitly with accumulator=CountingAccumulator(...) and set "
                "batch_shape_sensitive=True")
    if op.traits().calibration_replayable and not any(
            isinstance(e, SampleBatch) for es in lanes.values() for e in es):
        # priming replays the op on records one at a time, without its accumulator
        if {k: sorted(v) for k, v in attempt(order, split=True).items()} != \
                {k: sorted(v) for k, v in base.items()}:
            add("error", "OP_CALIBRATION_REPLAY_MISMATCH", "declared calibration_replayable, "
                "but one record at a time gives other payloads or counts than the grouped run "
                "(token-aware priming would measure wrong ratios)")
    return True


def _twin(inner: Any) -> Any:
    try:
        import cloudpickle

        return cloudpickle.loads(cloudpickle.dumps(inner))
    except Exception:  # not picklable: the process engine would refuse it anyway
        return None


def _identity_checks(first: dict[int, list], lanes: dict[int, list],
                     add: Callable[..., None]) -> None:
    for lane, out in first.items():
        records = [o for o in out if isinstance(o, SampleRecord) and not o.meta.tombstone]
        ids = {r.meta.sample_id for e in lanes[lane]
               for r in (e.records if isinstance(e, SampleBatch) else [e])}
        if any(r.meta.sample_id not in ids for r in records):
            add("error", "OP_SAMPLE_ID_CHANGED", "an output record carries a sample_id that no "
                "input had: keep record.meta, or derive it with spawn_child / pack_meta")
            return
        if any(r.meta.lane_id != lane for r in records):
            add("error", "OP_LANE_CHANGED", "an output record moved to another lane")
            return
        cursors = [r.meta.cursor for r in records]
        if len(set(cursors)) != len(cursors):
            add("error", "OP_DUPLICATE_CURSOR", "two output records share a cursor (same chunk, "
                "offset and lineage): derive the children of a split with spawn_child")
            return
