"""Shared pieces of the user-operator tests: a tiny in-memory corpus and user operators.

Module level, so worker processes import them by reference (the pickling of lambdas and
closures is tested separately).
"""

from __future__ import annotations

import json
import os

from zephon import Pipeline
from zephon.io import Dataset, InMemoryShard
from zephon.ops import (
    Accumulator,
    BaseOp,
    CountingAccumulator,
    OpContext,
    OpTraits,
    pack_meta,
    spawn_child,
)
from zephon.types import SampleBatch, SampleRecord
from zephon.work import StaticMixtureWorkSource


def make_source(seed: int = 3, chunk_size: int = 16) -> StaticMixtureWorkSource:
    a = Dataset.from_dict("a", {
        0: InMemoryShard([{"text": f"a{i}", "n": i} for i in range(40)]),
        1: InMemoryShard([{"text": f"a{i}", "n": i} for i in range(40, 70)])})
    b = Dataset.from_dict("b", {0: InMemoryShard([{"text": f"b{i}", "n": 1000 + i}
                                                  for i in range(50)])})
    return StaticMixtureWorkSource([a, b], {"a": 0.5, "b": 0.5}, seed=seed, chunk_size=chunk_size)


def make_pipeline(workers: int = 0, micro: int = 5, lanes: int = 2, **opts) -> Pipeline:
    return Pipeline(make_source()).options(num_workers=workers, canonical_replicas=lanes,
                                           micro_batch_size=micro, **opts)


def sig(unit) -> tuple:
    if isinstance(unit, SampleBatch):
        return ("batch", tuple(unit.ids), tuple(unit.lineage_paths),
                json.dumps(unit.block.payload_list(), sort_keys=True))
    m = unit.meta
    return ("record", m.sample_id, m.lane_id, m.chunk_id, m.chunk_offset, m.lineage,
            json.dumps(unit.payload, sort_keys=True))


def stream(p) -> list[tuple]:
    return [sig(u) for u in p]


def resume_matches(build, cuts, *, restore_opts: dict | None = None) -> list[dict]:
    """For each cut k: take k units, checkpoint, restore a fresh pipeline, compare the rest
    with an uninterrupted run. Returns the checkpoints (JSON round-tripped)."""
    full = stream(build())
    states = []
    for k in cuts:
        p = build()
        it = iter(p)
        head = [sig(next(it)) for _ in range(k)]
        state = json.loads(json.dumps(p.checkpoint()))
        p.close()
        q = build(**(restore_opts or {})).restore(state)
        tail = stream(q)
        assert head + tail == full, f"resume at {k} diverged"
        states.append(state)
    return states


def held_counts(state: dict, op_index: int) -> list[int]:
    """Records held by serial operator ``op_index`` in each lane's checkpoint base."""
    out = []
    for lane in state["lanes"].values():
        if lane is None:
            continue
        held = lane["base"]["ops"][op_index]
        refs = held and held.get("held")
        out.append(len(refs["chunk_id"]["data"]) if refs else 0)
    return out


# -- a stateful pairing operator: two records in, one out -------------------------------------


def pair_init():
    return None


def pair_push(state, records):
    out = []
    for r in records:
        if state is None:
            state = r
            continue
        meta = pack_meta(state.meta.cursor.child(0), [state.meta, r.meta], r.meta.lane_id)
        out.append(SampleRecord(meta, {"text": f"{state.payload['text']}+{r.payload['text']}",
                                       "n": state.payload["n"] + r.payload["n"]}))
        state = None
    return state, out


def pair_flush(state):
    return [] if state is None else [SampleRecord(state.meta, {"text": state.payload["text"],
                                                               "n": state.payload["n"]})]


# -- add_op callables --------------------------------------------------------------------------


def shout(records):
    for r in records:
        r.payload = {**r.payload, "text": r.payload["text"].upper()}
    return records


