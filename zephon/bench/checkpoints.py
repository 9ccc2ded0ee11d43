"""W3: checkpoint and restore, as Zephon runs it.

W3: the W2 pipeline delivers some batches (those of a W2 measurement, or ``w3_batches``) and is
checkpointed (size of the JSON, time); then, each from scratch, a cold start of the same
pipeline and a restored one run to their first batch. Both times include building the pipeline, so restore overhead shows as their ratio
(target <= 1.2). The restored first batch is compared with the batch the original run delivered
next: a restore that is fast but wrong would not count.

``sweep``: checkpoint size, checkpoint time and restore-to-first-batch time at several chunk
sizes after many cheap batches (pre-tokenized documents, shuffle, pack_flat into short rows,
batches of one row), showing that a checkpoint holds cursors whose number depends on the buffers, not
on the chunk size or on how long training ran.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from zephon.bench.corpus import Corpus
from zephon.bench.params import BenchParams
from zephon.bench.pipelines import build, clear_caches


def _ids(batch: Any) -> np.ndarray:
    return np.asarray(batch.to_training(dtype="numpy")["input_ids"])


def _first_batch(make, state: dict | None) -> tuple[float, Any]:
    clear_caches()  # a restart is a new process: nothing decoded yet
    t0 = time.perf_counter()
    p = make()
    if state is not None:
        p.restore(state)
    try:
        first = next(iter(p))
        return time.perf_counter() - t0, _ids(first)
    finally:
        p.close()


def checkpoint_now(p: Any, it: Any, make: Callable[[], Any]) -> dict:
    """Checkpoint ``p`` (being iterated by ``it``), note its next batch and close it; then, each
    from scratch, a cold start of ``make()`` and a restored one run to their first batch."""
    try:
        t1 = time.perf_counter()
        state = p.checkpoint()
        ckpt_s = time.perf_counter() - t1
        blob = json.dumps(state)
        expected = _ids(next(it))
    finally:
        p.close()
    cold_s, _ = _first_batch(make, None)
    restore_s, got = _first_batch(make, json.loads(blob))
    return {"checkpoint_bytes": len(blob), "checkpoint_s": ckpt_s, "cold_first_batch_s": cold_s,
            "restore_first_batch_s": restore_s,
            "restore_exact": bool(got.shape == expected.shape and np.array_equal(got, expected))}


def checkpoint_after(make: Callable[[], Any], batches: int) -> dict:
    """Deliver ``batches`` batches of a fresh ``make()``, then ``checkpoint_now``."""
    clear_caches()
    p = make()
    t0 = time.perf_counter()
    it = iter(p)
    try:
        for _ in range(batches):
            next(it)
    except BaseException:
        p.close()
        raise
    run_s = time.perf_counter() - t0
    return {"batches": batches, "run_s": run_s, **checkpoint_now(p, it, make)}


def run_w3(corpus: Corpus, fmt: str, workers: int, params: BenchParams) -> dict:
    """W3 on its own (the runner folds it into the W2 runs when both are asked for)."""
    out = checkpoint_after(lambda: build(corpus, "W3", fmt, workers, params), params.w3_batches)
    out["seconds"] = out["restore_first_batch_s"]
    return out


def sweep(corpus: Corpus, params: BenchParams, log: Callable[[str], None] = print) -> list[dict]:
    points = []
    for chunk, batches in params.ckpt_points:
        # W4 plus a shuffle before packing, so the checkpoint holds buffered cursors
        def make(chunk: int = chunk) -> Any:
            return build(corpus, "W4", "parquet", 0, params, chunk_size=chunk,
                         max_length=params.ckpt_max_length,
                         microbatch=params.ckpt_microbatch, shuffle=True)

        try:
            point = {"chunk_size": chunk, **checkpoint_after(make, batches)}
        except Exception as e:  # one broken point must not hide the others
            point = {"chunk_size": chunk, "batches": batches,
                     "error": f"{type(e).__name__}: {e}"}
        log(f"  W3 sweep chunk_size={chunk} batches={batches}: "
            + (point.get("error") or f"{point['checkpoint_bytes']:,} B, "
               f"restore {point['restore_first_batch_s']:.2f}s"))
        points.append(point)
    return points
