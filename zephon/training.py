"""``SampleBatch.to_training``: training tensors straight from the columnar batch.

Token rows are read as one numpy view of the batch's ragged column (packed rows are already
dense), so no Python work is done per row; the shifting and masking is
``zephon.tokens.training``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from zephon.block import TOKEN_FIELDS, Block
from zephon.ragged_columns import ragged_column
from zephon.tokens.training import finalize, to_training_arrays


def _dense(table: pa.Table, name: str, pad: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """[B, S] matrix of a ragged column (right-padded with ``pad``) and the row lengths."""
    offsets, values = ragged_column(table, name)
    lengths = np.diff(offsets)
    B = len(lengths)
    S = int(lengths.max(initial=0))
    if B and np.all(lengths == S):
        return values[: B * S].reshape(B, S), lengths
    out = np.full((B, S), pad, dtype=values.dtype if len(values) else np.int64)
    out[np.arange(S)[None, :] < lengths[:, None]] = values
    return out, lengths


def batch_to_training(block: Block, *, tokens_field: str = "auto", return_labels: bool = False,
                      dtype: Any = "auto", extra_fields: Iterable[str] = (),
                      ignore_index: int = -100, rename_fields: Mapping[str, str] | None = None,
                      flatten: bool = False, exclude_fields: Iterable[str] = (),
                      return_num_valid_tokens: bool = False, return_loss_mask: bool = False,
                      return_cu_seqlens: bool = False, return_padding_mask: bool = False,
                      eos_mask_loss: bool = False, eos_token_id: int | None = None,
                      position_mode: str = "preserve",
                      boundary_mask_loss: bool = True) -> dict[str, Any]:
    """``boundary_mask_loss`` (with ``return_labels``): mask the label of each position whose
    next token starts another document of the packed row (default), or keep it (False)."""
    if isinstance(exclude_fields, str):
        raise TypeError("exclude_fields must be a list of names, not a string")
    extra_fields = list(extra_fields)
    if len(block) == 0:
        out = to_training_arrays(np.zeros((0, 0), dtype=np.int64), return_labels=return_labels,
                                 ignore_index=ignore_index, return_loss_mask=return_loss_mask,
                                 return_num_valid_tokens=return_num_valid_tokens,
                                 return_cu_seqlens=return_cu_seqlens,
                                 return_padding_mask=return_padding_mask, flatten=flatten,
                                 eos_mask_loss=eos_mask_loss, eos_token_id=eos_token_id,
                                 position_mode=position_mode)
        out = {"ids": [], "texts": [], **{k: v for k, v in out.items() if k != "input_ids"}}
        return finalize(out, dtype=dtype, rename_fields=rename_fields,
                        exclude_fields=exclude_fields, empty=True)
    if not block.columnar:
        return _from_objects(block, tokens_field=tokens_field, return_labels=return_labels,
                             dtype=dtype, extra_fields=extra_fields, ignore_index=ignore_index,
                             rename_fields=rename_fields, flatten=flatten,
                             exclude_fields=exclude_fields,
                             return_num_valid_tokens=return_num_valid_tokens,
                             return_loss_mask=return_loss_mask, return_cu_seqlens=return_cu_seqlens,
                             return_padding_mask=return_padding_mask, eos_mask_loss=eos_mask_loss,
                             eos_token_id=eos_token_id, position_mode=position_mode,
                             boundary_mask_loss=boundary_mask_loss)
    table = block.payload
    names = table.column_names
    if tokens_field == "auto":
        field = next((f for f in TOKEN_FIELDS if f in names), None)
        if field is None:
            raise ValueError(f"to_training: no token field ({', '.join(TOKEN_FIELDS)}) in "
                             f"payload keys {sorted(n for n in names if not n.startswith('__'))}")
    else:
        if tokens_field not in names:
            raise ValueError(f"to_training: tokens_field {tokens_field!r} not in {names}")
        field = tokens_field
    tokens, lengths = _dense(table, field)
    pad = block.meta.get("padding_length")
    padding = np.clip(pad, 0, None) if pad is not None else None
    if padding is None and not np.all(lengths == tokens.shape[1]):
        padding = tokens.shape[1] - lengths  # unequal rows: right-padded, masked as padding
    loss_mask = positions = None
    if "loss_mask" in names:
        if return_labels and "loss_mask" in extra_fields:
            raise ValueError("loss_mask is consumed by return_labels; do not list it in extra_fields")
        loss_mask = _dense(table, "loss_mask")[0]
    if "positions" in names:
        positions = _dense(table, "positions")[0]
    elif return_labels and boundary_mask_loss and "comp_tokens" in block.meta:
        raise ValueError("to_training: these packed rows carry no per-document positions "
                         "(pack_flat(emit_positions=False), or pack_sequences), so the labels "
                         "that cross from one document to the next cannot be masked: keep "
                         "emit_positions=True, or pass boundary_mask_loss=False to train across "
                         "document boundaries")
    extras = {}
    for name in extra_fields:
        if name in ("loss_mask",) and not return_labels:
            continue
        if name not in names:
            raise ValueError(f"to_training: extra field {name!r} not in payload keys {names}")
        extras[name] = _dense(table, name)[0]
    out = to_training_arrays(
        tokens, padding_length=padding, loss_mask=loss_mask, positions=positions,
        return_labels=return_labels, ignore_index=ignore_index, return_loss_mask=return_loss_mask,
        return_num_valid_tokens=return_num_valid_tokens, return_cu_seqlens=return_cu_seqlens,
        return_padding_mask=return_padding_mask, eos_mask_loss=eos_mask_loss,
        eos_token_id=eos_token_id, position_mode=position_mode, flatten=flatten,
        extra_fields=extras, boundary_mask_loss=boundary_mask_loss)
    out["ids"] = block.ids()
    out["texts"] = (table.column("text").to_pylist() if "text" in names
                    else [""] * len(block))
    if "text" in names:
        out["texts"] = [t if t is not None else "" for t in out["texts"]]
    return finalize(out, dtype=dtype, rename_fields=rename_fields, exclude_fields=exclude_fields)


def _from_objects(block: Block, **kw: Any) -> dict[str, Any]:
    """Array payloads (objects with .shape) are token rows; dict payloads must be columnar."""
    payloads = block.payload_list()
    if all(hasattr(p, "shape") for p in payloads):
        rows = [np.asarray(p).reshape(-1) for p in payloads]
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        values = np.concatenate(rows) if rows else np.empty(0, np.int64)
        from zephon.ragged_columns import list_array

        table = pa.table({"input_ids": list_array(offsets, values)})
        return batch_to_training(Block(block.meta, table, block.lineage), **kw)
    if any(hasattr(p, "shape") for p in payloads):
        raise TypeError("to_training: a batch mixes array and dict payloads")
    columnar = block.with_payloads(payloads)
    if not columnar.columnar:
        raise TypeError("to_training: payloads are neither token arrays nor dicts of token lists")
    return batch_to_training(columnar, **kw)
