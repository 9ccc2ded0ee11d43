"""Where the engine reads chunks from: ``lane_chunk(lane, L, chunk_id)`` by random access.

``StaticMixtureWorkSource`` answers that directly. Two wrappers cover the rest:

- ``CloneProtocolSource`` adapts a user-written ``WorkSource`` that only speaks the reference's
  streaming protocol (``clone_for_lane`` once per lane, then ``next_chunk()`` until None). Each
  lane's clone is pulled in order and numbered 0, 1, 2, ...; a chunk asked for again (restore
  re-fetches the records a buffer held) is read back on a second clone. When the source
  overrides ``state_dict``/``load_state_dict`` (the protocol says restoring must continue the
  exact sequence), the state before every chunk still needed is kept, a checkpoint stores the
  one before the oldest chunk it names, and a restore or read-back starts there. Without them
  a read-back or restore replays the lane's chunks from its first (exact, costs one
  ``next_chunk`` per chunk already read; no data is fetched for them).
- ``ReorderedChunks`` applies ``options(mixture_config=MixtureReadConfig(...))``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from zephon.work.base import WorkChunk, WorkSource
from zephon.work.read_config import MixtureReadConfig, coerce


def speaks_clone_protocol(ws: Any) -> bool:
    return all(hasattr(ws, a) for a in ("next_chunk", "clone_for_lane", "datasets_by_id"))


def engine_source(ws: Any, mixture_config: Any = None,
                  restore: Mapping[int, dict] | None = None) -> Any:
    src = ws if hasattr(ws, "lane_chunk") else CloneProtocolSource(ws)
    if isinstance(src, CloneProtocolSource):
        for lane, state in (restore or {}).items():
            src.seed_lane(lane, state["base"].get("source"))
    config = coerce(mixture_config)
    if config is not None and not config.is_default:
        src = ReorderedChunks(src, config)
    return src


def _has_own(ws: Any, name: str) -> bool:
    fn = getattr(type(ws), name, None)
    return fn is not None and fn is not getattr(WorkSource, name, None)


def _plain(state: Any, what: str) -> Any:
    """A deep, JSON-only copy of a user state (checkpoints are JSON)."""
    try:
        return json.loads(json.dumps(state))
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what}: state_dict() must return JSON-serializable data: {e}") from e


class _Cursor:
    """One clone of a lane, pulled in order; ``next_id`` is the id of its next chunk."""

    def __init__(self, clone: Any, next_id: int) -> None:
        self.clone = clone
        self.next_id = next_id
        self.last: tuple[int, WorkChunk | None] | None = None


class CloneProtocolSource:
    """Random access over a user ``WorkSource``'s lane clones (see the module docstring)."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.name = type(source).__name__
        ids = source.datasets_by_id
        if not isinstance(ids, Mapping) or sorted(ids) != list(range(len(ids))):
            raise ValueError(f"{self.name}.datasets_by_id must map 0..n-1 to datasets, got keys "
                             f"{sorted(ids) if isinstance(ids, Mapping) else type(ids).__name__}")
        comp = dict(source.component_ids())
        vals = list(comp.values())
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in vals) \
                or len(set(vals)) != len(vals):
            raise ValueError(f"{self.name}.component_ids() must give each component a unique "
                             f"int >= 0, got {comp}")
        self.names = {v: k for k, v in comp.items()}
        hook = getattr(source, "continues_after_exhaustion", None)
        continuing = frozenset() if hook is None else hook()
        if not isinstance(continuing, (set, frozenset)) or not set(continuing) <= set(comp):
            raise ValueError(f"{self.name}.continues_after_exhaustion() must return a frozenset "
                             f"of component names ({sorted(comp)}), got {continuing!r}")
        self.continuing = frozenset(continuing)  # components that repeat after running out
        self.exact = _has_own(source, "state_dict") and _has_own(source, "load_state_dict")
        self._lanes: dict[int, dict] = {}
        self._seeds: dict[int, dict] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_lanes"] = {}  # clones are made in the process that reads
        state.pop("_lock")
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def datasets_by_id(self) -> Mapping[int, Any]:
        return self.source.datasets_by_id

    def component_ids(self) -> dict[str, int]:
        return dict(self.source.component_ids())

    def seed_lane(self, lane: int, point: dict | None) -> None:
        """Resume lane ``lane`` from a checkpoint's ``{"chunk": k, "state": state}``."""
        if point is not None and self.exact:
            self._seeds[int(lane)] = point

    # -- reading ---------------------------------------------------------------------------------

    def _clone(self, lane: int, L: int, point: dict | None) -> _Cursor:
        clone = self.source.clone_for_lane(lane, L)
        if point is None:
            return _Cursor(clone, 0)
        clone.load_state_dict(point["state"])
        return _Cursor(clone, int(point["chunk"]))

    def _lane(self, lane: int, L: int) -> dict:
        st = self._lanes.get(lane)
        if st is None:
            seed = self._seeds.get(lane)
            main = self._clone(lane, L, seed)
            st = self._lanes[lane] = {"L": L, "main": main, "back": None, "end": None,
                                      "exhausted": set(), "states": {}}
            if seed is not None:
                st["states"][main.next_id] = seed["state"]
        if st["L"] != L:
            raise RuntimeError(f"lane {lane} was cloned for {st['L']} lanes, now asked for {L}")
        return st

    def lane_chunk(self, lane_id: int, canonical_replicas: int, chunk_id: int) -> WorkChunk | None:
        with self._lock:
            st = self._lane(int(lane_id), int(canonical_replicas))
            c = int(chunk_id)
            if st["end"] is not None and c >= st["end"]:
                return None
            main = st["main"]
            if c >= main.next_id or (main.last is not None and main.last[0] == c):
                return self._advance(st, main, c, record=True)
            back = st["back"]
            reusable = back is not None and (back.next_id <= c or (
                back.last is not None and back.last[0] == c))
            if not reusable:  # read back from the nearest kept state (or the lane's start)
                back = st["back"] = self._read_back_cursor(st, int(lane_id), c)
            return self._advance(st, back, c, record=False)

    def _read_back_cursor(self, st: dict, lane: int, c: int) -> _Cursor:
        starts = [k for k in st["states"] if k <= c]
        point = {"chunk": max(starts), "state": st["states"][max(starts)]} if starts else None
        return self._clone(lane, st["L"], point)

    def _advance(self, st: dict, cur: _Cursor, c: int, *, record: bool) -> WorkChunk | None:
        if cur.last is not None and cur.last[0] == c:
            return cur.last[1]
        while cur.next_id <= c:
            if record and self.exact:
                st["states"][cur.next_id] = _plain(cur.clone.state_dict(), self.name)
            chunk = self._checked(st, cur.clone.next_chunk(), cur.next_id, record)
            cur.last = (cur.next_id, chunk)
            if chunk is None:
                st["end"] = cur.next_id
                return None
            cur.next_id += 1
        return cur.last[1] if cur.last is not None and cur.last[0] == c else None

    def _checked(self, st: dict, chunk: Any, k: int, record: bool) -> WorkChunk | None:
        if chunk is None:
            return None
        if not isinstance(chunk, WorkChunk):
            raise TypeError(f"{self.name}.next_chunk() returned {type(chunk).__name__}: return a "
                            "WorkChunk or None")
        ids = np.unique(chunk.dataset_id)
        unknown = [int(d) for d in ids if int(d) not in self.names]
        if unknown:
            raise ValueError(f"{self.name}: chunk {k} points into dataset id(s) {unknown}, which "
                             f"component_ids() does not declare ({self.names})")
        if record:
            back = sorted(st["exhausted"] & {self.names[int(d)] for d in ids})
            if back:
                raise ValueError(f"{self.name}: chunk {k} reads component(s) {back} after a "
                                 "chunk declared them exhausted")
            st["exhausted"] |= set(chunk.source_exhausted)
        return chunk

    # -- checkpoints -----------------------------------------------------------------------------

    def resume_point(self, lane_id: int, base: dict) -> dict | None:
        """What a lane checkpoint at ``base`` stores of this source: the state before the
        oldest chunk the base still names. States before it are dropped (the oldest chunk a
        lane names never moves back)."""
        if not self.exact:
            return None
        with self._lock:
            st = self._lanes.get(int(lane_id))
            if st is None:
                return self._seeds.get(int(lane_id))
            k = min_chunk_id(base)
            k = st["main"].next_id if k is None else k
            states = st["states"]
            for old in [x for x in states if x < k]:
                del states[old]
            if k == st["main"].next_id and k not in states:
                states[k] = _plain(st["main"].clone.state_dict(), self.name)
            return {"chunk": k, "state": states[k]} if k in states else None


