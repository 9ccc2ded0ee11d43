"""Priming token-aware mixtures: each dataset's tokens per record, measured once per node.

A token-aware work source turns token weights into sample weights, so it needs each dataset's
mean tokens per drawn record (stored as tokens per stored byte, the unit the work source
charges). Where the figure comes from, first found first:

1. a checkpoint being restored (a resumed run never measures again);
2. ``index.json`` of the dataset, written by ``build-index --tokenizer`` for the same tokenizer
   and operators;
3. the node cache (``$ZEPHON_CACHE_DIR/token-estimates``): an earlier run, another rank on this
   machine, or a restart measured it already;
4. a measurement: ``zephon/work/calibration.py`` samples clusters of records until the estimate
   is within ``TokenEstimation.precision`` (1% at 95% by default), tokenizing only a few hundred
   of them (a dataset of at most ``calibration_samples`` records and 8 MiB is tokenized
   whole); the result goes into the node cache.

The cache key is the dataset's identity (format, location, shard names, row counts, sizes and
versions), the fingerprints of the operators up to and including ``tokenize`` (the tokenizer
file's digest among them) and the estimation settings, so a changed tokenizer, dataset or
operator measures again, and a cached figure is exactly the one a fresh measurement of the same
sample would give: the stream is the same with or without the cache.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import math
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from zephon.engine.priming.token_sampling import measure
from zephon.ops.decode_text import DecodeTextOp
from zephon.ops.map_transform import MapTransformOp
from zephon.ops.tokenize import TokenizeOp
from zephon.ops.tokenize_chat import TokenizeChatOp
from zephon.work.token_estimation import mean_bytes_per_sample

_TOKENIZERS = (TokenizeOp, TokenizeChatOp)  # what priming measures through (the first one)
log = logging.getLogger("zephon")
CACHE_VERSION = 2  # 2: Student quantiles, free sub-clusters, small datasets whole


def calibration_replayable(op) -> bool:
    """Whether priming may run ``op`` on calibration samples (see ``OpTraits``)."""
    if isinstance(op, (DecodeTextOp, MapTransformOp)):
        return True
    return bool(op.traits().calibration_replayable)


def prime(spec, ratios_from_checkpoint: dict | None = None) -> tuple[Any, dict | None]:
    """(the work source to run ``spec`` with, what was done). A token-aware source that still
    needs its tokens per byte gets them on a copy, which is returned (the user's is left as it
    is); what was done (for ``metrics_snapshot()["priming"]``) is None when there was nothing
    to do, and the source is then the spec's own."""
    ws = spec.work_source
    if not hasattr(ws, "datasets_to_measure") or not ws.datasets_to_measure():
        return ws, None
    ws = copy.copy(ws)
    if ratios_from_checkpoint:
        ws.set_token_ratios(ratios_from_checkpoint)  # a restored run never re-measures
        return ws, {"seconds": 0.0, "datasets": {n: {"source": "checkpoint"}
                                                 for n in ratios_from_checkpoint}}
    todo = ws.datasets_to_measure()
    t0 = time.perf_counter()
    te = ws.token_estimation
    ops = list(spec.ops)
    tok_i = _tokenize_index(ops, te)
    fetch = spec.fetch
    pre, tok = (ops[:tok_i], ops[tok_i]) if tok_i is not None else ([], None)
    names = list(ws.component_ids())
    show = bool(spec.options.get("progress"))
    ratios, report = {}, {}
    for name in todo:
        ds = ws.datasets_by_id[names.index(name)]
        ratio, info = _ratio_for(ds, names.index(name), fetch, pre, tok, te, show)
        ratios[name] = ratio
        report[name] = info
    ws.set_token_ratios(ratios)
    seconds = time.perf_counter() - t0
    log.info("zephon: token estimation took %.2f s (%s)", seconds,
             ", ".join(f"{n}: {i['source']}" for n, i in report.items()))
    return ws, {"seconds": seconds, "datasets": report}


def describe(spec) -> str | None:
    """One line for ``explain()``: where each token-aware dataset's figure will come from,
    looked up without measuring anything."""
    ws = spec.work_source
    if not hasattr(ws, "datasets_to_measure") or ws.token_estimation is None:
        return None
    todo = ws.datasets_to_measure()
    if not todo:
        return "Token estimation: primed (pinned or already measured)"
    te, ops = ws.token_estimation, list(spec.ops)
    try:
        tok_i = _tokenize_index(ops, te)
    except ValueError as e:
        return f"Token estimation: cannot measure ({e})"
    pre, tok = (ops[:tok_i], ops[tok_i]) if tok_i is not None else ([], None)
    names, parts = list(ws.component_ids()), []
    for name in todo:
        found = lookup(ws.datasets_by_id[names.index(name)],
                       estimate_key(ws.datasets_by_id[names.index(name)], pre, tok, te))
        parts.append(f"{name}: {found[1] if found else 'to be measured'}")
    return (f"Token estimation (±{te.precision:.0%} at {te.confidence:.0%}): "
            + ", ".join(parts))


