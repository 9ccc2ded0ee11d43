"""ensure_mixture: per-lane buffers that keep the output on the target mixture (kernel:
MixtureBalancer). Components are datasets; weights are token counts or 1 per sample.

``warn_tolerance`` is honoured by the realised-mixture check of the training process
(``zephon.engine.observe.mixture_check``), which judges what is delivered, after every later operator;
strict mode's end-of-stream drops are counted through ``zephon.accounting``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from zephon import accounting
from zephon.block import TOKEN_FIELDS, Block, ragged_column
from zephon.errors import CheckpointError
from zephon.ops.base import LaneAccumulator, OpContext, OpTraits, StatefulOp
from zephon.state.fingerprint import settings
from zephon.state.held_store import HeldStore
from zephon.state.refs import refs_of
from zephon.tokens.mixer import MixtureBalancer
from zephon.types import records_from_block


class EnsureMixtureOp(StatefulOp):
    name = "ensure_mixture"

    def __init__(self, work_source: Any, *, max_buffer_size: int | None = 1000,
                 drain_target_ratio: float = 0.8, obsolete_drain_rate: float = 0.1,
                 weight_by: Any = "auto", warn_tolerance: float | None = None,
                 mixture: Mapping[str, float] | None = None, tokenized: bool = True) -> None:
        names = list(work_source.component_ids())
        token_aware = getattr(work_source, "token_estimation", None) is not None
        if token_aware and weight_by == "samples":
            raise ValueError("ensure_mixture(weight_by='samples') cannot keep a token-aware "
                             "mixture: its weights are in tokens")
        if token_aware and not tokenized:
            raise ValueError("ensure_mixture must come after tokenize with a token-aware "
                             "work source (it weighs records by their tokens)")
        if not (weight_by in ("auto", "samples") or isinstance(weight_by, str) or callable(weight_by)):
            raise ValueError("weight_by must be 'auto', 'samples', a field name or a callable")
        ids = dict(work_source.component_ids())
        self.ids = ids
        static = getattr(work_source, "mixture", None)
        # no mixture= and a source without one mixture (a user WorkSource): follow each
        # chunk's target_mixture, else its composition (spec 5.9)
        self.per_chunk = mixture is None and static is None
        self.n_components = max(ids.values(), default=-1) + 1
        if self.per_chunk:
            self.target = None
        else:
            target = dict(mixture) if mixture is not None else dict(static.weights)
            self.target = self._ids_of(target, names)
        if warn_tolerance is not None and not 0 <= float(warn_tolerance) <= 1:
            raise ValueError(f"warn_tolerance must be in [0, 1], got {warn_tolerance!r}")
        self.max_buffer_size = max_buffer_size
        self.drain_target_ratio = drain_target_ratio
        self.obsolete_drain_rate = obsolete_drain_rate
        self.weight_by = weight_by
        self.warn_tolerance = warn_tolerance
        # what a weight counts: tokens, records, or something of the user's (None)
        self.unit = ("records" if weight_by == "samples" else "tokens"
                     if weight_by == "auto" or weight_by in TOKEN_FIELDS else None)
        MixtureBalancer(self.target or [1.0] * max(1, self.n_components), max_buffer_size,
                        drain_target_ratio, obsolete_drain_rate)

    def _ids_of(self, target: Mapping[str, float], names: list[str] | None = None
                ) -> dict[int, float]:
        """A target by component name as normalised weights by component id."""
        names = list(self.ids) if names is None else names
        unknown = sorted(set(target) - set(names))
        if unknown:
            raise ValueError(f"ensure_mixture: unknown components {unknown}; known: {names}")
        total = float(sum(target.values()))
        return {self.ids[n]: float(w) / total for n, w in target.items()}

    def chunk_target(self, target: Mapping[str, float]) -> list[float]:
        """A chunk's target (names, or dataset ids as text) as weights over every component."""
        by_name = {}
        for k, w in target.items():
            key = k if k in self.ids else next((n for n, i in self.ids.items()
                                                if str(i) == str(k)), k)
            by_name[key] = by_name.get(key, 0.0) + float(w)
        out = [0.0] * self.n_components
        for cid, w in self._ids_of(by_name).items():
            out[cid] = w
        return out

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=False, requires_serial_state=True,
                        keeps_count=True)

    def fingerprint(self) -> dict:
        return settings(self, ("target", "max_buffer_size", "drain_target_ratio",
                               "obsolete_drain_rate", "weight_by", "warn_tolerance", "unit"))

    def check_state(self, state, view, field: str) -> None:
        from zephon.state import checkpoint_ops

        checkpoint_ops.mixture_state(self, state, view, field)

    def held_bound(self) -> tuple[int, int]:
        return self.max_buffer_size or 0, 0

    def new_lane(self, lane_id: int, ctx: OpContext) -> LaneAccumulator:
        start = self.target if self.target is not None else [1.0] * max(1, self.n_components)
        lane = MixtureLane(self, MixtureBalancer(start, self.max_buffer_size,
                                                 self.drain_target_ratio, self.obsolete_drain_rate))
        if self.per_chunk:
            lane.chunk_target = ctx.get("chunk_target")
        return lane

    def weights(self, block: Block) -> np.ndarray:
        wb = self.weight_by
        if wb == "samples":
            return np.ones(len(block), dtype=np.int64)
        if callable(wb):
            return np.asarray([float(wb(r)) for r in records_from_block(block)])
        names = block.column_names()
        field = next((f for f in TOKEN_FIELDS if f in names), None) if wb == "auto" else wb
        if field is None or field not in names:
            raise KeyError(f"ensure_mixture: weight_by={wb!r} found no token field "
                           f"({', '.join(TOKEN_FIELDS)}) in records with fields {names}; "
                           "place it after tokenize or pass weight_by='samples'")
        col = block.payload.column(field)
        if hasattr(col.type, "value_type"):
            offsets, _ = ragged_column(block.payload, field)
            return np.diff(offsets)
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)


