"""Packed rows: the output records of ``pack_flat`` / ``pack_sequences`` built from bins.

A packed row is built by one gather over the ragged token column (``build_rows``); each row
carries a hidden ``__recipe`` column (the cursors and token ranges it was assembled from), so
a checkpoint can name rows that are still waiting in a downstream buffer without storing data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from zephon._ext.packing_algorithms import WHOLE_RECORDS
from zephon.block import TOKEN_FIELDS, Block, add_lineage, list_array, ragged_chunks, ragged_column
from zephon.payload_values import is_marked, mark_nested
from zephon.state.refs import RECIPE_COLUMN
from zephon.tokens.packer import PackedBins, build_rows


def make_rows(op: Any, bins: PackedBins, src: Block, rows: np.ndarray) -> Block:
    """Output records for ``bins`` whose segment k reads row ``rows[k]`` of ``src``."""
    field = op.field(src)
    # the held records and the new block stay separate Arrow chunks: rows are gathered
    # from them in place, never joined first
    tokens = ragged_chunks(src.payload, field)
    offsets = tokens.offsets
    seg_src = rows
    first = seg_src[bins.seg_offsets[:-1]]
    meta = {k: v[first] for k, v in src.meta.items()
            if k not in ("padding_length", "comp_tokens", "comp_samples", "closes")}
    lineage = add_lineage(src.lineage[first], bins.token_start[bins.seg_offsets[:-1]])
    comp = src.meta["dataset_id"][seg_src]
    bin_of = bins.bin_of_segment()
    C = op.n_components
    comp_tokens = np.zeros((len(bins), C), dtype=np.int64)
    np.add.at(comp_tokens, (bin_of, comp), bins.token_len)
    # documents that start in the row: the pieces of a split document count once per pass
    comp_samples = np.zeros((len(bins), C), dtype=np.int64)
    np.add.at(comp_samples, (bin_of, comp), (bins.token_start == 0).astype(np.int64))
    meta["comp_tokens"], meta["comp_samples"] = comp_tokens, comp_samples
    if op.flat:
        built = build_rows(bins, offsets, tokens.values, op.pad_token_id, op.max_length,
                           rows=rows)
        meta["padding_length"] = built.padding_length.astype(np.int64)
        width = op.max_length
        flat_off = np.arange(len(bins) + 1, dtype=np.int64) * width
        cols = {field: list_array(flat_off, built.tokens.ravel())}
        if op.emit_positions:
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
            aligned = build_rows(bins, a_off, a_val, 0, op.max_length, rows=rows)
            cols[name] = list_array(flat_off, aligned.tokens.ravel())
        cols[RECIPE_COLUMN] = _recipe(bins, src, rows)
        table = pa.table(cols)
    else:
        table = _sequences(op, bins, src, rows, field)
    return Block(meta, table, lineage)

def _recipe(bins: PackedBins, src: Block, rows: np.ndarray) -> pa.Array:
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

def _sequences(op: Any, bins: PackedBins, src: Block, rows: np.ndarray, field: str
               ) -> pa.Table | list:
    """{"packed_samples": [...]}: whole payloads (first/best fit) or token slices (wrap).
    A piece of a split or truncated document under first/best fit is its payload with the
    token field, and every field as long as it, cut to the piece."""
    whole = op.algorithm in WHOLE_RECORDS
    payloads = src.payload_list() if whole else None
    offsets, values = ragged_column(src.payload, field)
    numpy_tokens = src.columnar and field in src.payload.column_names \
        and is_marked(src.payload, field)
    if numpy_tokens and not whole:  # slices keep the stored dtype (list<int32> -> int32)
        values = values.astype(src.payload.schema.field(field).type.value_type.to_pandas_dtype(),
                               copy=False)
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
                piece = values[start:start + n]
                segs.append({field: piece if numpy_tokens else piece.tolist(),
                             **_aligned_slices(src, field, r, bins, k)})
        packed.append(_merge(op, segs))
    if op.pack_payloads == "keep_list":
        try:
            table = pa.table({"packed_samples": pa.array(packed),
                              RECIPE_COLUMN: _recipe(bins, src, rows)})
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
        else:  # token arrays a reader gave as read-only ndarrays stay ndarrays (A.10)
            return mark_nested(table, "packed_samples") if numpy_tokens else table
    return [{"packed_samples": p} for p in packed]  # arrays/tensors: object payloads

def _merge(op: Any, segs: list) -> Any:
    mode = op.pack_payloads
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