def _tokenize_index(ops: list, te) -> int | None:
    tok_i = next((i for i, o in enumerate(ops) if isinstance(o, _TOKENIZERS)), None)
    if sum(isinstance(o, _TOKENIZERS) for o in ops) > 1:
        warnings.warn("token-aware mixture: several tokenize operators; priming uses the first",
                      stacklevel=4)
    if te.measure is None:
        if tok_i is None:
            raise ValueError("a token-aware work source needs a tokenize or tokenize_chat "
                             "operator (or TokenEstimation(measure=...) or pinned primer "
                             "ratios)")
        bad = [o.op_name for o in ops[:tok_i] if not calibration_replayable(o)]
        if bad:
            raise ValueError(f"cannot measure tokens per byte through {bad}: pin the ratios "
                             "(TokenEstimation(primer={...})), pass measure=, or declare the "
                             "operator calibration_replayable=True if running it record by "
                             "record gives the payloads and counts of a real run")
    return tok_i


# -- where a figure comes from -------------------------------------------------------------


def estimate_key(ds, pre: list, tok, te) -> str | None:
    """The cache key of a dataset's figure, None where the dataset has no stable identity
    (in-memory data, a measure callable: cheap to measure again, costly to identify)."""
    from zephon.state.fingerprint import op_fingerprint

    if ds.url is None or te.measure is not None:
        return None
    ident = ds.identity()
    doc = {"version": CACHE_VERSION, "dataset": ident,
           "ops": [op_fingerprint(o) for o in [*pre, tok] if o is not None],
           "estimation": {k: getattr(te, k) for k in (
               "precision", "confidence", "calibration_samples", "max_scanned",
               "calibration_shards_min", "calibration_shards_max")}}
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _cache_dir() -> Path | None:
    from zephon.io.options import resolve_store

    root = resolve_store(None).cache_root
    return None if root is None else Path(root) / "token-estimates"


def _checksum(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _valid(doc: Any, key: str) -> dict | None:
    """A cached or indexed figure is believed only if it is whole (its checksum matches: a
    truncated, corrupted or hand-edited entry does not) and well formed."""
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    if doc.get("checksum") != _checksum(doc):
        return None
    ratio = doc.get("tokens_per_byte")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
        return None
    if not math.isfinite(ratio) or ratio <= 0:
        return None
    return doc


def lookup(ds, key: str | None) -> tuple[dict, str] | None:
    if key is None:
        return None
    indexed = ds.token_estimates().get(key) if hasattr(ds, "token_estimates") else None
    if _valid(indexed, key):
        return indexed, "index.json"
    folder = _cache_dir()
    if folder is None:
        return None
    try:
        doc = json.loads((folder / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return (doc, "node cache") if _valid(doc, key) else None


def sealed(doc: dict, key: str) -> dict:
    """The entry as stored: the figure, its key and a checksum of both."""
    out = dict(doc, key=key)
    out["checksum"] = _checksum(out)
    return out


def store(key: str | None, doc: dict) -> None:
    """Temp file, fsync, atomic rename: a reader sees a whole figure or none."""
    folder = _cache_dir()
    if key is None or folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(sealed(doc, key), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / f"{key}.json")
    except OSError as e:  # a cache that cannot be written costs a later run time, never data
        log.warning("zephon: could not store a token estimate in %s: %s", folder, e)


def _ratio_for(ds, d: int, fetch, pre: list, tok, te, show: bool) -> tuple[float, dict]:
    key = estimate_key(ds, pre, tok, te)
    found = lookup(ds, key)
    if found is not None:
        doc, where = found
        return float(doc["tokens_per_byte"]), {"source": where, **_public(doc)}
    doc = measured_figure(ds, d, fetch, pre, tok, te, show)
    if doc is None:
        warnings.warn(f"could not measure dataset {ds.name!r}: using fallback "
                      f"{te.fallback_tokens_per_byte} tokens per byte", stacklevel=4)
        return te.fallback_tokens_per_byte, {"source": "fallback"}
    store(key, doc)
    return doc["tokens_per_byte"], {"source": "measured", **_public(doc)}


def measured_figure(ds, d: int, fetch, pre: list, tok, te, show: bool = False) -> dict | None:
    """Measure a dataset: its tokens per byte and how they were found (None: no tokens)."""
    t0 = time.perf_counter()
    est = measure(ds, d, fetch, pre, tok, te, show)
    bytes_per_sample = mean_bytes_per_sample(ds)
    if not est.mean_tokens > 0 or not bytes_per_sample:
        return None
    if est.n_b >= int(sum(int(c) for c in ds.counts())):  # every record tokenized: exact
        est = dataclasses.replace(est, rel_half_width=0.0)
    if est.rel_half_width > te.precision:
        within = (f"is within ±{est.rel_half_width:.1%} only"
                  if math.isfinite(est.rel_half_width)
                  else "has no known precision (too few clusters to tell)")
        warnings.warn(f"token estimate of dataset {ds.name!r} {within} (asked "
                      f"{te.precision:.1%}) after "
                      f"tokenizing {est.n_b} and scanning {est.n_a} records: raise "
                      "TokenEstimation(calibration_samples=..., max_scanned=...)", stacklevel=5)
    return {"tokens_per_byte": est.mean_tokens / bytes_per_sample,
            "tokens_per_record": est.mean_tokens, "precision": est.rel_half_width,
            "tokenized": est.n_b, "scanned": est.n_a,
            "seconds": round(time.perf_counter() - t0, 3)}


def _public(doc: dict) -> dict:
    return {k: doc[k] for k in ("tokens_per_record", "precision", "tokenized", "scanned",
                                "seconds") if k in doc}
