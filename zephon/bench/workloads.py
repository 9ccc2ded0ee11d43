"""The benchmark workloads as Zephon runs them.

W1 fetch + batch(32); W2 tokenize -> shuffle -> pack_flat(2049, best_fit) -> batch(8);
W3 (see ``checkpoints.py``) checkpoint and restore of the W2 pipeline; W4 pack_flat + batch(8)
over pre-tokenized Parquet; W5 (see ``chat.py``) tokenize_chat -> pack_flat(2049) -> batch(8)
over conversations. Datasets repeat, so a run can ask for more than one pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zephon.bench.corpus import Corpus
from zephon.bench.memory import PssSampler
from zephon.bench.meter import Meter
from zephon.bench.params import BenchParams

MAX_LENGTH = 2049
# Zephon keeps decoded Parquet row groups in a per-process LRU (256 MiB by default), which would
# hold the whole benchmark corpus after one pass and turn later passes into memory reads. Runs
# cap it well below the corpus, as training on a corpus larger than memory would see, and start
# with it empty.
RG_CACHE_BYTES = 16 << 20
UNITS = {"W1": "records", "W2": "tokens", "W3": "seconds", "W4": "tokens", "W5": "tokens"}


def build(corpus: Corpus, workload: str, fmt: str, workers: int, params: BenchParams, *,
          algorithm: str = "best_fit", chunk_size: int | None = None,
          max_length: int = MAX_LENGTH, microbatch: int = 8, shuffle: bool = False) -> Any:
    """Our pipeline for ``workload``; W4 reads the pre-tokenized copy whatever ``fmt`` says
    (``shuffle`` puts W2's shuffle before W4's packing)."""
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    if workload == "W5":
        from zephon.bench.chat import build_ours

        return build_ours(corpus, workers, params, chunk_size=chunk_size)
    source_fmt = "tokenized" if workload == "W4" else fmt
    datasets = [Dataset.from_path(name, path) for name, path in corpus.datasets(source_fmt)]
    ws = StaticMixtureWorkSource(datasets=datasets, mixture=MixtureSpec(corpus.mixture), seed=42,
                                 chunk_size=chunk_size or params.chunk_size,
                                 exhausted_policy="repeat")
    p = Pipeline(ws).options(num_workers=workers,
                             io_options={"parquet_rg_cache": {"limit_bytes": RG_CACHE_BYTES}})
    if workload == "W1":
        return p.batch(microbatch_size=32)
    if workload in ("W2", "W3"):
        return (p.tokenize(tokenizer=corpus.tokenizer_path, field="text")
                .shuffle(buffer_size=params.shuffle_buffer, seed=1)
                .pack_flat(max_length=max_length, algorithm=algorithm, num_bins=64,
                           pad_token_id=0)
                .batch(microbatch_size=microbatch))
    if workload == "W4":
        if shuffle:
            p = p.shuffle(buffer_size=params.shuffle_buffer, seed=1)
        return (p.pack_flat(max_length=max_length, algorithm=algorithm, num_bins=64,
                            pad_token_id=0, tokens_field="input_ids")
                .batch(microbatch_size=microbatch))
    raise ValueError(f"unknown workload {workload!r}")


def clear_caches() -> None:
    """Empty this process's row-group cache and hold it to ``RG_CACHE_BYTES`` (a requested
    limit only ever raises it; worker processes start with their own, empty)."""
    from zephon.io.formats.parquet_reader import row_group_cache

    cache = row_group_cache(RG_CACHE_BYTES)
    cache.clear()
    cache.limit_bytes = RG_CACHE_BYTES


def batch_counts(batch: Any) -> tuple[int, int, int]:
    """(rows, real tokens, padding tokens) of a batch, from its columns (no per-row Python).

    It runs inside the measured loop, once per batch, so it stays at a few microseconds: the
    row offsets only (``ragged_chunks`` never joins a column's chunks), no ``np.clip``."""
    block = batch.block
    payload = block.payload
    if not block.columnar or payload.schema.get_field_index("input_ids") < 0:
        return len(batch), 0, 0
    from zephon.block import ragged_chunks

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
    try:
        for b in it:
            if pss is not None:
                pss.maybe()
            if meter.add(*batch_counts(b)):
                break
    except BaseException:
        p.close()
        raise
    out = meter.result(**(pss.result() if pss is not None else {}))
    if checkpoint:
        from zephon.bench.checkpoints import checkpoint_now

        try:
            out["w3"] = {"batches": len(meter.times), "run_s": out["seconds"],
                         **checkpoint_now(p, it, make)}
        except Exception as e:  # keep the W2 figures of this run
            out["w3"] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    else:
        p.close()
    return out


def packed(corpus: Corpus, params: BenchParams, algorithm: str, batches: int) -> dict:
    """Tokens and padding in the first ``batches`` W4 batches packed by ``algorithm``: every
    algorithm sees the same documents in the same order."""
    p = build(corpus, "W4", "tokenized", 0, params, algorithm=algorithm)
    tokens = padding = 0
    try:
        for i, b in enumerate(p):
            _, t, pad = batch_counts(b)
            tokens, padding = tokens + t, padding + pad
            if i + 1 == batches:
                break
    finally:
        p.close()
    return {"tokens": tokens, "padding": padding}


def padding_fraction(run: dict) -> float | None:
    total = run.get("tokens", 0) + run.get("padding", 0)
    return run["padding"] / total if total and "error" not in run else None
