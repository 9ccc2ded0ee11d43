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
