"""What a checkpoint's lane states must satisfy beyond their shape, given this pipeline.

Every check here needs only the work source's pointers (a lane's chunks are pure functions of
the configuration, computed without reading a shard): positions inside the lane's stream, held
cursors before the position and inside their chunks, each accumulator's ids, counters and
buffers consistent with each other, and what a state repeats about its records (a shuffle
buffer's identity keys, a mixture buffer's component, a packing group) equal to what their
pointers say. Checks that need the records themselves (a token range inside its document, a
split child that exists) run when restore re-derives them, with the same error type.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from zephon.errors import CheckpointError
from zephon.state import checkpoint_schema as S
from zephon.state.fingerprint import check_compatible
from zephon.state.view import PipelineView

_MAX_CHUNK = 1 << 40       # a lane never reaches this many chunks: larger ids are corrupt
_MAX_RECIPE_DEPTH = 16     # combining operators chained deeper than this do not exist


def fail(field: str, message: str) -> None:
    raise CheckpointError(field, message)


def first_bad(field: str, bad: np.ndarray, message: str) -> None:
    """Refuse with the path of the first element where ``bad`` holds."""
    bad = np.asarray(bad).reshape(-1)
    if bad.any():
        fail(f"{field}[{int(np.flatnonzero(bad)[0])}]", message)


def array(nd: dict, field: str, dtype: str, ndim: int) -> np.ndarray:
    """An encoded array (``refs.encode``) of the dtype and dimensions its field has."""
    shape, data = nd["shape"], nd["data"]
    if nd["__nd__"] != dtype:
        fail(f"{field}.__nd__", f"dtype must be {dtype!r}, got {nd['__nd__']!r}")
    if len(shape) != ndim:
        fail(f"{field}.shape", f"must have {ndim} dimension(s), got {shape}")
    if int(np.prod(shape)) != len(data):
        fail(f"{field}.shape", f"{shape} does not match its {len(data)} values")
    out = np.asarray(data, dtype=np.int64).reshape(shape)
    if dtype == "<i4":
        first_bad(field, (out < -(1 << 31)) | (out >= 1 << 31), "outside int32")
    return out


def int_rows(rows: list, width: int, field: str, schema: Any) -> np.ndarray:
    """``rows`` as an (n, width) int64 array when each is a list of ``width`` integers; else
    the first bad element is named by checking ``rows`` against ``schema`` (slow, but only
    on failure)."""
    if (not rows or (set(map(type, rows)) == {list} and set(map(len, rows)) == {width}
                     and set(map(type, chain.from_iterable(rows))) == {int})):
        try:
            return np.asarray(rows, dtype=np.int64).reshape(len(rows), width)
        except OverflowError:
            pass
    S.parse(schema, rows, field)
    fail(field, "malformed rows")  # unreachable: the schema refuses what got here


def ids(nd: dict, field: str, n: int, below: int | None = None) -> np.ndarray:
    """Arrival ids of held records: one per record, strictly increasing, non-negative."""
    a = array(nd, field, "<i8", 1)
    if len(a) != n:
        fail(f"{field}.shape", f"{len(a)} ids for {n} held records")
    first_bad(field, a < 0, "negative id")
    first_bad(field, np.r_[False, np.diff(a) <= 0] if len(a) else a, "ids must increase")
    if below is not None:
        first_bad(field, a >= below, f"id not below next_id={below}")
    return a


class LaneView:
    """One lane of the checkpoint against the work source: its chunks, computed on demand."""

    def __init__(self, ws: Any, lanes: int, lane: int, prefix: str) -> None:
        self.ws, self.lanes, self.lane, self.prefix = ws, lanes, lane, prefix
        self._chunks: dict[int, Any] = {}
        self.position = (0, 0)

    @property
    def random_access(self) -> bool:
        """A streaming user source (``next_chunk`` only) has no chunk to look up without
        reading its stream: its cursors are checked for form only, and its own
        ``load_state_dict`` checks where it resumes."""
        return hasattr(self.ws, "lane_chunk")

    def chunk(self, c: int) -> Any:
        if c not in self._chunks:
            self._chunks[c] = self.ws.lane_chunk(self.lane, self.lanes, c)
        return self._chunks[c]

    def set_position(self, pos: list[int]) -> None:
        field = f"{self.prefix}.base.position"
        c, o = pos
        if c >= _MAX_CHUNK:
            fail(f"{field}[0]", f"chunk {c} is beyond any stream")
        self.position = (c, o)
        if not self.random_access:
            return
        chunk = self.chunk(c)
        if chunk is None:
            if o != 0 or (c > 0 and self.chunk(c - 1) is None):
                fail(field, f"chunk {c} of lane {self.lane} does not exist in this work source")
        elif o > len(chunk):
            fail(f"{field}[1]", f"offset {o} is past the end of chunk {c} ({len(chunk)} pointers)")
        self.position = (c, o)

    def cursors(self, field: str, chunk_id: np.ndarray, offset: np.ndarray) -> None:
        """Cursors name pointers the lane had read before its position."""
        first_bad(f"{field}.chunk_id", chunk_id < 0, "negative chunk id")
        first_bad(f"{field}.chunk_offset", offset < 0, "negative offset")
        pc, po = self.position
        first_bad(f"{field}.chunk_offset", (chunk_id > pc) | ((chunk_id == pc) & (offset >= po)),
                  f"names a record at or after the lane's position ({pc}, {po}): it was not "
                  "read yet when this state was taken")
        if not self.random_access:
            return
        for c in np.unique(chunk_id).tolist():
            sel = chunk_id == c
            chunk = self.chunk(int(c))
            n = 0 if chunk is None else len(chunk)
            first_bad(f"{field}.chunk_offset", sel & (offset >= n),
                      f"offset outside chunk {c} ({n} pointers)")

    def pointers(self, chunk_id: np.ndarray, offset: np.ndarray) -> tuple[np.ndarray, ...]:
        """(dataset_id, shard_id, sample_idx) of checked cursors."""
        ds, sh, sa = (np.empty(len(chunk_id), dtype=np.int64) for _ in range(3))
        for c in np.unique(chunk_id).tolist():
            sel = chunk_id == c
            ch = self.chunk(int(c))
            ds[sel], sh[sel], sa[sel] = (ch.dataset_id[offset[sel]], ch.shard_id[offset[sel]],
                                         ch.sample_idx[offset[sel]])
        return ds, sh, sa


class Held:
    """Decoded, checked cursors of the records one accumulator holds."""

    def __init__(self, view: LaneView, refs: dict | None, field: str) -> None:
        self.view, self.field = view, field
        self.recipes: list | None = None
        if refs is None:
            self.chunk_id = self.offset = np.empty(0, dtype=np.int64)
            self.lineage = np.empty((0, 0), dtype=np.int64)
            return
        self.chunk_id = array(refs["chunk_id"], f"{field}.chunk_id", "<i8", 1)
        self.offset = array(refs["chunk_offset"], f"{field}.chunk_offset", "<i8", 1)
        self.lineage = array(refs["lineage"], f"{field}.lineage", "<i4", 2)
        n = len(self.chunk_id)
        if len(self.offset) != n or len(self.lineage) != n:
            fail(field, f"chunk_id, chunk_offset and lineage name {n}, {len(self.offset)} and "
                        f"{len(self.lineage)} records")
        lineage(self.lineage, f"{field}.lineage")
        view.cursors(field, self.chunk_id, self.offset)
        if refs.get("padding_length") is not None:
            pad = array(refs["padding_length"], f"{field}.padding_length", "<i8", 1)
            if len(pad) != n:
                fail(f"{field}.padding_length.shape", f"{len(pad)} values for {n} records")
            first_bad(f"{field}.padding_length", pad < 0, "negative padding")
        if refs.get("recipe") is not None:
            self.recipes = refs["recipe"]
            if len(self.recipes) != n:
                fail(f"{field}.recipe", f"{len(self.recipes)} recipes for {n} records")
            for i, r in enumerate(self.recipes):
                recipe(view, r, f"{field}.recipe[{i}]", 0)

    def __len__(self) -> int:
        return len(self.chunk_id)

    def pointers(self) -> tuple[np.ndarray, ...]:
        return self.view.pointers(self.chunk_id, self.offset)


def lineage(lin: np.ndarray, field: str) -> None:
    """Child indices, padded with -1 at the end only (the identity path stops at the first -1)."""
    first_bad(field, lin < -1, "lineage entries are child indices (>= 0) or -1 padding")
    if lin.shape[1] > 1:
        first_bad(field, np.any((lin[:, :-1] < 0) & (lin[:, 1:] >= 0), axis=1),
                  "-1 padding followed by a child index")


def recipe(view: LaneView, r: Any, field: str, depth: int) -> None:
    """A packed row's segments (a list) or a user operator's replay text (a JSON string)."""
    if depth > _MAX_RECIPE_DEPTH:
        fail(field, "recipes nest too deeply")
    if r is None and depth:
        return
    if isinstance(r, str):
        try:
            r = json.loads(r)
        except ValueError:
            fail(field, "recipe text is not JSON")
    if isinstance(r, list):
        segs = [S.parse(S.PACK_SEGMENT, s, f"{field}[{i}]") for i, s in enumerate(r)]
        if not segs:
            fail(field, "a packed row has no segments")
        cursors = [(s["chunk_id"], s["chunk_offset"], s["lineage"], s.get("inner"))
                   for s in segs]
    else:
        rec = S.parse(S.USER_RECIPE, r, field)
        field = f"{field}.in"
        cursors = [S.parse(S.RECIPE_INPUT, c, f"{field}[{i}]") for i, c in enumerate(rec["in"])]
    c = np.asarray([x[0] for x in cursors], dtype=np.int64)
    o = np.asarray([x[1] for x in cursors], dtype=np.int64)
    view.cursors(field, c, o)
    for i, (_, _, lin, inner) in enumerate(cursors):
        if any(x < -1 for x in lin):
            fail(f"{field}[{i}].lineage", "lineage entries are child indices or -1 padding")
        if inner is not None:
            recipe(view, inner, f"{field}[{i}].inner", depth + 1)


# -- the document --------------------------------------------------------------------------------

def check_document(doc: dict, view: PipelineView) -> int | None:
    """Everything but the digests; returns the checkpoint's micro-batch size where this
    pipeline's differs (``fingerprint.check_compatible``)."""
    model = S.parse(S.DOCUMENT, doc)
    signed = model["version"] >= 2
    if signed != (model.get("digest") is not None):
        fail("digest", "required from version 2 on" if signed else "version 1 has no digest")
    L = view.canonical_replicas
    if model["canonical_replicas"] != L:
        fail("canonical_replicas",
             f"checkpoint was taken with canonical_replicas={model['canonical_replicas']}, this "
             f"pipeline has {L}: pass options(canonical_replicas={model['canonical_replicas']})")
    old_batch = check_compatible(doc, view)
    ws = _sized_source(view.work_source, model["token_ratios"])
    for key, lane in model["lanes"].items():
        lane_id = int(key)
        if lane_id >= L:
            fail(f"lanes[{key}]", f"no such lane: canonical_replicas={L}")
        if lane is None:
            continue
        if signed != (lane.get("digest") is not None):
            fail(f"lanes[{key}].digest", "required from version 2 on" if signed
                 else "version 1 has no digest")
        _check_lane(lane, LaneView(ws, L, lane_id, f"lanes[{key}]"), view.serial_ops)
    missing = [lane for lane in view.owned_lanes if str(lane) not in model["lanes"]]
    if missing:
        fail(f"lanes[{missing[0]}]", f"missing, and this rank owns it (lanes {list(missing)} "
             "absent: join the ranks' checkpoints with merge_checkpoints)")
    return old_batch


