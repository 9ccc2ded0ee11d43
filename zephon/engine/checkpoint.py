"""Checkpoint documents: per-lane cursor states plus a fingerprint of what produced them.

A checkpoint is a plain JSON-serializable dict. Its size depends on the number of lanes and the
records held in buffers, never on chunk size or on how long training ran.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import orjson

from zephon.engine.refs import decode, encode
from zephon.ops.errors import CheckpointError

FORMAT = "zephon-checkpoint"
# work-source state that describes a position, not the curriculum
_PER_LANE_KEYS = ("lane_id", "canonical_replicas", "next_chunk_id", "chunk_size_hint",
                  "token_ratios")
# 2: integrity digests; a batch state may carry "discard" (after a micro-batch size change)
VERSION = 2
READABLE = (1, 2)  # version 1 is version 2 without digests: read as it is
# operator settings that change how fast, never what: a restore may change them
_EXECUTION_KEYS = ("parallelism", "placement")


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


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no spaces: orjson (fast: checkpoints carry long cursor arrays), or the
    standard library for what orjson refuses (integers past 64 bits, non-string keys). The
    choice depends on the content alone, so writer and reader always agree."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")


def digest_of(obj: Any) -> str:
    """What a checkpoint's digests are: SHA-256 of the canonical JSON text."""
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def _signed(lane: dict) -> dict:
    lane = encode(lane)
    lane.pop("digest", None)
    lane["digest"] = digest_of(lane)
    return lane


def header_digest(doc: Mapping[str, Any]) -> str:
    """Covers everything but the lanes' contents, and which lanes hold which (digested) state,
    so a lane cannot be dropped, swapped or reset to null unnoticed."""
    head = {k: v for k, v in doc.items() if k not in ("lanes", "digest")}
    head["lanes"] = {k: (v.get("digest") if isinstance(v, Mapping) else None)
                     for k, v in doc["lanes"].items()}
    return digest_of(head)


def build(pipeline, canonical_replicas: int, lane_states: Mapping[int, dict | None]) -> dict:
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "canonical_replicas": int(canonical_replicas),
        "fingerprint": fingerprint(pipeline),
        "token_ratios": getattr(pipeline.work_source, "token_ratios", None),
        "lanes": {str(k): (_signed(v) if v is not None else None)
                  for k, v in sorted(lane_states.items())},
    }
    doc["digest"] = header_digest(doc)
    return doc


def lane_states(state: Mapping[str, Any], pipeline=None) -> dict[int, dict | None]:
    """Decoded lane states of a validated checkpoint; with ``pipeline``, restated for its
    micro-batch size (records delivered in batches of the old size become a ``discard``)."""
    out = {}
    for k, v in state["lanes"].items():
        if v is not None:
            v = decode({key: x for key, x in v.items() if key != "digest"})
        out[int(k)] = v
    old = None if pipeline is None else batch_resize(state["fingerprint"], pipeline)
    if old is not None:
        i = _batch_stage(pipeline)
        for st in out.values():
            if st is not None:
                held = dict(st["base"]["ops"][i])
                held["discard"] = int(held.get("discard", 0)) + int(st["skip"]) * old
                st["base"]["ops"][i] = held
                st["skip"] = 0
    return out


def _batch_stage(pipeline) -> int:
    from zephon.engine.plan import compile_plan
    from zephon.ops.batch import BatchOp

    serial = compile_plan(pipeline._all_ops()).serial_ops
    return next(i for i, op in enumerate(serial) if isinstance(op, BatchOp))


def _plain(obj: Any) -> Any:
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
    fp = _plain(fp)
    sizes: dict[int, Any] = {}
    for i, op in enumerate(_operators(fp)):
        if isinstance(op, dict):
            for k in _EXECUTION_KEYS:
                op.pop(k, None)
            if op.get("op") == "batch":
                sizes[i] = op.pop("microbatch_size", None)
    return fp, sizes


