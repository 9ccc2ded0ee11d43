"""Checkpoint documents: per-lane cursor states plus a fingerprint of what produced them.

A checkpoint is a plain JSON-serializable dict. Its size depends on the number of lanes and the
records held in buffers, never on chunk size or on how long training ran.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from zephon.engine.refs import decode, encode

FORMAT = "zephon-checkpoint"
# work-source state that describes a position, not the curriculum
_PER_LANE_KEYS = ("lane_id", "canonical_replicas", "next_chunk_id", "chunk_size_hint",
                  "token_ratios")
VERSION = 1


def _jsonable(v: Any) -> Any:
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if callable(v):
        return f"callable:{getattr(v, '__module__', '?')}.{getattr(v, '__qualname__', type(v).__name__)}"
    return type(v).__name__


def op_fingerprint(op) -> dict:
    """Name and configuration of an operator (functions by qualified name)."""
    custom = getattr(op, "fingerprint", None)
    if callable(custom):
        return {"op": op.op_name, **custom()}
    conf = {}
    for k, v in sorted(vars(op).items()):
        if k.startswith("_") or k in ("datasets", "stage_info", "work_source", "spec"):
            continue
        conf[k] = _jsonable(v)
    spec = getattr(op, "spec", None)
    if spec is not None and hasattr(spec, "label"):
        digest = hashlib.sha256(spec.payload.encode("utf-8")).hexdigest()[:16]
        conf["tokenizer"] = spec.label if spec.kind == "fallback" else digest
    return {"op": op.op_name, **conf}


def fingerprint(pipeline) -> dict:
    ws = pipeline.work_source
    ws_fp: dict = {"type": type(ws).__name__}
    if hasattr(ws, "state_dict"):
        ws_fp.update({k: v for k, v in ws.state_dict().items()
                      if k not in _PER_LANE_KEYS})
    ops = [op_fingerprint(o) for o in pipeline._ops]
    out = {"work_source": _jsonable(ws_fp), "operators": ops}
    from zephon.work.read_config import coerce

    read = coerce(pipeline._options.get("mixture_config"))
    if read is not None and not read.is_default:  # the order chunks are read in is data
        out["mixture_config"] = read.describe()
    return out


def build(pipeline, canonical_replicas: int, lane_states: Mapping[int, dict | None]) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "canonical_replicas": int(canonical_replicas),
        "fingerprint": fingerprint(pipeline),
        "token_ratios": getattr(pipeline.work_source, "token_ratios", None),
        "lanes": {str(k): (encode(v) if v is not None else None)
                  for k, v in sorted(lane_states.items())},
    }


def lane_states(state: Mapping[str, Any]) -> dict[int, dict | None]:
    return {int(k): (decode(v) if v is not None else None) for k, v in state["lanes"].items()}


def _diff(a: Any, b: Any, path: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}{k}: present in only one of checkpoint/pipeline"
            d = _diff(a[k], b[k], f"{path}{k}.")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path.rstrip('.')}: {len(a)} entries in the checkpoint, {len(b)} in this pipeline"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _diff(x, y, f"{path}{i}.")
            if d:
                return d
        return None
    if a != b:
        return f"{path.rstrip('.')}: checkpoint has {a!r}, this pipeline has {b!r}"
    return None


def validate_checkpoint(state: Mapping[str, Any], pipeline) -> None:
    """Refuse malformed or incompatible checkpoints, saying what differs."""
    if not isinstance(state, Mapping) or state.get("format") != FORMAT:
        raise ValueError("not a Zephon checkpoint (missing format marker)")
    if state.get("version") != VERSION:
        raise ValueError(f"checkpoint version {state.get('version')} is not supported")
    if not isinstance(state.get("lanes"), Mapping):
        raise ValueError("malformed checkpoint: 'lanes' must be a mapping")
    json.dumps(state)  # must be plain JSON
    from zephon.engine.topology import resolve_topology

    L = resolve_topology(pipeline._options).canonical_replicas
    if int(state["canonical_replicas"]) != L:
        raise RuntimeError(
            f"checkpoint was taken with canonical_replicas={state['canonical_replicas']}, this "
            f"pipeline has {L}: pass options(canonical_replicas={state['canonical_replicas']})")
    d = _diff(state["fingerprint"], fingerprint(pipeline))
    if d:
        raise RuntimeError(f"checkpoint does not match this pipeline: {d}")
