"""pack_flat / pack_sequences: per-lane packing of token records into fixed-length rows.

Bin assignment runs in the packing kernel (``zephon.tokens.packer.Packer``); a packed row is
built by one gather over the ragged token column (``build_rows``). Each output row carries a
hidden ``__recipe`` column (the cursors and token ranges it was assembled from), so a
checkpoint can name rows that are still waiting in a downstream buffer without storing data.

Nothing is lost without a count: a document longer than ``max_length`` is split into pieces by
default (``oversized="split"``); ``"truncate"`` and ``"drop"`` count what they remove, and empty
records (no token to deliver) are counted as ``"empty"``, all through ``zephon.accounting``.
The wrap carry at the end of the stream is delivered as a last padded row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from zephon import accounting
from zephon.block import TOKEN_FIELDS, Block, add_lineage, list_array, ragged_chunks, ragged_column
from zephon.engine.refs import RECIPE_COLUMN, refs_of
from zephon.ops.base import BaseOp, LaneAccumulator, OpContext, OpTraits
from zephon.ops.held_store import HeldStore
from zephon.ops.pack_groups import group_of_components, resolve_groups
from zephon.tokens.packer import PackedBins, Packer, build_rows


class PackOp(BaseOp):
    combines_records = True

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
        return OpTraits(preserves_cursor_order=False)

    def process_many(self, elems: list) -> list:
        raise TypeError(f"{self.name} runs on blocks inside the engine")

    def is_serial(self) -> bool:
        return True

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

    # -- building rows ---------------------------------------------------------------------------

    def make_rows(self, bins: PackedBins, src: Block, rows: np.ndarray) -> Block:
        """Output records for ``bins`` whose segment k reads row ``rows[k]`` of ``src``."""
        field = self.field(src)
        # the held records and the new block stay separate Arrow chunks: rows are gathered
        # from them in place, never joined first
        tokens = ragged_chunks(src.payload, field)
        offsets = tokens.offsets
        seg_src = rows
        first = seg_src[bins.seg_offsets[:-1]]
        meta = {k: v[first] for k, v in src.meta.items()
                if k not in ("padding_length", "comp_tokens", "comp_samples")}
        lineage = add_lineage(src.lineage[first], bins.token_start[bins.seg_offsets[:-1]])
        comp = src.meta["dataset_id"][seg_src]
        bin_of = bins.bin_of_segment()
        C = self.n_components
        comp_tokens = np.zeros((len(bins), C), dtype=np.int64)
        np.add.at(comp_tokens, (bin_of, comp), bins.token_len)
        # documents that start in the row: the pieces of a split document count once per pass
        comp_samples = np.zeros((len(bins), C), dtype=np.int64)
        np.add.at(comp_samples, (bin_of, comp), (bins.token_start == 0).astype(np.int64))
        meta["comp_tokens"], meta["comp_samples"] = comp_tokens, comp_samples
        if self.flat:
            built = build_rows(bins, offsets, tokens.values, self.pad_token_id, self.max_length,
                               rows=rows)
            meta["padding_length"] = built.padding_length.astype(np.int64)
            width = self.max_length
            flat_off = np.arange(len(bins) + 1, dtype=np.int64) * width
            cols = {field: list_array(flat_off, built.tokens.ravel())}
            if self.emit_positions:
                cols["positions"] = list_array(flat_off, built.positions.ravel())
            for name in src.column_names():
                if name in (field, "positions", RECIPE_COLUMN) or name.startswith("__"):
                    continue
                col = src.payload.column(name)
                if not hasattr(col.type, "value_type") or pa.types.is_struct(col.type):
                    continue
                try:
                    aligned_col = ragged_chunks(src.payload, name)
                except (TypeError, ValueError):
                    continue
                a_off, a_val = aligned_col.offsets, aligned_col.values
                if not np.array_equal(np.diff(a_off), np.diff(offsets)):
                    continue  # not aligned element-wise with the tokens: dropped (spec)
                if not np.issubdtype(a_val[0].dtype, np.number):
                    continue
                aligned = build_rows(bins, a_off, a_val, 0, self.max_length, rows=rows)
                cols[name] = list_array(flat_off, aligned.tokens.ravel())
            cols[RECIPE_COLUMN] = self._recipe(bins, src, rows)
            table = pa.table(cols)
        else:
            table = self._sequences(bins, src, rows, field)
        return Block(meta, table, lineage)

    def _recipe(self, bins: PackedBins, src: Block, rows: np.ndarray) -> pa.Array:
        depth = src.lineage.shape[1]
        lin = src.lineage[rows].astype(np.int32).ravel()
        fields = [pa.array(src.meta["chunk_id"][rows]), pa.array(src.meta["chunk_offset"][rows]),
                  pa.ListArray.from_arrays(
                      pa.array(np.arange(len(rows) + 1, dtype=np.int32) * depth),
                      pa.array(lin, type=pa.int32())),
                  pa.array(bins.token_start.astype(np.int64)),
                  pa.array(bins.token_len.astype(np.int64))]
        names = ["chunk_id", "chunk_offset", "lineage", "start", "len"]
        if src.columnar and RECIPE_COLUMN in src.payload.column_names:
            # inputs an upstream operator built carry their own recipe: keep it per segment
            inner = src.payload.column(RECIPE_COLUMN).combine_chunks().take(pa.array(rows))
            fields.append(inner)
            names.append("inner")
        seg = pa.StructArray.from_arrays(fields, names=names)
        return pa.ListArray.from_arrays(pa.array(bins.seg_offsets.astype(np.int32)), seg)

    def _sequences(self, bins, src, rows, field) -> pa.Table | list:
        """{"packed_samples": [...]}: whole payloads (first/best fit) or token slices (wrap).
        A piece of a split or truncated document under first/best fit is its payload with the
        token field, and every field as long as it, cut to the piece."""
        whole = self.algorithm in ("first_fit", "best_fit")
        payloads = src.payload_list() if whole else None
        offsets, values = ragged_column(src.payload, field)
        packed = []
        for b in range(len(bins)):
            segs = []
            for k in range(int(bins.seg_offsets[b]), int(bins.seg_offsets[b + 1])):
                r = int(rows[k])
                a, n = int(bins.token_start[k]), int(bins.token_len[k])
                if whole and a == 0 and n == offsets[r + 1] - offsets[r]:
                    segs.append(payloads[r])
                elif whole:
                    size = int(offsets[r + 1] - offsets[r])
                    segs.append({key: (v[a:a + n] if hasattr(v, "__len__") and not
                                       isinstance(v, (str, bytes)) and len(v) == size else v)
                                 for key, v in payloads[r].items()})
                else:
                    start = int(offsets[r]) + a
                    segs.append({field: values[start:start + n].tolist(),
                                 **_aligned_slices(src, field, r, bins, k)})
            packed.append(self._merge(segs))
        if self.pack_payloads == "keep_list":
            try:
                return pa.table({"packed_samples": pa.array(packed),
                                 RECIPE_COLUMN: self._recipe(bins, src, rows)})
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                pass
        return [{"packed_samples": p} for p in packed]  # arrays/tensors: object payloads

    def _merge(self, segs: list) -> Any:
        mode = self.pack_payloads
        if mode == "keep_list":
            return segs
        if callable(mode):
            return mode(segs)
        field = next((f for f in TOKEN_FIELDS if segs and f in segs[0]), None)
        arrays = [np.asarray(s[field] if field else s) for s in segs]
        if mode == "numpy_array":
            return np.concatenate(arrays) if arrays else np.empty(0, np.int32)
        import torch

        return torch.as_tensor(np.concatenate(arrays) if arrays else np.empty(0, np.int32))

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
        return self.make_rows(bins, inputs, np.asarray(seg_rows, dtype=np.int64))


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
            out.append(self.op.make_rows(bins, self.store.block(), rows))
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
    from zephon.ops.errors import CheckpointError

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


def _aligned_slices(src: Block, field: str, r: int, bins: PackedBins, k: int) -> dict:
    """Segment ``k``'s slice of every numeric list column of row ``r`` laid out element-wise
    like the token field (a loss mask): a cut record keeps them, as pack_flat's rows do."""
    out = {}
    if not src.columnar:
        return out
    table = src.payload
    for name in table.column_names:
        typ = table.column(name).type
        if name == field or name.startswith("__") or not (
                pa.types.is_list(typ) or pa.types.is_large_list(typ)) or not (
                pa.types.is_integer(typ.value_type) or pa.types.is_floating(typ.value_type)):
            continue
        row = table.column(name)[r].values
        if len(row) != len(table.column(field)[r].values):
            continue
        a = int(bins.token_start[k])
        out[name] = row.slice(a, int(bins.token_len[k])).to_pylist()
    return out
