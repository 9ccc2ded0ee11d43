"""The benchmark workloads, as run by Zephon, by a plain torch DataLoader and by the limits.

W1 fetch + batch(32); W2 tokenize -> shuffle -> pack_flat(2049, best_fit) -> batch(8);
W3 checkpoint and restore; W4 pack + batch over pre-tokenized Parquet. Each function returns
{"records", "tokens", "seconds", ...}; the runner turns them into rates.
"""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path

import numpy as np

from zephon.bench.corpus import Corpus


def _ours_pipeline(corpus: Corpus, workload: str, fmt: str, workers: int, tokenized_dir=None):
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    pairs = corpus.datasets(fmt) if tokenized_dir is None else [
        ("code", os.path.join(tokenized_dir, "code")), ("web", os.path.join(tokenized_dir, "web"))]
    datasets = [Dataset.from_path(name, path) for name, path in pairs]
    ws = StaticMixtureWorkSource(datasets=datasets, mixture=MixtureSpec(corpus.mixture), seed=42)
    p = Pipeline(ws).options(num_workers=workers)
    if workload == "W1":
        return p.batch(microbatch_size=32)
    if workload in ("W2", "W3"):
        return (p.tokenize(tokenizer=corpus.tokenizer_path, field="text")
                .shuffle(buffer_size=8192, seed=1)
                .pack_flat(max_length=2049, algorithm="best_fit", num_bins=64, pad_token_id=0)
                .batch(microbatch_size=8))
    if workload == "W4":
        return (p.pack_flat(max_length=2049, algorithm="best_fit", num_bins=64, pad_token_id=0,
                            tokens_field="input_ids").batch(microbatch_size=8))
    raise ValueError(workload)


def _batch_tokens(batch) -> int:
    block = batch.block
    if "input_ids" not in block.column_names():
        return 0
    from zephon.block import ragged_column

    offsets, _ = ragged_column(block.payload, "input_ids")
    pad = block.meta.get("padding_length")
    return int(offsets[-1] - (pad[pad > 0].sum() if pad is not None else 0))


def run_ours(corpus: Corpus, workload: str, fmt: str, workers: int, limit: int,
             tokenized_dir=None) -> dict:
    t0 = time.perf_counter()
    p = _ours_pipeline(corpus, workload, fmt, workers, tokenized_dir)
    records = tokens = batches = 0
    first = None
    it = iter(p)
    for b in it:
        if first is None:
            first = time.perf_counter() - t0
        records += len(b)
        tokens += _batch_tokens(b)
        batches += 1
        if records >= limit:
            break
    seconds = time.perf_counter() - t0
    out = {"records": records, "tokens": tokens, "batches": batches, "seconds": seconds,
           "first_batch_s": first}
    if workload == "W3":
        import json

        t1 = time.perf_counter()
        state = p.checkpoint()
        out["checkpoint_s"] = time.perf_counter() - t1
        out["checkpoint_bytes"] = len(json.dumps(state))
        p.close()
        p2 = _ours_pipeline(corpus, workload, fmt, workers, tokenized_dir)
        t2 = time.perf_counter()
        p2.restore(state)
        next(iter(p2))
        out["restore_first_batch_s"] = time.perf_counter() - t2
        p2.close()
    else:
        p.close()
    return out


# -- limits: what the machine can do with the same bytes -----------------------------------------

def limit_raw_read(corpus: Corpus, fmt: str, limit: int) -> dict:
    """pyarrow reading the same files, no loader around it."""
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    records = 0
    files = sorted(glob.glob(os.path.join(str(corpus.root), fmt, "*", f"*.{fmt}")))
    for f in files:
        table = pq.read_table(f) if fmt == "parquet" else pj.read_json(f)
        records += table.num_rows
        if records >= limit:
            break
    return {"records": records, "tokens": 0, "seconds": time.perf_counter() - t0}


def limit_tokenizer(corpus: Corpus, limit: int) -> dict:
    """The tokenizer alone encoding the same text on all cores (Rust threads)."""
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(corpus.tokenizer_path)
    texts: list[str] = []
    for f in sorted(glob.glob(os.path.join(str(corpus.root), "parquet", "*", "*.parquet"))):
        texts.extend(pq.read_table(f, columns=["text"]).column("text").to_pylist())
        if len(texts) >= limit:
            break
    texts = texts[:limit]
    t0 = time.perf_counter()
    tokens = 0
    for i in range(0, len(texts), 1024):
        tokens += sum(len(e.ids) for e in tok.encode_batch(texts[i:i + 1024], add_special_tokens=False))
    return {"records": len(texts), "tokens": tokens, "seconds": time.perf_counter() - t0}


def limit_memcpy(tokens: int) -> dict:
    src = np.ones(tokens, dtype=np.int32)
    dst = np.empty_like(src)
    t0 = time.perf_counter()
    np.copyto(dst, src)
    return {"records": 0, "tokens": tokens, "seconds": time.perf_counter() - t0}


def pretokenize(corpus: Corpus, out_dir: Path) -> Path:
    """W4's input: the corpus tokenized once into Parquet (input_ids list<int32>)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    ready = out_dir / "READY"
    if ready.exists():
        return out_dir
    tok = Tokenizer.from_file(corpus.tokenizer_path)
    for name in ("code", "web"):
        (out_dir / name).mkdir(parents=True, exist_ok=True)
        for f in sorted(glob.glob(os.path.join(corpus.dataset_dir(name, "parquet"), "*.parquet"))):
            texts = pq.read_table(f, columns=["text"]).column("text").to_pylist()
            ids = [[1, *e.ids, 2] for e in tok.encode_batch(texts, add_special_tokens=False)]
            table = pa.table({"input_ids": pa.array(ids, type=pa.list_(pa.int32()))})
            pq.write_table(table, out_dir / name / os.path.basename(f), row_group_size=1024)
    ready.write_text("ok")
    return out_dir
