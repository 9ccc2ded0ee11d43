"""Checkpoint documents: per-lane cursor states plus a fingerprint of what produced them.

A checkpoint is a plain JSON-serializable dict. Its size depends on the number of lanes and the
records held in buffers, never on chunk size or on how long training ran.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from zephon.errors import CheckpointError
from zephon.state.fingerprint import batch_resize, fingerprint, plain
from zephon.state.refs import decode, encode
from zephon.state.view import PipelineView

FORMAT = "zephon-checkpoint"
# 2: integrity digests; a batch state may carry "discard" (after a micro-batch size change)
VERSION = 2
READABLE = (1, 2)  # version 1 is version 2 without digests: read as it is


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


def build(view: PipelineView, lane_states: Mapping[int, dict | None]) -> dict:
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "canonical_replicas": int(view.canonical_replicas),
        "fingerprint": fingerprint(view),
        "token_ratios": getattr(view.work_source, "token_ratios", None),
        "lanes": {str(k): (_signed(v) if v is not None else None)
                  for k, v in sorted(lane_states.items())},
    }
    doc["digest"] = header_digest(doc)
    return doc


def lane_states(state: Mapping[str, Any], view: PipelineView | None = None
                ) -> dict[int, dict | None]:
    """Decoded lane states of a validated checkpoint; with ``view``, restated for its
    micro-batch size (records delivered in batches of the old size become a ``discard``)."""
    out = {}
    for k, v in state["lanes"].items():
        if v is not None:
            v = decode({key: x for key, x in v.items() if key != "digest"})
        out[int(k)] = v
    old = None if view is None else batch_resize(state["fingerprint"], view)
    if old is not None:
        i = next(i for i, op in enumerate(view.serial_ops) if op.traits().forms_batches)
        for st in out.values():
            if st is not None:
                held = dict(st["base"]["ops"][i])
                held["discard"] = int(held.get("discard", 0)) + int(st["skip"]) * old
                st["base"]["ops"][i] = held
                st["skip"] = 0
    return out


def validate_checkpoint(state: Mapping[str, Any], view: PipelineView) -> dict:
    """The checkpoint as plain JSON data, checked whole against its schema, this pipeline and
    its digests; anything else raises ``CheckpointError`` naming the field."""
    from zephon.state.checkpoint_checks import check_document

    if not isinstance(state, Mapping):
        raise CheckpointError("", f"expected a dict, got {type(state).__name__}")
    try:
        doc = plain(state)
    except (TypeError, ValueError) as e:
        raise CheckpointError("", f"not plain JSON data ({e})") from None
    if doc.get("format") != FORMAT:
        raise CheckpointError("format", "not a Zephon checkpoint (missing format marker)")
    if doc.get("version") not in READABLE:
        raise CheckpointError("version", f"version {doc.get('version')!r} is not supported "
                                         f"(this Zephon reads {list(READABLE)})")
    old_batch = check_document(doc, view)
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
        _warn_unaligned(doc, old_batch, view)
    return doc


def _warn_unaligned(doc: Mapping[str, Any], old: int, view: PipelineView) -> None:
    """Spec 9.4: a lane contributes a multiple of the micro-batch size to every global step.
    The record stream resumes exactly at any size; a lane whose delivered records are not a
    multiple of the new size cannot have stopped on a step boundary of the resumed run."""
    new = view.ops[-1].microbatch_size
    odd = sorted(int(k) for k, v in doc["lanes"].items()
                 if v is not None and (v["delivered"] * old) % new)
    if odd:
        warnings.warn(f"restore: micro-batch size {old} -> {new}; lane(s) {odd} delivered a "
                      f"number of records that is not a multiple of {new}, so the resumed "
                      "run's global steps do not line up with the first run's (spec 9.4)",
                      UserWarning, stacklevel=3)


def merge_checkpoints(parts: Sequence[Mapping[str, Any]]) -> dict:
    """Union of the lanes of several ranks' checkpoints (they must agree on everything else).

    Needed only when the ranks' checkpoints were taken apart (no ``torch.distributed`` group,
    no ``aggregate_dir`` / ``aggregate_store``); otherwise ``checkpoint()`` merges itself.

    Args:
        parts: The checkpoints of the ranks, any order.

    Returns:
        One checkpoint holding every lane, for ``Pipeline.restore``.

    Raises:
        ValueError: ``parts`` is empty.
        RuntimeError: The checkpoints come from different pipelines, or two ranks hold
            different states of one lane.
    """
    if not parts:
        raise ValueError("merge_checkpoints needs at least one checkpoint")
    first = parts[0]
    merged = {k: v for k, v in first.items() if k != "lanes"}
    lanes: dict[str, Any] = {}
    for p in parts:
        if p["fingerprint"] != first["fingerprint"] or p["canonical_replicas"] != first["canonical_replicas"]:
            raise RuntimeError("ranks' checkpoints disagree on the pipeline: were all ranks "
                               "built with the same definition and options?")
        for lane, st in p["lanes"].items():
            if lane in lanes and lanes[lane] is not None and st is not None and lanes[lane] != st:
                # ranks of one data-parallel group own the same lanes and hold equal states
                raise RuntimeError(f"lane {lane} has different states on two ranks")
            if lanes.get(lane) is None:
                lanes[lane] = st
    merged["lanes"] = dict(sorted(lanes.items(), key=lambda kv: int(kv[0])))
    if "digest" in first:  # each part's header is checked, then the union's is signed anew
        for i, p in enumerate(parts):
            if p.get("digest") != header_digest(p):
                raise CheckpointError(f"parts[{i}].digest", "a rank's checkpoint was changed "
                                      "after it was written (or corrupted)")
        merged["digest"] = header_digest(merged)
    return merged
