"""``stateful_transform``: a user's per-lane state folded over the records, serially, in order.

``push(state, [record]) -> (new_state, outputs)`` is called with one record at a time, so its
results never depend on how the engine cuts the stream into blocks (micro-batch size, workers).

Checkpoints without serialising user state: a lane's state is a deterministic fold of the records
pushed since it was last created, so a checkpoint names those records by cursor (the *replay
window*) and restore re-derives them and pushes them again through a fresh ``init_state()``,
discarding the outputs (they were emitted before the checkpoint). The window is cut whenever
the state starts over: after ``flush`` / ``should_flush``, and whenever the state compares equal
to a fresh ``init_state()`` (a pairing state back at ``None``, an emptied buffer), so for most
operators it holds a handful of records. A state that never returns to its initial value (a
sliding context, a running counter) would make the window grow with the stream; for those, pass
``state_records`` (the input records the state holds) and ``state_from_records`` (the state
rebuilt from them): the window is then exactly what ``state_records`` returns, an O(state)
checkpoint. We chose this over asking users to serialise their state: cursors keep checkpoints
small and data-free, and replay needs no code at all from the common operator.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from zephon.block import Block
from zephon.ops.base import LaneAccumulator, OpContext, Operator, OpTraits, StatefulOp
from zephon.ops.user_calls import call_user, to_blocks, user_outputs
from zephon.state import recipes
from zephon.state.held_store import HeldStore
from zephon.state.refs import refs_of
from zephon.types import SampleRecord, records_from_block

WINDOW_WARN = 10_000
_NONE: Any = object()  # a lane whose state has not been created yet


def _callable(name: str, what: str, fn: Any, required: bool = False) -> None:
    if fn is None and not required:
        return
    if not callable(fn):
        raise TypeError(f"stateful_transform({name!r}): {what} must be callable")


def same_value(a: Any, b: Any) -> bool:
    """``a == b`` when that is a plain truth value (numpy arrays and odd types: not equal)."""
    try:
        r = a == b
    except Exception:  # a type whose comparison fails cannot be proven equal
        return False
    return r is True or (isinstance(r, (bool, np.bool_)) and bool(r))


def holds_records(state: Any, depth: int = 2) -> bool:
    """Whether a state keeps SampleRecords (looked for in containers, two levels deep)."""
    if isinstance(state, SampleRecord):
        return True
    if depth and isinstance(state, dict):
        state = list(state.values())
    if depth and isinstance(state, (list, tuple, set, frozenset)):
        return any(holds_records(x, depth - 1) for x in state)
    return False


class StatefulTransformOp(StatefulOp):
    """The serial operator of ``stateful_transform``; its rows are rebuilt from recipes
    (``zephon.state.recipes``), so it ``combines_records``."""

    def __init__(self, name: str, *, init_state: Callable[[], Any],
                 push: Callable[[Any, list], tuple], flush: Callable[[Any], list] | None = None,
                 should_flush: Callable[[Any], bool] | None = None,
                 preserves_cursor_order: bool = True, indexable: bool = False,
                 state_records: Callable[[Any], list] | None = None,
                 state_from_records: Callable[[list], Any] | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("stateful_transform needs a name")
        _callable(name, "init_state", init_state, required=True)
        _callable(name, "push", push, required=True)
        _callable(name, "flush", flush)
        _callable(name, "should_flush", should_flush)
        _callable(name, "state_records", state_records)
        _callable(name, "state_from_records", state_from_records)
        if (state_records is None) != (state_from_records is None):
            raise ValueError(f"stateful_transform({name!r}): pass both state_records and "
                             "state_from_records, or neither")
        self.name = name
        self.init_state = init_state
        self.push_fn = push
        self.flush_fn = flush
        self.should_flush_fn = should_flush
        self.state_records_fn = state_records
        self.state_from_records_fn = state_from_records
        self.op_traits = OpTraits(preserves_cursor_order=bool(preserves_cursor_order),
                                  indexable=bool(indexable), requires_serial_state=True,
                                  combines_records=True)

    def traits(self) -> OpTraits:
        return self.op_traits

    def new_lane(self, lane_id: int, ctx: OpContext) -> LaneAccumulator:
        return StatefulLane(self, lane_id, bool(ctx.get("recipes_needed", True)))

    def check_state(self, state, view, field: str) -> None:
        from zephon.state import checkpoint_ops

        checkpoint_ops.stateful_state(self, state, view, field)

    def fingerprint(self) -> dict:
        def fn(f: Any) -> str | None:
            return None if f is None else f"{f.__module__}.{getattr(f, '__qualname__', '?')}"

        return {"init_state": fn(self.init_state), "push": fn(self.push_fn),
                "flush": fn(self.flush_fn), "should_flush": fn(self.should_flush_fn),
                "state_records": fn(self.state_records_fn),
                "preserves_cursor_order": self.op_traits.preserves_cursor_order}

    # -- user callbacks, checked and named -------------------------------------------------

    def call_push(self, state: Any, rec: SampleRecord) -> tuple[Any, list]:
        res = call_user(self.name, self.push_fn, (state, [rec]), [rec])
        if not (isinstance(res, tuple) and len(res) == 2):
            raise TypeError(f"operator {self.name}: push must return (new_state, outputs), got "
                            f"{type(res).__name__}")
        return res[0], user_outputs(self.name, res[1], "push")

    def call_flush(self, state: Any) -> list:
        if self.flush_fn is None:
            return []
        return user_outputs(self.name, call_user(self.name, self.flush_fn, (state,), []), "flush")

    def call_should_flush(self, state: Any, rec: SampleRecord) -> bool:
        if self.should_flush_fn is None:
            return False
        return bool(call_user(self.name, self.should_flush_fn, (state,), [rec]))

    def call_state_records(self, state: Any) -> list:
        out = call_user(self.name, self.state_records_fn, (state,), [])
        if not isinstance(out, (list, tuple)) or not all(isinstance(r, SampleRecord) for r in out):
            raise TypeError(f"operator {self.name}: state_records must return a list of the "
                            "SampleRecords the state holds")
        return list(out)

    def rebuild_state(self, records: list[SampleRecord]) -> Any:
        """The state that held / was folded from ``records`` (as they were pushed)."""
        if self.state_from_records_fn is not None:
            return call_user(self.name, self.state_from_records_fn, (records,), records)
        state = call_user(self.name, self.init_state, (), [])
        for r in records:
            state, _ = self.call_push(state, r)  # emitted before the checkpoint: discarded
        return state

    # -- restore: rows rebuilt from their recipes ------------------------------------------

    def recipe_inputs(self, refs: dict) -> dict:
        return recipes.recipe_inputs(refs)

    def rebuild_rows(self, refs: dict, inputs: Block) -> Block:
        index = recipes.key_index(inputs)
        done: dict[tuple, list] = {}
        rows, texts = [], []
        for rec in refs["recipe"]:
            r = recipes.decode(rec)
            src = recipes.rows_of(r, index)
            key = (tuple(src), r["k"])
            if key not in done:
                recs = records_from_block(inputs.take(src))
                if r["k"] == "f":
                    outs = self.call_flush(self.rebuild_state(recs))
                else:
                    state, outs = self.call_push(self.rebuild_state(recs[:-1]), recs[-1])
                    if r["k"] == "pf":
                        outs = self.call_flush(state)
                done[key] = outs
            if r["i"] >= len(done[key]):
                raise RuntimeError(f"restore: operator {self.name} gave fewer outputs when "
                                   "replayed than before (is push deterministic?)")
            rows.append(done[key][r["i"]])
            texts.append(recipes.encode(rec))
        return recipes.attach(to_blocks(self.name, rows)[0], texts)


class StatefulLane(LaneAccumulator):
    def __init__(self, op: StatefulTransformOp, lane_id: int, recipes_needed: bool) -> None:
        self.op = op
        self.lane_id = lane_id
        self.emit_recipes = recipes_needed  # the plan's word: a later serial op may hold rows
        self.state: Any = _NONE
        self.blank: Any = _NONE  # a fresh init_state(), never handed to push: compared against
        self.store = HeldStore()
        self.next_id = 0
        self.window: list[tuple[recipes.CursorKey, int, str]] = []  # (cursor, arrival id, fragment)
        self.warned = False

    def push(self, block: Block) -> list[Block]:
        if not len(block):
            return []
        if block.is_batch:
            raise TypeError(f"stateful_transform {self.op.name} must come before batch()")
        op = self.op
        ids = np.arange(self.next_id, self.next_id + len(block), dtype=np.int64)
        self.next_id += len(block)
        self.store.add(block, ids)
        keys = recipes.cursor_keys(block)
        emit = self.emit_recipes
        frags = recipes.fragments(block) if emit else [""] * len(block)
        outs: list = []
        texts: list[str] = []
        for k, rec in enumerate(records_from_block(block)):
            if self.state is _NONE:
                self.state = call_user(op.name, op.init_state, (), [rec])
            self.window.append((keys[k], int(ids[k]), frags[k]))
            self.state, produced = op.call_push(self.state, rec)
            body = None
            if produced and emit:
                body = ",".join(f for _, _, f in self.window)
                texts.extend(recipes.make("p", m, body) for m in range(len(produced)))
            outs.extend(produced)
            if op.call_should_flush(self.state, rec):
                flushed = op.call_flush(self.state)
                if flushed and emit:
                    body = body or ",".join(f for _, _, f in self.window)
                    texts.extend(recipes.make("pf", m, body) for m in range(len(flushed)))
                outs.extend(flushed)
                self._start_over()
            else:
                self._trim(rec)
        self._prune()
        blocks = to_blocks(op.name, outs, self.lane_id)
        if blocks and emit:
            blocks = [recipes.attach(blocks[0], texts)]
        return blocks

    def _start_over(self) -> None:
        self.state = _NONE
        self.window = []

    def _trim(self, rec: SampleRecord) -> None:
        """Cut the replay window down to what rebuilding the current state needs."""
        op = self.op
        if op.state_records_fn is not None:
            by_key = {key: (key, aid, frag) for key, aid, frag in self.window}
            kept = []
            for r in op.call_state_records(self.state):
                m = r.meta
                entry = by_key.get((m.chunk_id, m.chunk_offset, tuple(m.lineage)))
                if entry is None:
                    raise RuntimeError(f"operator {op.name}: state_records returned sample "
                                       f"{m.sample_id}, which is not a record pushed into the "
                                       "current state (return the input records, as pushed)")
                kept.append(entry)
            self.window = kept
            return
        if self.blank is _NONE:
            self.blank = call_user(op.name, op.init_state, (), [rec])
        if same_value(self.state, self.blank):
            self.window = []  # the state is back at its start: replay can begin here
        elif len(self.window) > WINDOW_WARN and not self.warned:
            self.warned = True
            warnings.warn(f"stateful_transform {op.name}: its state has not returned to "
                          f"init_state() for {len(self.window)} records, and checkpoints name "
                          "every one of them; give should_flush, or state_records and "
                          "state_from_records, to keep checkpoints small", stacklevel=2)

    def _prune(self) -> None:
        keep = {aid for _, aid, _ in self.window}
        drop = self.store.ids[~np.isin(self.store.ids, np.fromiter(keep, np.int64, len(keep)))]
        self.store.remove(drop)

    def flush(self) -> list[Block]:
        op = self.op
        if self.state is _NONE:
            return []
        if op.flush_fn is None:
            if holds_records(self.state):
                warnings.warn(f"stateful_transform {op.name} has no flush: what its state "
                              "still held at the end of the stream is lost", stacklevel=2)
            self._start_over()
            return []
        outs = op.call_flush(self.state)
        texts = []
        if outs and self.emit_recipes:
            body = ",".join(f for _, _, f in self.window)
            texts = [recipes.make("f", m, body) for m in range(len(outs))]
        self._start_over()
        self.store.set(None, np.empty(0, dtype=np.int64))
        blocks = to_blocks(op.name, outs, self.lane_id)
        return [recipes.attach(blocks[0], texts)] if blocks and texts else blocks

    # -- checkpoints -------------------------------------------------------------------------

    def held(self) -> int:
        return len(self.window)

    def get_state(self) -> dict:
        held = self.store.take(np.array([aid for _, aid, _ in self.window], dtype=np.int64)) \
            if self.window else None
        return {"held": refs_of(held), "live": self.state is not _NONE}

    def set_state(self, state: dict, held: Block | None) -> None:
        self._start_over()
        n = 0 if held is None else len(held)
        ids = np.arange(n, dtype=np.int64)
        self.store.set(held, ids)
        self.next_id = n
        if held is not None and n:
            frags = recipes.fragments(held) if self.emit_recipes else [""] * n
            self.window = [(k, i, f) for i, (k, f) in
                           enumerate(zip(recipes.cursor_keys(held), frags))]
        if n or state.get("live"):
            recs = records_from_block(held) if n else []
            self.state = self.op.rebuild_state(recs)


def build_stateful_transform(name: str, *, transform: Callable[[list], list] | None = None,
                             parallelism: int = 1, **kw: Any) -> list[Operator]:
    """The serial operator, and the optional stateless ``transform`` after it."""
    ops: list[Operator] = [StatefulTransformOp(name, **kw)]
    if transform is not None:
        from zephon.ops.add_op import FunctionOp, UserOp

        _callable(name, "transform", transform)
        if int(parallelism) < 1:
            raise ValueError(f"stateful_transform({name!r}): parallelism must be >= 1")
        traits = OpTraits(preserves_cursor_order=True, parallelism=int(parallelism))
        fop = FunctionOp(f"{name}.transform", process_many=transform, traits=traits)
        ops.append(UserOp(fop, f"{name}.transform", function_form=True, auto_validate=False))
    return ops