def group_sum(records):
    """A group op: each record learns the sum of ``n`` over its group (needs stable groups)."""
    total = sum(r.payload.get("n", 0) for r in records)
    for r in records:
        r.payload = {**r.payload, "group_sum": total, "group": len(records)}
    return records


def split_in_two(records):
    out = []
    for r in records:
        for i, part in enumerate((r.payload["text"][:1], r.payload["text"][1:])):
            out.append(SampleRecord(spawn_child(r.meta, i, is_last_child=i == 1),
                                    {"text": part, "n": r.payload.get("n", 0)}))
    return out


def counting3():
    return CountingAccumulator(max_batch=3)


class Tagger(BaseOp):
    """Instance form: setup loads a 'resource' once per worker and records the call in a file."""

    def __init__(self, marker_dir: str, suffix: str = "!") -> None:
        self.marker_dir = marker_dir
        self.suffix = suffix

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, parallelism=2)

    def setup(self, ctx: OpContext) -> None:
        super().setup(ctx)
        path = os.path.join(self.marker_dir, f"setup.{os.getpid()}.{id(self)}")
        with open(path, "w") as f:
            f.write(str(ctx.get("worker_id")))
        self.resource = {"suffix": self.suffix}  # the "heavy" resource

    def process_many(self, elems):
        for r in elems:
            r.payload = {**r.payload, "text": r.payload["text"] + self.resource["suffix"]}
        return elems


class GroupedPairs(BaseOp):
    """Instance form with an accumulator: groups of 2 become one combined record."""

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=False, batch_shape_sensitive=True)

    def accumulator(self, *, deterministic, ctx):
        return CountingAccumulator(max_batch=2)

    def process_many(self, elems):
        first = elems[0]
        meta = pack_meta(first.meta.cursor.child(0), [e.meta for e in elems], first.meta.lane_id)
        return [SampleRecord(meta, {"text": "&".join(e.payload["text"] for e in elems),
                                    "n": sum(e.payload["n"] for e in elems)})]

    def validation_samples(self):
        return [{"text": f"t{i}", "n": i} for i in range(12)]


# -- custom accumulators -------------------------------------------------------------------


class ByParity(Accumulator):
    """A custom grouping accumulator: records pair up with the next one of the same parity."""

    def __init__(self) -> None:
        self.buf: dict[tuple, list] = {}

    def push_many(self, elems):
        out = []
        for e in elems:
            key = (e.meta.lane_id, e.payload.get("n", e.payload.get("value", 0)) % 2)
            self.buf.setdefault(key, []).append(e)
            if len(self.buf[key]) == 2:
                out.append((self.buf.pop(key), 0))
        return out

    def flush(self, *, reset=False, lane_id=None):
        keys = [k for k in sorted(self.buf) if lane_id is None or k[0] == lane_id]
        return [(self.buf.pop(k), 0) for k in keys]

    def has_pending_data(self, lane_id=None):
        return any(v for k, v in self.buf.items() if lane_id is None or k[0] == lane_id)


class WarmUp(Accumulator):
    """Hidden state: a lane's first group has 2 records, later ones 4 (not a function of the
    records held)."""

    def __init__(self) -> None:
        self.lanes: dict[int, tuple[list, int]] = {}

    def push_many(self, elems):
        out = []
        for e in elems:
            buf, size = self.lanes.get(e.meta.lane_id, ([], 2))
            buf = buf + [e]
            if len(buf) == size:
                out.append((buf, 0))
                buf, size = [], 4
            self.lanes[e.meta.lane_id] = (buf, size)
        return out

    def flush(self, *, reset=False, lane_id=None):
        lanes = sorted(self.lanes) if lane_id is None else [lane_id]
        out = []
        for lane in lanes:
            buf, size = self.lanes.pop(lane, ([], 2))
            if buf:
                out.append((buf, 0))
            if not reset:
                self.lanes[lane] = ([], size)
        return out

    def has_pending_data(self, lane_id=None):
        return any(buf for lane, (buf, _) in self.lanes.items() if lane_id in (None, lane))