def min_chunk_id(obj: Any) -> int | None:
    """The smallest chunk id a lane's base state names: its position and every cursor held,
    recipes of combined rows included (JSON texts or their decoded lists)."""
    found: list[int] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if "chunk_id" in x:
                v = np.asarray(x["chunk_id"])
                if v.size:
                    found.append(int(v.min()))
            if isinstance(x.get("in"), list):  # a user-operator recipe: [[chunk, offset, ...]]
                found.extend(int(e[0]) for e in x["in"] if isinstance(e, list) and e)
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, str) and x[:1] in ("{", "["):
            try:
                walk(json.loads(x))
            except ValueError:
                pass

    position = obj.get("position") if isinstance(obj, dict) else None
    if position:
        found.append(int(position[0]))
    walk(obj.get("ops") if isinstance(obj, dict) else obj)
    return min(found) if found else None


class ReorderedChunks:
    """Chunks read in the order ``options(mixture_config=...)`` asks for."""

    def __init__(self, inner: Any, config: MixtureReadConfig) -> None:
        self.inner = inner
        self.config = config

    @property
    def datasets_by_id(self) -> Mapping[int, Any]:
        return self.inner.datasets_by_id

    def component_ids(self) -> dict[str, int]:
        return self.inner.component_ids()

    def lane_chunk(self, lane_id: int, canonical_replicas: int, chunk_id: int) -> WorkChunk | None:
        chunk = self.inner.lane_chunk(lane_id, canonical_replicas, chunk_id)
        return None if chunk is None else chunk.reordered(self.config)

    def resume_point(self, lane_id: int, base: dict) -> dict | None:
        point = getattr(self.inner, "resume_point", None)
        return None if point is None else point(lane_id, base)
