"""``add_op``: user operators in the function form and the ``BaseOp`` instance form.

Both forms end up as a ``UserOp``, the engine face of a record-level operator:

- with a passthrough accumulator (the default) it is a stateless block operator: ``process_many``
  runs on each block in the worker processes, like ``map_transform``;
- with any other accumulator (or ``requires_serial_state``) it is serial: one ``RecordLane`` per
  lane in the coordinator groups records and runs ``process_many`` on each ready group. Its
  output rows carry recipes (``zephon.state.recipes``) so that a downstream buffer holding them
  can be checkpointed and restored exactly.

Which of the two it is, is settled when the operator is added (the accumulator is probed once)
and declared in its ``OpTraits``; the engine reads nothing else.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from zephon.block import Block
from zephon.ops.accumulators import Accumulator, PassthroughAccumulator
from zephon.ops.base import (
    BaseOp,
    LaneAccumulator,
    OpContext,
    Operator,
    OpTraits,
    StageInfo,
    StatefulOp,
    StatelessOp,
)
from zephon.ops.record_accumulator import RecordLane
from zephon.ops.user_calls import call_user, elements_of, to_blocks, user_outputs
from zephon.state import recipes
from zephon.types import records_from_block

_UNSET: Any = object()


def call_factory(factory: Any, *, deterministic: bool, ctx: OpContext) -> Accumulator:
    """An accumulator from a factory taking nothing, or keyword-only ``deterministic``/``ctx``.
    An accumulator instance is accepted too and copied, so lanes never share one."""
    if isinstance(factory, Accumulator):
        return copy.deepcopy(factory)
    params = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        acc = factory(deterministic=deterministic, ctx=ctx)
    else:
        kw = {"deterministic": deterministic, "ctx": ctx}
        acc = factory(**{k: v for k, v in kw.items() if k in params})
    if not isinstance(acc, Accumulator):
        raise TypeError(f"the accumulator factory returned {type(acc).__name__}: return an "
                        "Accumulator such as CountingAccumulator(max_batch=8)")
    return acc


class FunctionOp(BaseOp):
    """The function form's callables as a ``BaseOp``."""

    def __init__(self, name: str, *, process_many: Callable[[list], list], traits: OpTraits,
                 accumulator: Any = None, process_one: Callable[[Any], list] | None = None,
                 validation_samples: Any = None) -> None:
        self.name = name
        self.fn = process_many
        self.op_traits = traits
        self.accumulator_factory = accumulator
        self.fn_one = process_one
        self.samples = validation_samples

    def traits(self) -> OpTraits:
        return self.op_traits

    def process_many(self, elems: list) -> list:
        return self.fn(elems)

    def process_one(self, elem: Any) -> list:
        return self.fn_one(elem) if self.fn_one is not None else self.fn([elem])

    def accumulator(self, *, deterministic: bool, ctx: OpContext) -> Accumulator:
        if self.accumulator_factory is None:
            return PassthroughAccumulator()
        return call_factory(self.accumulator_factory, deterministic=deterministic, ctx=ctx)

    def validation_samples(self) -> list | None:
        s = self.samples
        return list(s()) if callable(s) else (list(s) if s is not None else None)


class UserOp(StatelessOp, StatefulOp):
    """Runs a user ``BaseOp`` inside the engine (see the module docstring): a stateless
    operator, or with a grouping accumulator a stateful one (``traits()`` says which)."""

    def __init__(self, inner: BaseOp, name: str, *, function_form: bool,
                 auto_validate: bool = True) -> None:
        traits = inner.traits()
        if not isinstance(traits, OpTraits):
            raise TypeError(f"operator {name}: traits() must return OpTraits(...), got "
                            f"{type(traits).__name__}")
        self.inner = inner
        self.name = name
        self.function_form = function_form
        self.auto_validate = auto_validate
        self.op_traits = traits
        probe = None
        if type(inner).accumulator is not BaseOp.accumulator:
            probe = self.new_accumulator(OpContext(StageInfo(0, "build", 0)))
        self.serial = traits.requires_serial_state or (
            probe is not None and type(probe) is not PassthroughAccumulator)
        # serial rows are rebuilt from recipes on restore; stateless ones by re-running
        self._traits = replace(traits, requires_serial_state=self.serial,
                               combines_records=self.serial)
        self._fingerprint = inner.fingerprint()  # now: what setup() loads is not config
        self._ready = False

    def fingerprint(self) -> dict:
        return self._fingerprint

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_ready"] = False  # every process that receives the op sets it up itself
        return state

    # -- the record face, forwarded --------------------------------------------------------

    def traits(self) -> OpTraits:
        return self._traits

    def validation_samples(self) -> list | None:
        return self.inner.validation_samples()

    def setup(self, ctx: OpContext) -> None:
        super().setup(ctx)
        self.inner.setup(ctx)
        self._ready = True

    def _ensure_setup(self) -> None:
        # restore re-runs worker-stage operators where they were never set up (the coordinator)
        if not self._ready:
            self.setup(OpContext(StageInfo(0, "restore", 0), runner="restore"))

    def new_accumulator(self, ctx: OpContext) -> Accumulator:
        acc = self.inner.accumulator(deterministic=True, ctx=ctx)
        if not isinstance(acc, Accumulator):
            raise TypeError(f"operator {self.name}: accumulator() returned "
                            f"{type(acc).__name__}; return an Accumulator such as "
                            "CountingAccumulator(max_batch=8)")
        return acc

    # -- the block face --------------------------------------------------------------------

    def new_lane(self, lane_id: int, ctx: OpContext) -> LaneAccumulator:
        self._ensure_setup()
        return RecordLane(self, lane_id, ctx)

    def check_state(self, state, view, field: str) -> None:
        from zephon.state import checkpoint_ops

        checkpoint_ops.record_state(self, state, view, field)

    def run_group(self, elems: list, single: Callable[[int], tuple] | None,
                  lane_id: int | None = None) -> list[Block]:
        """``process_many`` on one group, checked and laid out as blocks."""
        out = call_user(self.name, self.inner.process_many, (elems,), elems, single)
        return to_blocks(self.name, user_outputs(self.name, out), lane_id)

    def process_block(self, block: Block) -> Block | None:
        self._ensure_setup()

        def single(i: int) -> tuple:
            return (records_from_block(block.slice(i, i + 1)),)

        blocks = self.run_group(elements_of(block), None if block.is_batch else single)
        if block.is_batch and len(blocks) > 1:
            raise TypeError(f"operator {self.name}: after batch, return at most one "
                            "SampleBatch per batch")
        return recipes.carry(block, blocks[0]) if blocks else None

    # -- restore: rows rebuilt from their recipes ------------------------------------------

    def recipe_inputs(self, refs: dict) -> dict:
        return recipes.recipe_inputs(refs)

    def rebuild_rows(self, refs: dict, inputs: Block) -> Block:
        self._ensure_setup()
        index = recipes.key_index(inputs)
        done: dict[tuple, list] = {}
        rows, texts = [], []
        for rec in refs["recipe"]:
            r = recipes.decode(rec)
            src = recipes.rows_of(r, index)
            key = tuple(src)
            if key not in done:
                elems = records_from_block(inputs.take(src))
                out = call_user(self.name, self.inner.process_many, (elems,), elems)
                done[key] = user_outputs(self.name, out)
            outs = done[key]
            if r["i"] >= len(outs):
                raise RuntimeError(f"restore: operator {self.name} gave fewer outputs when "
                                   "replayed than before (is process_many deterministic?)")
            rows.append(outs[r["i"]])
            texts.append(recipes.encode(rec))
        return recipes.attach(to_blocks(self.name, rows)[0], texts)


