"""A checkpoint's fingerprint: what produced the stream, held against the pipeline restoring it.

The fingerprint names the work source's configuration and each operator's
(``Operator.fingerprint()``: every setting that changes the data, functions by qualified name).
Restore refuses a pipeline whose fingerprint differs, except in settings that change speed only
(``parallelism``, ``placement``) and in the micro-batch size of a last ``batch``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from zephon.errors import CheckpointError
from zephon.state.view import PipelineView

# work-source state that describes a position, not the curriculum
_PER_LANE_KEYS = ("lane_id", "canonical_replicas", "next_chunk_id", "chunk_size_hint",
                  "token_ratios")
# operator settings that change how fast, never what: a restore may change them
_EXECUTION_KEYS = ("parallelism", "placement")


def jsonable(v: Any) -> Any:
    """A configuration value as fingerprint data: JSON types kept, functions by qualified name,
    anything else by its type's name."""
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if callable(v):
        return f"callable:{getattr(v, '__module__', '?')}.{getattr(v, '__qualname__', type(v).__name__)}"
    return type(v).__name__


def settings(op: Any, names: tuple[str, ...]) -> dict:
    """The named attributes of ``op`` as fingerprint data (an operator's ``fingerprint()``)."""
    return {k: jsonable(getattr(op, k)) for k in names}


def op_fingerprint(op: Any) -> dict:
    """Name and configuration of an operator, as the operator states it."""
    return {"op": op.op_name, **op.fingerprint()}


def fingerprint(view: PipelineView) -> dict:
    ws = view.work_source
    ws_fp: dict = {"type": type(ws).__name__}
    if hasattr(ws, "state_dict"):
        ws_fp.update({k: v for k, v in ws.state_dict().items()
                      if k not in _PER_LANE_KEYS})
    out = {"work_source": jsonable(ws_fp), "operators": [op_fingerprint(o) for o in view.ops]}
    if view.read_order is not None:  # the order chunks are read in is data
        out["mixture_config"] = view.read_order
    return out


def plain(obj: Any) -> Any:
    """``obj`` as JSON data (tuples become lists, keys strings), as it would be read back."""
    try:
        return orjson.loads(orjson.dumps(obj))
    except TypeError:
        return json.loads(json.dumps(obj))


def _operators(fp: Any) -> list:
    ops = fp.get("operators") if isinstance(fp, dict) else None
    return ops if isinstance(ops, list) else []


def _comparable(fp: Any) -> tuple[Any, dict[int, Any]]:
    """The fingerprint without execution settings, and the micro-batch size of each batch
    operator (by its place in the operator list)."""
    fp = plain(fp)
    sizes: dict[int, Any] = {}
    for i, op in enumerate(_operators(fp)):
        if isinstance(op, dict):
            for k in _EXECUTION_KEYS:
                op.pop(k, None)
            if op.get("op") == "batch":
                sizes[i] = op.pop("microbatch_size", None)
    return fp, sizes


def batch_resize(ckpt_fp: Any, view: PipelineView) -> int | None:
    """The checkpoint's micro-batch size where this pipeline batches differently, else None."""
    _, theirs = _comparable(ckpt_fp)
    _, mine = _comparable(fingerprint(view))
    for i, size in theirs.items():
        if type(size) is not int or size < 1:
            raise CheckpointError(f"fingerprint.operators[{i}].microbatch_size",
                                  f"must be a positive integer, got {size!r}")
        if i in mine and mine[i] != size:
            return size
    return None


def _diff(a: Any, b: Any, path: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: present in only one of checkpoint/pipeline"
            d = _diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} entries in the checkpoint, {len(b)} in this pipeline"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    if a != b or type(a) is not type(b):
        return f"{path}: checkpoint has {a!r}, this pipeline has {b!r}"
    return None


def check_compatible(doc: Mapping[str, Any], view: PipelineView) -> int | None:
    """Refuse what would change the data already promised (datasets, curriculum, operators and
    their settings); allow execution settings and the micro-batch size. Returns the old
    micro-batch size when it changes."""
    theirs, _ = _comparable(doc["fingerprint"])
    mine, _ = _comparable(fingerprint(view))
    d = _diff(theirs, mine, "fingerprint")
    if d:
        field, _, what = d.partition(": ")
        raise CheckpointError(field, f"does not match this pipeline: {what} (restore needs the "
                                     "same datasets, work source, operators and parameters)")
    old = batch_resize(doc["fingerprint"], view)
    if old is not None:
        ops = _operators(mine)
        at = next(i for i, op in enumerate(ops) if op.get("op") == "batch")
        if at != len(ops) - 1:
            raise CheckpointError(
                f"fingerprint.operators[{at}].microbatch_size",
                f"the checkpoint batches {old} records, this pipeline "
                f"{view.ops[at].microbatch_size}: the micro-batch size can change on "
                f"restore only when batch is the last operator ({ops[at + 1].get('op')} "
                "after it would see other batches)")
    return old
