"""pack_flat / pack_sequences: per-lane packing of token records into fixed-length rows.

Bin assignment runs in the packing kernel (``zephon.tokens.packer.Packer``); the rows are
built from the bins by ``zephon.ops.pack_rows``, each with a recipe (``OpTraits.combines_records``)
so a checkpoint can name rows still waiting in a downstream buffer without storing data.

Nothing is lost without a count: a document longer than ``max_length`` is split into pieces by
default (``oversized="split"``); ``"truncate"`` and ``"drop"`` count what they remove, and empty
records (no token to deliver) are counted as ``"empty"``, all through ``zephon.accounting``.
The wrap carry at the end of the stream is delivered as a last padded row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zephon import accounting
from zephon._ext.packing_algorithms import WHOLE_RECORDS
from zephon.block import TOKEN_FIELDS, Block, ragged_chunks
from zephon.errors import CheckpointError
from zephon.ops.base import LaneAccumulator, OpContext, OpTraits, StatefulOp
from zephon.ops.pack_groups import group_of_components, resolve_groups
from zephon.ops.pack_rows import make_rows
from zephon.state.fingerprint import settings
from zephon.state.held_store import HeldStore
from zephon.state.refs import refs_of
from zephon.tokens.packer import PackedBins, Packer

# the settings in the fingerprint (``group_map`` appears by its type, as it always has)
_SETTINGS = ("name", "packer_config", "oversized", "flat", "max_length", "algorithm",
             "tokens_field", "pad_token_id", "emit_positions", "pack_payloads", "homogeneity",
             "group_map", "n_components")


class PackOp(StatefulOp):
    def __init__(self, max_length: int, *, flat: bool, work_source: Any, num_bins: int | None = None,
                 algorithm: str = "first_fit", tokens_field: str = "auto",
                 drop_oversized: bool | None = None, oversized: str | None = None,
                 min_sequence_length: int = 1,
                 max_sequences_per_bin: int | None = None, shuffle_strategy: str | None = None,
                 shuffle_seed: int | None = None, flush_strategy: str = "fifo",
                 candidate_pool_size: int | None = None, max_candidate_age: int | None = None,
                 homogeneity: str = "none", groups: Any = None, pad_token_id: int | None = None,
                 emit_positions: bool = True, length_fn: Any = None,
                 pack_payloads: Any = "keep_list", placement: str = "auto",
                 parallelism: int | None = None) -> None:
        self.name = "pack_flat" if flat else "pack_sequences"
        if shuffle_strategy is not None:
            raise ValueError("pack shuffle_strategy is not supported: shuffle() before packing "
                             "gives a deterministic order independent of block boundaries")
        if length_fn is not None:
            raise ValueError("length_fn is not supported: packing measures the token field")
        self.packer_config = Packer(max_length, algorithm, num_bins, drop_oversized,
                                    min_sequence_length, max_sequences_per_bin, flush_strategy,
                                    candidate_pool_size, max_candidate_age, oversized).config
        self.oversized = self.packer_config["oversized"]
        if flat and pad_token_id is None and (algorithm != "wrap" or max_sequences_per_bin):
            raise ValueError(f"pack_flat(algorithm={algorithm!r}"
                             f"{', max_sequences_per_bin=...' if algorithm == 'wrap' else ''}) "
                             "pads partial rows: pass pad_token_id")
        if pack_payloads not in ("keep_list", "numpy_array", "torch_tensor") and not callable(pack_payloads):
            raise ValueError("pack_payloads must be 'keep_list', 'numpy_array', "
                             "'torch_tensor' or a callable")
        self.flat = flat
        self.max_length = int(max_length)
        self.algorithm = algorithm
        self.tokens_field = tokens_field
        # uncapped wrap pads only its very last row (the carry at the end of the stream); 0 is
        # an id every vocabulary embeds, and padding_length masks it by position
        self.pad_token_id = 0 if pad_token_id is None else int(pad_token_id)
        self.emit_positions = emit_positions
        self.pack_payloads = pack_payloads
        names = list(work_source.component_ids())
        self.homogeneity = homogeneity
        self.group_map = resolve_groups(homogeneity, groups, names)
        self.n_components = len(names)

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=False, requires_serial_state=True,
                        combines_records=True, keeps_count=True)

    def fingerprint(self) -> dict:
        return settings(self, _SETTINGS)

    def check_state(self, state, view, field: str) -> None:
        from zephon.state import checkpoint_ops

        checkpoint_ops.pack_state(self, state, view, field)

    def held_bound(self) -> tuple[int, int]:
        bins = self.packer_config["num_bins"] if self.algorithm in WHOLE_RECORDS else 1
        return 0, bins * self.max_length

    def new_lane(self, lane_id: int, ctx: OpContext) -> LaneAccumulator:
        return PackLane(self)

    def field(self, block: Block) -> str:
        names = block.column_names()
        if self.tokens_field != "auto":
            if self.tokens_field not in names:
                raise KeyError(f"{self.name}: tokens_field {self.tokens_field!r} not in {names}")
            return self.tokens_field
        for f in TOKEN_FIELDS:
            if f in names:
                return f
        raise KeyError(f"{self.name}: no token field ({', '.join(TOKEN_FIELDS)}) in records "
                       f"with fields {names}; tokenize first or pass tokens_field=")

    # -- restore -------------------------------------------------------------------------------

    def recipe_inputs(self, refs: dict) -> dict:
        """Cursors of every input a set of packed rows was built from (deduplicated)."""
        segs = [s for recipe in refs["recipe"] for s in recipe]
        inner = {(s["chunk_id"], s["chunk_offset"], tuple(s["lineage"])): s.get("inner")
                 for s in segs}
        keys = sorted(inner)
        depth = max((len(k[2]) for k in keys), default=0)
        lineage = np.full((len(keys), depth), -1, dtype=np.int32)
        for i, k in enumerate(keys):
            lineage[i, : len(k[2])] = k[2]
        out = {"chunk_id": np.array([k[0] for k in keys], dtype=np.int64),
               "chunk_offset": np.array([k[1] for k in keys], dtype=np.int64),
               "lineage": lineage}
        if any(inner[k] is not None for k in keys):
            out["recipe"] = [inner[k] for k in keys]  # rebuilt by the operator that made them
        return out

    def rebuild_rows(self, refs: dict, inputs: Block) -> Block:
        index = {(c, o, lin): i for i, (c, o, lin) in enumerate(zip(
            inputs.meta["chunk_id"].tolist(), inputs.meta["chunk_offset"].tolist(),
            inputs.lineage_tuples()))}
        seg_rows, starts, lens, seg_off = [], [], [0], [0]
        for recipe in refs["recipe"]:
            for s in recipe:
                lin = tuple(x for x in s["lineage"] if x >= 0)
                seg_rows.append(index[(s["chunk_id"], s["chunk_offset"], lin)])
                starts.append(s["start"])
                lens.append(s["len"])
            seg_off.append(len(seg_rows))
        lens = np.asarray(lens[1:], dtype=np.int64)
        used = np.zeros(len(seg_off) - 1, dtype=np.int64)
        np.add.at(used, np.repeat(np.arange(len(used)), np.diff(seg_off)), lens)
        pad = self.max_length - used if self.flat else np.zeros(len(used), dtype=np.int64)
        bins = PackedBins(np.asarray(seg_off, dtype=np.int64), np.asarray(seg_rows, dtype=np.int64),
                          np.asarray(starts, dtype=np.int64), lens, pad,
                          np.empty(0, dtype=np.int64))
        return make_rows(self, bins, inputs, np.asarray(seg_rows, dtype=np.int64))


class PackLane(LaneAccumulator):
    """One packer per packing group; records wait in a store until every token is emitted."""

    def __init__(self, op: PackOp) -> None:
        self.op = op
        self.packers: dict[int, Packer] = {}
        self.store = HeldStore()
        self.next_id = 0
        self.consumed = np.empty(0, dtype=np.int64)

    def _packer(self, group: int) -> Packer:
        if group not in self.packers:
            self.packers[group] = Packer(**self.op.packer_config)
        return self.packers[group]

    def push(self, block: Block) -> list[Block]:
        field = self.op.field(block)
        lengths = np.diff(ragged_chunks(block.payload, field).offsets)
        self._count_losses(block.meta["dataset_id"], lengths)
        ids = np.arange(self.next_id, self.next_id + len(block), dtype=np.int64)
        self.next_id += len(block)
        self.store.add(block, ids)
        self.consumed = np.concatenate([self.consumed, np.zeros(len(block), dtype=np.int64)])
        groups = group_of_components(self.op.group_map, block.meta["dataset_id"])
        out = []
        for g in np.unique(groups).tolist():
            sel = groups == g
            bins = self._packer(g).push(lengths[sel], ids[sel])
            out.extend(self._emit(bins))
        return out

    def _count_losses(self, dataset_ids: np.ndarray, lengths: np.ndarray) -> None:
        """Say what this block loses: empty records, and oversized ones under truncate/drop."""
        name, L = self.op.name, self.op.max_length
        empty = lengths == 0
        if empty.any():
            accounting.count(name, "empty", dataset_ids[empty], np.zeros(int(empty.sum())))
        over = lengths > L
        if over.any() and self.op.oversized == "drop":
            accounting.count(name, "oversized", dataset_ids[over], lengths[over])
        elif over.any() and self.op.oversized == "truncate":
            accounting.count(name, "truncated", dataset_ids[over], lengths[over] - L)

    def _emit(self, bins: PackedBins) -> list[Block]:
        out = []
        if len(bins):
            rows = self.store.rows_of(bins.record_id)
            out.append(make_rows(self.op, bins, self.store.block(), rows))
            np.add.at(self.consumed, rows, bins.token_len)
        self._release(bins.dropped)
        return out

    def _release(self, dropped: np.ndarray) -> None:
        """Forget records whose every kept token has been emitted (or that were dropped)."""
        blk = self.store.block()
        if blk is None:
            return
        need = np.diff(ragged_chunks(blk.payload, self.op.field(blk)).offsets)
        if self.op.oversized == "truncate":
            need = np.minimum(need, self.op.max_length)
        done = self.consumed >= need
        if len(dropped):
            done[self.store.rows_of(np.asarray(dropped, dtype=np.int64))] = True
        if done.any():
            self.store.remove(self.store.ids[done])
            self.consumed = self.consumed[~done]

    def flush(self) -> list[Block]:
        out = []
        for g in sorted(self.packers):
            out.extend(self._emit(self.packers[g].flush()))
        self.packers.clear()
        self.store.set(None, np.empty(0, dtype=np.int64))
        self.consumed = np.empty(0, dtype=np.int64)
        self.next_id = 0
        return out

    def held(self) -> int:
        return len(self.store)

    def get_state(self) -> dict:
        return {"packers": {str(g): p.get_state() for g, p in sorted(self.packers.items())},
                "held": refs_of(self.store.block()), "held_ids": self.store.ids.copy(),
                "consumed": self.consumed.copy(), "next_id": self.next_id}

    def set_state(self, state: dict, held: Block | None) -> None:
        _check_token_ranges(self.op, state, held)
        self.packers = {int(g): Packer.from_state(self.op.packer_config, st)
                        for g, st in state["packers"].items()}
        self.store.set(held, np.asarray(state["held_ids"], dtype=np.int64))
        self.consumed = np.asarray(state["consumed"], dtype=np.int64)
        self.next_id = int(state["next_id"])


def _check_token_ranges(op: PackOp, state: dict, held: Block | None) -> None:
    """Segments and consumed counts inside their records: the one part of a packing state that
    ``Pipeline.restore`` cannot check, as it needs the records' token counts."""
    ids = np.asarray(state["held_ids"], dtype=np.int64)
    lengths = (np.diff(ragged_chunks(held.payload, op.field(held)).offsets)
               if held is not None and len(held) else np.empty(0, dtype=np.int64))
    if len(lengths) != len(ids):
        raise CheckpointError("held", f"{len(lengths)} records rebuilt for {len(ids)} ids")
    over = np.flatnonzero(np.asarray(state["consumed"], dtype=np.int64) > lengths)
    if len(over):
        raise CheckpointError(f"consumed[{int(over[0])}]", "more tokens than the record has")
    for g, st in state["packers"].items():
        for kind in ("bins", "pool"):
            segs = st.get(kind, [])
            flat = [(i, j, s) for i, b in enumerate(segs) for j, s in enumerate(b)] \
                if kind == "bins" else [(i, None, s) for i, s in enumerate(segs)]
            for i, j, s in flat:
                row = int(np.searchsorted(ids, s[0]))
                if row >= len(ids) or ids[row] != s[0] or s[1] + s[2] > lengths[row]:
                    where = f"packers[{g}].{kind}[{i}]" + ("" if j is None else f"[{j}]")
                    raise CheckpointError(where, "a token range outside its record")
