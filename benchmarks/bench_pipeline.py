"""Pipeline benchmarks (pytest-benchmark): whole inline pipelines and ``to_training``.

    python -m pytest benchmarks/bench_pipeline.py --benchmark-only -p no:cacheprovider

- inline throughput of W1/W2/W4-like pipelines on a small generated corpus (the comparative
  runner, ``python -m zephon bench``, runs the same workloads against other loaders):
  W1 fetch + batch(32) over JSONL and Parquet; W2 tokenize -> shuffle -> pack_flat(2049,
  best_fit) -> batch(8); W4 pack_flat(2049) + batch(8) over pre-tokenized Parquet. Each round
  builds the pipeline and takes a fixed number of batches, so start-up is included;
- ``SampleBatch.to_training`` on a packed batch (labels, cu_seqlens) beside its numpy core,
  ``zephon.tokens.training.to_training_arrays`` on the same arrays: the difference is what the
  columnar view costs.

Records/s or tokens/s land in each benchmark's ``extra_info``.
"""

from __future__ import annotations

import numpy as np
import pytest

from zephon.bench.corpus import CorpusSpec, ensure_corpus
from zephon.bench.params import TINY
from zephon.bench.pipelines import build
from zephon.bench.workloads import first_batches

PARAMS = TINY  # shuffle buffer 64, chunk size 1024: a small corpus still mixes both datasets


def per_s(benchmark, amount) -> int | None:
    """``amount`` per second of the median round; None under ``--benchmark-disable``."""
    stats = benchmark.stats
    return int(amount / stats.stats.median) if stats is not None else None


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return ensure_corpus(CorpusSpec(docs=2000, shards=4), tmp_path_factory.mktemp("bench"),
                         log=lambda _msg: None)


def _take(corpus, workload: str, fmt: str, batches: int) -> tuple[int, int]:
    records, tokens, _ = first_batches(build(corpus, workload, fmt, 0, PARAMS), batches)
    return records, tokens


@pytest.mark.parametrize("workload,fmt,batches", [
    ("W1", "jsonl", 200), ("W1", "parquet", 200),
    ("W2", "jsonl", 20), ("W4", "tokenized", 200)])
def test_inline_pipeline(benchmark, corpus, workload, fmt, batches):
    records, tokens = benchmark.pedantic(_take, (corpus, workload, fmt, batches), rounds=3,
                                         iterations=1, warmup_rounds=1)
    benchmark.extra_info["records_per_s"] = per_s(benchmark, records)
    if tokens:
        benchmark.extra_info["tokens_per_s"] = per_s(benchmark, tokens)


@pytest.fixture(scope="module")
def packed_batch(corpus):
    """One W4 batch of 64 packed rows of 2049 tokens."""
    p = build(corpus, "W4", "tokenized", 0, PARAMS, microbatch=64)
    try:
        return next(iter(p))
    finally:
        p.close()


TRAINING_KW = {"return_labels": True, "return_cu_seqlens": True, "return_num_valid_tokens": True}


@pytest.mark.parametrize("impl", ["to_training", "numpy_core"])
def test_to_training(benchmark, packed_batch, impl):
    from zephon.ragged_columns import ragged_column
    from zephon.tokens.training import to_training_arrays

    block = packed_batch.block
    if impl == "to_training":
        out = benchmark(packed_batch.to_training, dtype="numpy", **TRAINING_KW)
    else:
        offsets, values = ragged_column(block.payload, "input_ids")
        rows = len(offsets) - 1
        tokens = values[offsets[0]:offsets[-1]].reshape(rows, -1)
        p_off, p_val = ragged_column(block.payload, "positions")
        positions = p_val[p_off[0]:p_off[-1]].reshape(rows, -1)
        pad = np.clip(block.meta.get("padding_length"), 0, None)
        out = benchmark(to_training_arrays, tokens, padding_length=pad, positions=positions,
                        **TRAINING_KW)
    assert out["input_ids"].shape == (64, 2048)
    benchmark.extra_info["tokens_per_s"] = per_s(benchmark, out["input_ids"].size)
