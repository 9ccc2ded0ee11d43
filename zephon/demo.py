"""``python -m zephon demo``: the seed pipeline on a generated two-dataset corpus.

Generates code (JSONL) and web (Parquet) datasets in a temporary folder, trains a small BPE
tokenizer, runs tokenize -> shuffle -> ensure_mixture -> pack_flat(best_fit) -> batch and
prints a few batches, the realised token mixture and the throughput.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from zephon import Pipeline, synthetic
from zephon.io import Dataset
from zephon.work import MixtureSpec, StaticMixtureWorkSource, TokenEstimation


def build(root: Path, docs: int, workers: int | None, max_length: int) -> Pipeline:
    code_dir = synthetic.write_dataset(root, "code", docs // 4, n_shards=4, fmt="jsonl", seed=1,
                                       mean_words=250)
    web_dir = synthetic.write_dataset(root, "web", docs - docs // 4, n_shards=8, fmt="parquet",
                                      seed=2, mean_words=150)
    tok_path = root / "tokenizer.json"
    try:
        synthetic.train_tokenizer(synthetic.documents(2000, seed=3), 4096, tok_path)
        tokenizer: str = str(tok_path)
    except ImportError:
        print("(the 'tokenizers' package is missing: using the built-in fallback tokenizer)")
        tokenizer = "__fallback__"
    code = Dataset.from_path("code", str(code_dir))
    web = Dataset.from_path("web", str(web_dir))
    ws = StaticMixtureWorkSource(datasets=[code, web],
                                 mixture=MixtureSpec({"code": 0.25, "web": 0.75}), seed=42,
                                 chunk_size=4096, token_estimation=TokenEstimation())
    p = (Pipeline(ws)
         .tokenize(tokenizer=tokenizer, field="text")
         .shuffle(buffer_size=2048, seed=1)
         .ensure_mixture()
         .pack_flat(max_length=max_length, algorithm="best_fit", num_bins=64, pad_token_id=0)
         .batch(microbatch_size=8))
    if workers is not None:
        p.options(num_workers=workers)
    return p


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m zephon demo", description=__doc__)
    ap.add_argument("--docs", type=int, default=20_000, help="documents to generate")
    ap.add_argument("--workers", type=int, default=None, help="worker processes (0 = inline)")
    ap.add_argument("--max-length", type=int, default=2049)
    ap.add_argument("--show", type=int, default=3, help="batches to print")
    ap.add_argument("--keep", default=None, help="write the corpus here instead of a temp dir")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="zephon-demo-") as tmp:
        root = Path(args.keep or tmp)
        t0 = time.perf_counter()
        p = build(root, args.docs, args.workers, args.max_length)
        print(f"corpus + tokenizer ready in {time.perf_counter() - t0:.1f}s under {root}")
        print(p.explain())
        pad = content = 0
        n_batches = 0
        t1 = time.perf_counter()
        first = None
        for batch in p:
            if first is None:
                first = time.perf_counter() - t1
            out = batch.to_training(return_labels=True, return_cu_seqlens=True, dtype="numpy")
            padl = batch.block.meta.get("padding_length")
            pad += int(padl.sum()) if padl is not None else 0
            content += int(batch.block.meta["comp_tokens"].sum())
            if n_batches < args.show:
                docs = batch.block.meta["comp_samples"].sum(axis=1).tolist()
                print(f"batch {n_batches}: input_ids {tuple(out['input_ids'].shape)} labels "
                      f"{tuple(out['labels'].shape)} lane {batch.lane_ids[0]} documents per row "
                      f"{docs} padding {batch.block.meta['padding_length'].tolist()}")
            n_batches += 1
        secs = time.perf_counter() - t1
        print(f"\n{n_batches} batches in {secs:.2f}s (first batch after {first or 0:.2f}s)")
        print(mixture_report(p.metrics_snapshot()))
        if content:
            print(f"throughput: {content / secs:,.0f} tokens/s, padding {pad / (pad + content):.2%}")
    return 0


def mixture_report(snap: dict) -> str:
    """Realised token share against the target, per dataset, and what was not delivered."""
    datasets = snap["datasets"]
    total = sum(d["target"] or 0.0 for d in datasets.values()) or 1.0
    lines = ["realised token mixture (target, delivered share, documents, tokens):"]
    for name, d in datasets.items():
        target = (d["target"] or 0.0) / total
        lines.append(f"  {name:<8} target {target:.3f}  realised {d['token_share']:.3f} "
                     f"({d['token_share'] - target:+.3f})  {d['records']:,} documents  "
                     f"{d['tokens']:,} tokens")
    losses = snap["losses"]
    lines.append(f"not delivered: {losses['records']:,} records, {losses['tokens']:,} tokens"
                 + ("" if not losses["records"] and not losses["tokens"]
                    else f" {losses['by_dataset']}"))
    return "\n".join(lines)
