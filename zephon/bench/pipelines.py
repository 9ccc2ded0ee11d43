"""The benchmark workloads' pipelines as Zephon builds them, and the cache they start from.

W1 fetch + batch(32); W2 tokenize -> shuffle -> pack_flat(2049, best_fit) -> batch(8);
W3 checkpoint and restore of the W2 pipeline; W4 pack_flat + batch(8) over pre-tokenized
Parquet; W5 (``chat.py``) tokenize_chat -> pack_flat(2049) -> batch(8) over conversations.
Datasets repeat, so a run can ask for more than one pass. The measured runs are in
``workloads.py`` (W1, W2, W4) and ``checkpoints.py`` (W3); both build here.
"""

from __future__ import annotations

from typing import Any

from zephon.bench.corpus import Corpus
from zephon.bench.params import BenchParams

MAX_LENGTH = 2049
# Zephon keeps decoded Parquet row groups in a per-process LRU (256 MiB by default), which would
# hold the whole benchmark corpus after one pass and turn later passes into memory reads. Runs
# cap it well below the corpus, as training on a corpus larger than memory would see, and start
# with it empty.
RG_CACHE_BYTES = 16 << 20


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
    from zephon.io.formats.row_group_cache import row_group_cache

    cache = row_group_cache(RG_CACHE_BYTES)
    cache.clear()
    cache.limit_bytes = RG_CACHE_BYTES
