"""Training arrays from stacked token rows (spec 6.2), vectorised over the whole batch.

``to_training_arrays`` turns [B, S] token rows (plus optional padding lengths, payload loss
masks, per-document positions and extra aligned fields) into numpy arrays: shifted inputs and
labels, label masks, cu_seqlens from position resets, a padding mask (True = padding).
``convert`` turns those arrays into torch tensors, numpy arrays or Python lists, and
``rename_and_exclude`` applies ``rename_fields`` / ``exclude_fields``. ``finalize`` does all
three in the order ``SampleBatch.to_training`` needs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

ALWAYS_GENERATED = ("num_valid_tokens", "cu_seqlens", "max_seqlen")
_INT32_FIELDS = ("cu_seqlens", "max_seqlen")


def _stack_tokens(tokens: Any) -> np.ndarray:
    """[B, S] int64 from a 2-D array, a list of equal-length rows or a (offsets, values) tuple."""
    if isinstance(tokens, tuple) and len(tokens) == 2:
        offsets, values = np.asarray(tokens[0], dtype=np.int64), np.asarray(tokens[1])
        lengths = np.diff(offsets)
        if len(lengths) and np.any(lengths != lengths[0]):
            raise ValueError("token rows differ in length; pack or pad them before to_training")
        width = int(lengths[0]) if len(lengths) else 0
        return values[offsets[0]:offsets[-1]].astype(np.int64).reshape(len(lengths), width)
    if isinstance(tokens, np.ndarray):
        arr = tokens
    else:
        rows = [np.asarray(r) for r in tokens]
        if len({len(r) for r in rows}) > 1:
            raise ValueError("token rows differ in length; pack or pad them before to_training")
        arr = np.stack(rows) if rows else np.zeros((0, 0), dtype=np.int64)
    if arr.ndim != 2:
        raise ValueError(f"tokens must be [batch, seq], got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"tokens must be integers, got {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _aligned(name: str, value: Any, shape: tuple[int, int]) -> np.ndarray:
    arr = np.asarray(value)
    if arr.shape[:2] != shape:
        raise ValueError(f"{name} must have the token shape {shape}, got {arr.shape}")
    return arr


def boundary_labels(positions: np.ndarray, shift: int) -> np.ndarray:
    """Label-aligned mask of the labels whose next token starts another document of the row:
    label j predicts token j + 1, which opens a document (or the pad tail) where its position
    is 0. The same resets give ``cu_seqlens``, so the two always agree."""
    return positions[:, shift:] == 0


def _check_conflicts(return_labels: bool, flags: Mapping[str, bool], eos_mask_loss: bool,
                     eos_token_id: int | None, position_mode: str,
                     extra: Mapping[str, Any]) -> None:
    needing = [k for k, v in flags.items() if v] + (["eos_mask_loss"] if eos_mask_loss else [])
    if needing and not return_labels:
        raise ValueError(f"{', '.join(needing)} require(s) return_labels=True")
    if eos_mask_loss and eos_token_id is None:
        raise ValueError("eos_mask_loss=True requires eos_token_id")
    if position_mode not in ("preserve", "sequence"):
        raise ValueError(f"position_mode must be 'preserve' or 'sequence', got {position_mode!r}")
    for name in extra:
        if name in ALWAYS_GENERATED or name == "input_ids":
            raise ValueError(f"extra field {name!r} collides with a generated output name")
        if return_labels and name in ("labels", "loss_mask"):
            raise ValueError(f"extra field {name!r} cannot be combined with return_labels=True "
                             "(it is generated or consumed for the labels)")


def _cu_seqlens(pos_in: np.ndarray, flatten: bool) -> tuple[np.ndarray, Any]:
    """Document boundaries from the zeros of input-aligned positions."""
    B, S = pos_in.shape
    if S and np.any(pos_in[:, 0] != 0):
        bad = int(np.argmax(pos_in[:, 0] != 0))
        raise ValueError(f"return_cu_seqlens: positions of row {bad} do not start at 0")
    zeros = pos_in == 0
    if flatten:
        cu = np.append(np.flatnonzero(zeros.reshape(-1)), B * S).astype(np.int32)
        return cu, int(np.diff(cu).max()) if len(cu) > 1 else 0
    if B == 0:
        return np.zeros((0, 0), dtype=np.int32), np.zeros(0, dtype=np.int32)
    counts = zeros.sum(axis=1)
    cu = np.full((B, int(counts.max()) + 1), S, dtype=np.int32)   # padded with the row length
    rows, cols = np.nonzero(zeros)                                 # row-major: sorted by row
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    cu[rows, np.arange(len(rows)) - first[rows]] = cols
    seqmax = np.diff(cu, axis=1).max(axis=1) if cu.shape[1] > 1 else np.zeros(B, np.int64)
    return cu, seqmax.astype(np.int32)


def to_training_arrays(tokens: Any, *, padding_length: Any = None, loss_mask: Any = None,
                       positions: Any = None, return_labels: bool = False, ignore_index: int = -100,
                       return_loss_mask: bool = False, return_num_valid_tokens: bool = False,
                       return_cu_seqlens: bool = False, return_padding_mask: bool = False,
                       eos_mask_loss: bool = False, eos_token_id: int | None = None,
                       position_mode: str = "preserve", flatten: bool = False,
                       extra_fields: Mapping[str, Any] | None = None,
                       boundary_mask_loss: bool = True) -> dict[str, Any]:
    """Numpy training arrays from [B, S] token rows (see spec 6.2 and the module docstring).

    With labels, ``boundary_mask_loss=True`` (default) also sets to ``ignore_index`` every
    label whose next token belongs to another document of the packed row (the last token of a
    document predicting the first of the next), read from the per-document ``positions``;
    ``False`` keeps those labels. Rows without positions hold one document each.

    Output keys: ``input_ids`` (int64), ``labels`` (int64, with labels), ``loss_mask``
    (float32: label-aligned with ``return_loss_mask``; the payload mask unshifted without
    labels), ``num_valid_tokens`` (int), ``positions`` (int64, when given), ``cu_seqlens`` /
    ``max_seqlen`` (int32; [B, K] / [B], or flat / int with ``flatten``), ``padding_mask``
    (bool, input-aligned, True = padding), then each extra field.
    """
    extra = dict(extra_fields or {})
    _check_conflicts(return_labels, {"return_loss_mask": return_loss_mask,
                                     "return_num_valid_tokens": return_num_valid_tokens},
                     eos_mask_loss, eos_token_id, position_mode, extra)
    tok = _stack_tokens(tokens)
    B, S = tok.shape
    if return_cu_seqlens and positions is None:
        raise ValueError("return_cu_seqlens=True requires per-document positions (pack_flat)")
    reserved = {"positions": positions is not None, "padding_mask": return_padding_mask,
                "loss_mask": loss_mask is not None}
    for name in extra:
        if reserved.get(name):
            raise ValueError(f"extra field {name!r} collides with a generated output name")
    pad = np.zeros(B, dtype=np.int64) if padding_length is None else \
        np.asarray(padding_length, dtype=np.int64).reshape(-1)
    if len(pad) != B or (B and (pad.min() < 0 or pad.max() > S)):
        raise ValueError(f"padding_length must be [{B}] values in [0, {S}]")
    mask_in = None if loss_mask is None else _aligned("loss_mask", loss_mask, (B, S))
    pos = None if positions is None else \
        _aligned("positions", positions, (B, S)).astype(np.int64, copy=False)

    shift = 1 if return_labels and S > 0 else 0
    width = S - shift
    # outputs never alias the caller's arrays: a trainer may modify its tensors in place
    out: dict[str, Any] = {"input_ids": tok[:, :width].copy()}
    if return_labels:
        labels = tok[:, shift:].copy()
        cols = np.arange(width)
        # label j predicts token j + 1: it is padding when j + 1 >= S - pad
        masked = cols[None, :] >= (S - 1 - pad)[:, None]
        if mask_in is not None:
            masked |= mask_in[:, shift:] == 0
        if eos_mask_loss:
            masked |= out["input_ids"] == int(eos_token_id)
        if boundary_mask_loss and pos is not None:
            masked |= boundary_labels(pos, shift)
        labels[masked] = ignore_index
        out["labels"] = labels
        valid = labels != ignore_index
        if return_loss_mask:
            out["loss_mask"] = valid.astype(np.float32)
        if return_num_valid_tokens:
            out["num_valid_tokens"] = int(valid.sum())
    elif mask_in is not None:
        out["loss_mask"] = mask_in.astype(np.float32)
    if pos is not None:
        pos_in = pos[:, :width]
        out["positions"] = pos_in.copy() if position_mode == "preserve" else \
            np.broadcast_to(np.arange(width, dtype=np.int64), (B, width)).copy()
        if return_cu_seqlens:
            out["cu_seqlens"], out["max_seqlen"] = _cu_seqlens(pos_in, flatten)
    if return_padding_mask:
        out["padding_mask"] = np.arange(width)[None, :] >= (S - pad)[:, None]
    for name, value in extra.items():
        arr = np.array(value)   # a copy, for the same reason
        if arr.ndim >= 2 and arr.shape[:2] == (B, S):
            arr = np.ascontiguousarray(arr[:, :width])
        elif arr.ndim == 0 or arr.shape[0] != B:
            raise ValueError(f"extra field {name!r} must have one row per record, got {arr.shape}")
        out[name] = arr
    if flatten:
        for k, v in out.items():
            if k not in _INT32_FIELDS and isinstance(v, np.ndarray) and v.ndim >= 2 \
                    and v.shape[:2] == (B, width):
                out[k] = v.reshape((B * width,) + v.shape[2:])
    return out


def rename_and_exclude(out: dict[str, Any], rename_fields: Mapping[str, str] | None = None,
                       exclude_fields: Iterable[str] = (), *, empty: bool = False) -> dict[str, Any]:
    """Apply ``rename_fields`` (strict; swaps allowed) then ``exclude_fields`` (absent ignored).

    ``empty`` relaxes the unknown-source check for an empty batch, whose outputs may be absent.
    """
    if isinstance(exclude_fields, (str, bytes)):
        raise TypeError("exclude_fields must be a collection of names, not a bare string")
    renames = dict(rename_fields or {})
    if not empty:
        unknown = [src for src in renames if src not in out]
        if unknown:
            raise ValueError(f"rename_fields: unknown field(s) {unknown}; available: {sorted(out)}")
    targets = list(renames.values())
    dup = sorted({t for t in targets if targets.count(t) > 1})
    if dup:
        raise ValueError(f"rename_fields: several fields renamed to {dup}")
    kept = [k for k in out if k not in renames]
    clash = sorted(t for t in targets if t in kept)
    if clash:
        raise ValueError(f"rename_fields: target(s) {clash} collide with existing fields")
    result = {renames.get(k, k): v for k, v in out.items()}
    for name in exclude_fields:
        result.pop(name, None)
    return result


def _torch_dtype_like(dtype: Any) -> bool:
    return type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype"


def _resolve(dtype: Any) -> tuple[str, Any]:
    """(backend, integer dtype) for a ``dtype`` argument of to_training."""
    if dtype is None:
        return "list", None
    if isinstance(dtype, str) and dtype in ("auto", "torch", "pt"):
        if dtype == "auto" and importlib.util.find_spec("torch") is None:
            return "numpy", np.dtype(np.int64)
        import torch

        return "torch", torch.int64
    if isinstance(dtype, str) and dtype in ("numpy", "np"):
        return "numpy", np.dtype(np.int64)
    if _torch_dtype_like(dtype):
        return "torch", dtype
    try:
        return "numpy", np.dtype(dtype)
    except TypeError:
        raise ValueError(f"unsupported dtype {dtype!r}") from None


def convert(out: Mapping[str, Any], dtype: Any = "auto") -> dict[str, Any]:
    """Arrays to torch tensors / numpy arrays / lists (``dtype=None``).

    Integer token fields take the requested integer dtype; loss masks stay float32,
    cu_seqlens / max_seqlen int32, masks bool; scalars and non-array values pass unchanged.
    """
    backend, int_dtype = _resolve(dtype)
    torch = None
    if backend == "torch":
        import torch
    result: dict[str, Any] = {}
    for k, v in out.items():
        if not isinstance(v, np.ndarray):
            result[k] = v
            continue
        if v.dtype == np.bool_:
            target: Any = np.bool_
        elif np.issubdtype(v.dtype, np.floating):
            target = np.float32
        elif k in _INT32_FIELDS:
            target = np.int32
        else:
            target = int_dtype
        if backend == "list":
            result[k] = v.tolist()
        elif backend == "numpy":
            result[k] = v.astype(target, copy=False)
        elif target is int_dtype:
            result[k] = torch.from_numpy(np.ascontiguousarray(v)).to(int_dtype)
        else:
            result[k] = torch.from_numpy(np.ascontiguousarray(v.astype(target, copy=False)))
    return result


def finalize(out: dict[str, Any], *, dtype: Any = "auto",
             rename_fields: Mapping[str, str] | None = None, exclude_fields: Iterable[str] = (),
             empty: bool = False) -> dict[str, Any]:
    """Rename, exclude, then convert (the tail of ``SampleBatch.to_training``)."""
    return convert(rename_and_exclude(out, rename_fields, exclude_fields, empty=empty), dtype)
