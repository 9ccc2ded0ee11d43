"""The measured runs of the benchmark workloads, as Zephon runs them.

A run builds its workload's pipeline (``pipelines.py``), counts rows, tokens and padding of
every batch (``batch_counts``) until its meter has seen enough, and for W2 may end with W3's
checkpoint and restore (``checkpoints.py``). ``packed`` counts the padding each packing
algorithm leaves on W4.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zephon.bench.checkpoints import checkpoint_now
from zephon.bench.corpus import Corpus
from zephon.bench.memory import PssSampler
from zephon.bench.meter import Meter
from zephon.bench.params import BenchParams
from zephon.bench.pipelines import build, clear_caches

UNITS = {"W1": "records", "W2": "tokens", "W3": "seconds", "W4": "tokens", "W5": "tokens"}


def batch_counts(batch: Any) -> tuple[int, int, int]:
    """(rows, real tokens, padding tokens) of a batch, from its columns (no per-row Python).

    It runs inside the measured loop, once per batch, so it stays at a few microseconds: the
    row offsets only (``ragged_chunks`` never joins a column's chunks), no ``np.clip``."""
    block = batch.block
    payload = block.payload
    if not block.columnar or payload.schema.get_field_index("input_ids") < 0:
        return len(batch), 0, 0
    from zephon.ragged_columns import ragged_chunks

    offsets = ragged_chunks(payload, "input_ids").offsets
    pad = block.meta.get("padding_length")
    padding = int(np.maximum(pad, 0).sum()) if pad is not None else 0
    return len(batch), int(offsets[-1] - offsets[0]) - padding, padding


def run_ours(corpus: Corpus, workload: str, fmt: str, workers: int, params: BenchParams, *,
             checkpoint: bool = False, **build_kw: Any) -> dict:
    """One measured run; with ``checkpoint`` (W2 only) it ends with W3's checkpoint and restore,
    whose figures come back under "w3"."""
    meter = Meter("records" if workload == "W1" else "tokens", params.seconds_for(workload))

    def make() -> Any:
        return build(corpus, workload, fmt, workers, params, **build_kw)

    clear_caches()
    pss = PssSampler() if workload == "W2" else None
    p = make()
    it = iter(p)
    serial = None
    try:
        for b in it:
            if pss is not None:
                pss.maybe()
            done = meter.add(*batch_counts(b))
            if serial is None:  # after the first batch: start-up (and the one-time imports
                # of reading its columns: pyarrow loads pandas) is not the serial path
                serial = SerialCpu(p).start(pss.cpu_s if pss is not None else 0.0)
                first = meter.records
            if done:
                break
    except BaseException:
        p.close()
        raise
    # the serial path's CPU first, without what sampling PSS cost this process
    extra = {} if serial is None else serial.result(
        meter.records - first, pss.cpu_s if pss is not None else 0.0)
    extra.update(pss.result() if pss is not None else {})
    out = meter.result(**extra)
    if checkpoint:
        try:
            out["w3"] = {"batches": len(meter.times), "run_s": out["seconds"],
                         **checkpoint_now(p, it, make)}
        except Exception as e:  # keep the W2 figures of this run
            out["w3"] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    else:
        p.close()
    return out


class SerialCpu:
    """CPU time of the serial path, the training process and the coordinator process, per
    record delivered: what one core's worth of serial work carries, whatever the worker count.
    (The training process's figure includes the benchmark's own few microseconds per batch.)"""

    def __init__(self, pipeline: Any) -> None:
        import psutil

        snap = pipeline.metrics_snapshot() or {}
        self.excluded0 = 0.0
        pids = (snap.get("processes") or {}).get("coordinator", [])
        self.me = psutil.Process()
        self.coord = [psutil.Process(pid) for pid in pids]
        self.t0 = self._cpu()

    def _cpu(self) -> tuple[float, float]:
        import psutil

        def cpu(p) -> float:
            try:
                t = p.cpu_times()
                return t.user + t.system
            except psutil.Error:  # ended with the stream
                return 0.0

        return cpu(self.me), sum(cpu(p) for p in self.coord)

    def start(self, excluded_s: float) -> SerialCpu:
        """Measure from here; ``excluded_s``: the benchmark's own CPU so far (sampling PSS)."""
        self.excluded0 = excluded_s
        return self

    def result(self, records: int, excluded_s: float = 0.0) -> dict:
        """Per record since the start, without the benchmark's own CPU (``excluded_s``, the
        running total ``start`` was given the first value of)."""
        (a0, c0), (a1, c1) = self.t0, self._cpu()
        if records <= 0:
            return {}
        own = max(0.0, (a1 - a0) - (excluded_s - self.excluded0))
        train, coord = own * 1e6 / records, max(0.0, c1 - c0) * 1e6 / records
        return {"serial_us_per_record": train + coord, "train_us_per_record": train,
                "coordinator_us_per_record": coord}


def first_batches(p: Any, batches: int) -> tuple[int, int, int]:
    """(rows, real tokens, padding tokens) summed over the first ``batches`` batches of ``p``,
    which is closed after."""
    rows = tokens = padding = 0
    try:
        for i, b in enumerate(p):
            r, t, pad = batch_counts(b)
            rows, tokens, padding = rows + r, tokens + t, padding + pad
            if i + 1 == batches:
                break
    finally:
        p.close()
    return rows, tokens, padding


def packed(corpus: Corpus, params: BenchParams, algorithm: str, batches: int) -> dict:
    """Tokens and padding in the first ``batches`` W4 batches packed by ``algorithm``: every
    algorithm sees the same documents in the same order."""
    _, tokens, padding = first_batches(build(corpus, "W4", "tokenized", 0, params,
                                             algorithm=algorithm), batches)
    return {"tokens": tokens, "padding": padding}


def padding_fraction(run: dict) -> float | None:
    total = run.get("tokens", 0) + run.get("padding", 0)
    return run["padding"] / total if total and "error" not in run else None
