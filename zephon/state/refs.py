"""Record cursors: how a checkpoint names the records an accumulator holds.

A cursor is (chunk_id, chunk_offset, lineage) within a lane: the chunk and offset give the
pointer (recomputed from the work source by random access), the lineage picks the child of a
split document. Records built from several inputs (packed rows) also carry a ``recipe``: the
cursors and token ranges they were assembled from.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zephon.block import Block

RECIPE_COLUMN = "__recipe"


def refs_of(block: Block | None) -> dict[str, Any] | None:
    """Cursor arrays of a block's records (copies: the snapshot must not change later)."""
    if block is None or not len(block):
        return None
    refs: dict[str, Any] = {
        "chunk_id": block.meta["chunk_id"].copy(),
        "chunk_offset": block.meta["chunk_offset"].copy(),
        "lineage": block.lineage.copy(),
    }
    if block.columnar and RECIPE_COLUMN in block.payload.column_names:
        refs["recipe"] = block.payload.column(RECIPE_COLUMN).to_pylist()
        for extra in ("padding_length",):
            if extra in block.meta:
                refs[extra] = block.meta[extra].copy()
    return refs


def refs_len(refs: dict | None) -> int:
    return 0 if not refs else len(refs["chunk_id"])


def encode(obj: Any) -> Any:
    """numpy arrays and scalars -> JSON types, recursively."""
    if isinstance(obj, np.ndarray):
        return {"__nd__": obj.dtype.str, "shape": list(obj.shape), "data": obj.ravel().tolist()}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    return obj


def decode(obj: Any) -> Any:
    if isinstance(obj, dict):
        if "__nd__" in obj:
            return np.asarray(obj["data"], dtype=np.dtype(obj["__nd__"])).reshape(obj["shape"])
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj


def subset_refs(refs: dict, idx: np.ndarray) -> dict:
    """The cursors at positions ``idx`` (recipes included)."""
    out = {k: np.asarray(refs[k])[idx] for k in ("chunk_id", "chunk_offset", "lineage")}
    if "recipe" in refs:
        out["recipe"] = [refs["recipe"][i] for i in np.asarray(idx).tolist()]
    for extra in ("padding_length",):
        if extra in refs:
            out[extra] = np.asarray(refs[extra])[idx]
    return out


def concat_refs(parts: list[dict | None]) -> dict | None:
    parts = [p for p in parts if refs_len(p)]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    depth = max(np.asarray(p["lineage"]).reshape(refs_len(p), -1).shape[1] for p in parts)
    lin = []
    for p in parts:
        m = np.asarray(p["lineage"], dtype=np.int32).reshape(refs_len(p), -1)
        pad = np.full((len(m), depth), -1, dtype=np.int32)
        pad[:, : m.shape[1]] = m
        lin.append(pad)
    out = {"chunk_id": np.concatenate([np.asarray(p["chunk_id"]) for p in parts]),
           "chunk_offset": np.concatenate([np.asarray(p["chunk_offset"]) for p in parts]),
           "lineage": np.concatenate(lin)}
    if any("recipe" in p for p in parts):
        if not all("recipe" in p for p in parts):
            raise RuntimeError("cannot mix records with and without recipes in one buffer")
        out["recipe"] = [r for p in parts for r in p["recipe"]]
    return out


class LazyRecords:
    """Held records a restore has not fetched yet: cursors plus a way to rebuild any subset.

    A shuffle buffer decides what to emit from the records' identity keys alone, so its records
    are only needed when they leave it; fetching them then keeps restore close to a cold start.
    """

    def __init__(self, refs: dict, rebuild) -> None:
        self.refs = refs
        self._rebuild = rebuild

    def __len__(self) -> int:
        return refs_len(self.refs)

    def rebuild(self, idx: np.ndarray) -> Block:
        return self._rebuild(subset_refs(self.refs, idx))

    def keep(self, mask: np.ndarray) -> None:
        self.refs = subset_refs(self.refs, np.flatnonzero(mask))