def build_add_op(op_or_name: Any = None, *, name: Any = _UNSET, process_many: Any = _UNSET,
                 preserves_cursor_order: Any = _UNSET, accumulator: Any = _UNSET,
                 process_one: Any = _UNSET, validation_samples: Any = _UNSET,
                 parallelism: Any = _UNSET, placement: str = "auto", indexable: Any = _UNSET,
                 batch_shape_sensitive: Any = _UNSET, requires_serial_state: Any = _UNSET,
                 stall_on_epoch_boundary: Any = _UNSET,
                 calibration_replayable: Any = _UNSET) -> Operator:
    """The operator ``Pipeline.add_op`` appends (see ``Pipeline.add_op`` for the forms)."""
    given = {k: v for k, v in dict(
        process_many=process_many, preserves_cursor_order=preserves_cursor_order,
        accumulator=accumulator, process_one=process_one, validation_samples=validation_samples,
        parallelism=parallelism, indexable=indexable, batch_shape_sensitive=batch_shape_sensitive,
        requires_serial_state=requires_serial_state,
        stall_on_epoch_boundary=stall_on_epoch_boundary,
        calibration_replayable=calibration_replayable).items() if v is not _UNSET}
    if isinstance(op_or_name, type):
        raise TypeError(f"add_op needs an instance of {op_or_name.__name__}, not the class")
    if isinstance(op_or_name, Operator):
        if given:
            raise ValueError(f"add_op(op): {sorted(given)} cannot be combined with an operator "
                             "instance; set them in its traits() / methods")
        op_name = op_or_name.op_name if name is _UNSET or name is None else str(name)
        if not isinstance(op_or_name, BaseOp) or not _speaks_records(op_or_name):
            # implements the engine's block face itself
            op_or_name.name = op_name
            return op_or_name
        return UserOp(op_or_name, op_name, function_form=False)
    if op_or_name is None:
        raise ValueError("add_op needs an operator name (function form: add_op('name', "
                         "process_many=..., preserves_cursor_order=...)) or a BaseOp instance"
                         + ("; pass the name positionally, not as name=" if name is not _UNSET
                            else ""))
    if name is not _UNSET:
        raise ValueError("add_op function form: pass the name positionally, not as name=")
    if not isinstance(op_or_name, str) or not op_or_name:
        raise TypeError(f"add_op: expected a name or a BaseOp instance, got "
                        f"{type(op_or_name).__name__}")
    missing = [k for k in ("process_many", "preserves_cursor_order") if k not in given]
    if missing:
        raise ValueError(f"add_op({op_or_name!r}): {', '.join(missing)} required")
    if not callable(process_many):
        raise TypeError(f"add_op({op_or_name!r}): process_many must be callable")
    if given.get("stall_on_epoch_boundary"):
        raise ValueError("stall_on_epoch_boundary=True is not supported: Zephon flushes "
                         "accumulators only at the end of the stream")
    par = int(given.get("parallelism", 1))
    if par < 1:
        raise ValueError(f"add_op({op_or_name!r}): parallelism must be >= 1, got {par}")
    traits = OpTraits(preserves_cursor_order=bool(preserves_cursor_order), parallelism=par,
                      indexable=bool(given.get("indexable", False)),
                      batch_shape_sensitive=bool(given.get("batch_shape_sensitive", False)),
                      requires_serial_state=bool(given.get("requires_serial_state", False)),
                      calibration_replayable=bool(given.get("calibration_replayable", False)))
    fop = FunctionOp(op_or_name, process_many=process_many, traits=traits,
                     accumulator=given.get("accumulator"), process_one=given.get("process_one"),
                     validation_samples=given.get("validation_samples"))
    return UserOp(fop, op_or_name, function_form=True)


def _speaks_records(op: BaseOp) -> bool:
    return type(op).process_block is BaseOp.process_block