def components(block: Block) -> np.ndarray:
    """Component of each record; a packed record counts for its largest contributor."""
    comp = block.meta.get("comp_tokens")
    if comp is not None:
        return np.argmax(comp, axis=1).astype(np.int64)
    return block.meta["dataset_id"]


class MixtureLane(LaneAccumulator):
    def __init__(self, op: EnsureMixtureOp, balancer: MixtureBalancer) -> None:
        self.op = op
        self.balancer = balancer
        self.store = HeldStore()
        self.next_id = 0
        self.chunk_target: Any = None  # chunk id -> its target (per-chunk targets only)
        self.chunk = -1  # the chunk whose target the balancer holds

    def push(self, block: Block) -> list[Block]:
        ids = np.arange(self.next_id, self.next_id + len(block), dtype=np.int64)
        self.next_id += len(block)
        comps, weights = components(block), self.op.weights(block)
        self.store.add(block, ids)
        if self.chunk_target is None:
            emit = self.balancer.push(comps, weights, ids)
            return [self.store.pop(emit)] if len(emit) else []
        # each chunk's records under that chunk's target
        chunk = block.meta["chunk_id"]
        cuts = np.flatnonzero(np.diff(chunk)) + 1
        emitted = []
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(block)]):
            c = int(chunk[a])
            if c != self.chunk:
                target = self.chunk_target(c)
                if target is not None:
                    self.balancer.set_target(self.op.chunk_target(target))
                self.chunk = c
            emitted.append(self.balancer.push(comps[a:b], weights[a:b], ids[a:b]))
        emit = np.concatenate(emitted) if emitted else np.empty(0, dtype=np.int64)
        return [self.store.pop(emit)] if len(emit) else []

    def flush(self) -> list[Block]:
        res = self.balancer.flush()
        out = [self.store.pop(res.emitted)] if len(res.emitted) else []
        if len(res.dropped):  # strict mode (max_buffer_size=None): the surplus off target
            gone = self.store.take(res.dropped)
            accounting.count("ensure_mixture", "off_target", components(gone),
                             self.op.weights(gone) if self.op.unit == "tokens" else None)
        self.store.set(None, np.empty(0, dtype=np.int64))
        self.next_id = 0
        return out

    def held(self) -> int:
        return len(self.store)

    def get_state(self) -> dict:
        state = {"balancer": self.balancer.get_state(), "held": refs_of(self.store.block()),
                 "held_ids": self.store.ids.copy(), "next_id": self.next_id}
        if self.chunk_target is not None:
            state["chunk"] = self.chunk
        return state

    def set_state(self, state: dict, held: Block | None) -> None:
        self._check_weights(state, held)
        self.balancer = MixtureBalancer.from_state(self.balancer.config, state["balancer"])
        self.store.set(held, np.asarray(state["held_ids"], dtype=np.int64))
        self.next_id = int(state["next_id"])
        self.chunk = int(state.get("chunk", -1))

    def _check_weights(self, state: dict, held: Block | None) -> None:
        """The weight the buffer gives each held record is the one the record has: the part
        of the state ``Pipeline.restore`` cannot check, as it needs the records."""
        ids = np.asarray(state["held_ids"], dtype=np.int64)
        if held is None or not len(held):
            return
        if len(held) != len(ids):
            raise CheckpointError("held", f"{len(held)} records rebuilt for {len(ids)} ids")
        weight = {r: w for buf in state["balancer"]["buffers"] for r, w, _ in buf}
        got = np.asarray([weight.get(r, -1) for r in ids.tolist()], dtype=np.int64)
        want = self.balancer._weights(self.op.weights(held), len(held))
        bad = np.flatnonzero(got != want)
        if len(bad):
            raise CheckpointError("balancer.buffers", f"record {int(ids[bad[0]])} weighs "
                                  f"{int(want[bad[0]])}, the buffer says {int(got[bad[0]])}")
