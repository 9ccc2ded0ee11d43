"""Priming token-aware mixtures: measure tokens per byte of each dataset, once, in the driver.

A few thousand samples spread over several shards per dataset go through the pipeline's own
per-record operators up to the first ``tokenize`` (or the user's ``measure`` callable); the
ratio is tokens per *stored* byte, the unit the work source charges (mean bytes per sample
from the shard sizes), so the expected tokens per drawn sample come out right on average.
"""

from __future__ import annotations

import warnings

import numpy as np

from zephon.block import Block
from zephon.engine.lane import apply_ops
from zephon.ops.decode_text import DecodeTextOp
from zephon.ops.map_transform import MapTransformOp
from zephon.ops.tokenize import TokenizeOp
from zephon.work.token_estimation import mean_bytes_per_sample


def _calibration_pointers(ds, te) -> tuple[np.ndarray, np.ndarray]:
    ids, counts = np.asarray(ds.ids()), np.asarray(ds.counts())
    raw = ds.raw_bytes()
    n_shards = te.calibration_shards_min
    if raw is not None and len(ids) > 1:
        per_row = np.asarray(raw, dtype=np.float64) / np.maximum(counts, 1)
        spread = per_row.std() / max(per_row.mean(), 1e-9)  # heterogeneous shards: look wider
        n_shards = int(round(te.calibration_shards_min + spread * 4 *
                             (te.calibration_shards_max - te.calibration_shards_min)))
    n_shards = max(1, min(len(ids), te.calibration_shards_max, n_shards))
    pick = np.unique(np.linspace(0, len(ids) - 1, n_shards).round().astype(np.int64))
    per = max(1, te.calibration_samples // len(pick))
    shards, rows = [], []
    for s in pick.tolist():
        k = min(per, int(counts[s]))
        shards.append(np.full(k, ids[s], dtype=np.int64))
        rows.append(np.linspace(0, counts[s] - 1, k).round().astype(np.int64))
    return np.concatenate(shards), np.concatenate(rows)


def calibration_replayable(op) -> bool:
    """Whether priming may run ``op`` on calibration samples (see ``OpTraits``)."""
    if isinstance(op, (DecodeTextOp, MapTransformOp)):
        return True
    return bool(op.traits().calibration_replayable)


def prime(pipeline, ratios_from_checkpoint: dict | None = None) -> None:
    """Measure (or take from a checkpoint) the tokens per byte a token-aware source needs."""
    ws = pipeline.work_source
    if ratios_from_checkpoint and hasattr(ws, "datasets_to_measure") and ws.datasets_to_measure():
        ws.set_token_ratios(ratios_from_checkpoint)  # a restored run never re-measures
    todo = ws.datasets_to_measure() if hasattr(ws, "datasets_to_measure") else []
    if not todo:
        return
    te = ws.token_estimation
    ops = pipeline._ops
    tok_i = next((i for i, o in enumerate(ops) if isinstance(o, TokenizeOp)), None)
    if sum(isinstance(o, TokenizeOp) for o in ops) > 1:
        warnings.warn("token-aware mixture: several tokenize operators; priming uses the first",
                      stacklevel=3)
    if te.measure is None:
        if tok_i is None:
            raise ValueError("a token-aware work source needs a tokenize operator (or "
                             "TokenEstimation(measure=...) or pinned primer ratios)")
        bad = [o.op_name for o in ops[:tok_i] if not calibration_replayable(o)]
        if bad:
            raise ValueError(f"cannot measure tokens per byte through {bad}: pin the ratios "
                             "(TokenEstimation(primer={...})), pass measure=, or declare the "
                             "operator calibration_replayable=True if running it record by "
                             "record gives the payloads and counts of a real run")
    fetch = pipeline._all_ops()[0]
    ratios = {}
    names = list(ws.component_ids())
    for name in todo:
        d = names.index(name)
        ds = ws.datasets_by_id[d]
        shards, rows = _calibration_pointers(ds, te)
        n = len(rows)
        meta = {"dataset_id": np.full(n, d, np.int64), "shard_id": shards, "sample_idx": rows,
                "lane_id": np.zeros(n, np.int64), "chunk_id": np.zeros(n, np.int64),
                "chunk_offset": np.arange(n, dtype=np.int64)}
        if te.measure is not None:
            block = apply_ops([fetch], Block(meta, None))
            tokens = sum(int(te.measure(p)) for p in block.payload_list()) if block else 0
        else:
            block = apply_ops([fetch, *ops[: tok_i + 1]], Block(meta, None))
            tokens = 0
            if block is not None:
                from zephon.block import ragged_column

                offsets, _ = ragged_column(block.payload, "input_ids")
                tokens = int(offsets[-1])
        bytes_per_sample = mean_bytes_per_sample(ds)
        if not tokens or not bytes_per_sample:
            warnings.warn(f"could not measure dataset {name!r}: using fallback "
                          f"{te.fallback_tokens_per_byte} tokens per byte", stacklevel=3)
            ratios[name] = te.fallback_tokens_per_byte
        else:
            ratios[name] = (tokens / n) / bytes_per_sample  # samples dropped count as zero
    ws.set_token_ratios(ratios)