def _check_lane(lane: dict, view: LaneView, serial: Sequence) -> None:
    prefix = view.prefix
    if lane["skip"] > lane["delivered"]:
        fail(f"{prefix}.skip", f"{lane['skip']} units since the base, {lane['delivered']} in all")
    view.set_position(lane["base"]["position"])
    ops = lane["base"]["ops"]
    if len(ops) != len(serial):
        fail(f"{prefix}.base.ops", f"{len(ops)} operator states, this pipeline has "
                                   f"{len(serial)} operators in its serial stage")
    for i, (op, state) in enumerate(zip(serial, ops)):
        field = f"{prefix}.base.ops[{i}]"
        if not op.traits().requires_serial_state:
            if state is not None:
                fail(field, f"{op.op_name} keeps no state, the checkpoint gives it one")
        elif state is None:
            fail(field, f"the state of {op.op_name} is missing")
        else:
            op.check_state(state, view, field)


def _sized_source(ws: Any, ratios: dict | None) -> Any:
    """The work source as the restored run will draw chunks: primed with the checkpoint's
    token ratios where it allocates tokens (on a copy: restore applies them later)."""
    if not hasattr(ws, "datasets_to_measure"):
        return ws
    if getattr(ws, "token_estimation", None) is None:
        if ratios is not None:
            fail("token_ratios", "this work source allocates samples: must be null")
        return ws
    names = list(ws.component_ids())
    if ratios is None or sorted(ratios) != sorted(names):
        fail("token_ratios", f"a tokens-per-byte ratio for each of {names} is needed")
    mine = ws.token_ratios
    if mine is None:
        import copy

        ws = copy.copy(ws)
        ws.set_token_ratios(ratios)
        mine = ws.token_ratios
    for n in names:
        if mine[n] != ratios[n]:
            fail(f"token_ratios.{n}", f"{ratios[n]!r}, but this work source uses {mine[n]!r}")
    return ws