def batch_resize(ckpt_fp: Any, pipeline) -> int | None:
    """The checkpoint's micro-batch size where this pipeline batches differently, else None."""
    _, theirs = _comparable(ckpt_fp)
    _, mine = _comparable(fingerprint(pipeline))
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


def check_compatible(doc: Mapping[str, Any], pipeline) -> int | None:
    """Refuse what would change the data already promised (datasets, curriculum, operators and
    their settings); allow execution settings and the micro-batch size. Returns the old
    micro-batch size when it changes."""
    theirs, _ = _comparable(doc["fingerprint"])
    mine, _ = _comparable(fingerprint(pipeline))
    d = _diff(theirs, mine, "fingerprint")
    if d:
        field, _, what = d.partition(": ")
        raise CheckpointError(field, f"does not match this pipeline: {what} (restore needs the "
                                     "same datasets, work source, operators and parameters)")
    old = batch_resize(doc["fingerprint"], pipeline)
    if old is not None:
        ops = _operators(mine)
        at = next(i for i, op in enumerate(ops) if op.get("op") == "batch")
        if at != len(ops) - 1:
            raise CheckpointError(
                f"fingerprint.operators[{at}].microbatch_size",
                f"the checkpoint batches {old} records, this pipeline "
                f"{pipeline._ops[at].microbatch_size}: the micro-batch size can change on "
                f"restore only when batch is the last operator ({ops[at + 1].get('op')} "
                "after it would see other batches)")
    return old


def validate_checkpoint(state: Mapping[str, Any], pipeline) -> dict:
    """The checkpoint as plain JSON data, checked whole against its schema, this pipeline and
    its digests; anything else raises ``CheckpointError`` naming the field."""
    from zephon.engine.checkpoint_ops import check_document

    if not isinstance(state, Mapping):
        raise CheckpointError("", f"expected a dict, got {type(state).__name__}")
    try:
        doc = _plain(state)
    except (TypeError, ValueError) as e:
        raise CheckpointError("", f"not plain JSON data ({e})") from None
    if doc.get("format") != FORMAT:
        raise CheckpointError("format", "not a Zephon checkpoint (missing format marker)")
    if doc.get("version") not in READABLE:
        raise CheckpointError("version", f"version {doc.get('version')!r} is not supported "
                                         f"(this Zephon reads {list(READABLE)})")
    old_batch = check_document(doc, pipeline)
    if doc["version"] >= 2:
        for k, lane in doc["lanes"].items():
            if lane is not None and lane["digest"] != digest_of(
                    {key: v for key, v in lane.items() if key != "digest"}):
                raise CheckpointError(f"lanes[{k}]", "does not match its digest: the state was "
                                      "changed after it was written (or corrupted)")
        if doc["digest"] != header_digest(doc):
            raise CheckpointError("digest", "the checkpoint's header (fingerprint, token ratios, "
                                  "lane list) was changed after it was written (or corrupted)")
    if old_batch is not None:
        _warn_unaligned(doc, old_batch, pipeline)
    return doc


def _warn_unaligned(doc: Mapping[str, Any], old: int, pipeline) -> None:
    """Spec 9.4: a lane contributes a multiple of the micro-batch size to every global step.
    The record stream resumes exactly at any size; a lane whose delivered records are not a
    multiple of the new size cannot have stopped on a step boundary of the resumed run."""
    import warnings

    new = pipeline._ops[-1].microbatch_size
    odd = sorted(int(k) for k, v in doc["lanes"].items()
                 if v is not None and (v["delivered"] * old) % new)
    if odd:
        warnings.warn(f"restore: micro-batch size {old} -> {new}; lane(s) {odd} delivered a "
                      f"number of records that is not a multiple of {new}, so the resumed "
                      "run's global steps do not line up with the first run's (spec 9.4)",
                      UserWarning, stacklevel=3)
