"""``python -m zephon bench``: the workloads side by side, medians, ratios, JSON and a chart.

Every system runs the same workload on the same generated corpus in one invocation, repeated;
the table reports medians and each system's ratio to Zephon and to the machine's limit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from zephon.bench import workloads
from zephon.bench.corpus import CorpusSpec, ensure_corpus
from zephon.bench.reference import run_reference
from zephon.bench.torch_baseline import run_torch

ALL_WORKLOADS = ("W1", "W2", "W3", "W4")
SYSTEMS = ("zephon", "reference-0.2.0", "torch-dataloader", "limit")


def _rate(result: dict, unit: str) -> float | None:
    if "error" in result or not result.get("seconds"):
        return None
    return result[unit] / result["seconds"]


def run_one(workload: str, system: str, corpus, args, tokenized_dir) -> dict:
    fmt = "parquet" if workload in ("W4",) else args.format
    limit = args.records if workload == "W1" else args.token_records
    try:
        if system == "zephon":
            return workloads.run_ours(corpus, workload, fmt, args.workers_now, limit, tokenized_dir)
        if system == "reference-0.2.0":
            pairs = corpus.datasets(fmt) if workload != "W4" else [
                (n, str(tokenized_dir / n)) for n in ("code", "web")]
            return run_reference({"workload": workload, "datasets": pairs,
                                  "mixture": corpus.mixture, "limit_records": limit,
                                  "tokenizer": corpus.tokenizer_path})
        if system == "torch-dataloader":
            if workload in ("W3", "W4"):
                return {"error": "not applicable"}
            return run_torch(corpus, workload, fmt, max(args.workers_now, 0), limit)
        if system == "limit":
            if workload == "W1":
                return workloads.limit_raw_read(corpus, fmt, limit)
            if workload == "W2":
                return workloads.limit_tokenizer(corpus, limit)
            if workload == "W4":
                return workloads.limit_memcpy(50_000_000)
            return {"error": "not applicable"}
    except Exception as e:  # a broken system must not hide the others' figures
        return {"error": f"{type(e).__name__}: {e}"}
    raise ValueError(system)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m zephon bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small corpus, 3 repeats (< 5 min)")
    ap.add_argument("--workloads", default=",".join(ALL_WORKLOADS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--workers", default="0", help="worker counts to sweep, e.g. 0,1,2")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--docs", type=int, default=None, help="documents in the corpus")
    ap.add_argument("--format", default="jsonl", choices=("jsonl", "parquet"))
    ap.add_argument("--out", default="bench-results", help="folder for JSON and PNG")
    ap.add_argument("--corpus-dir", default=None)
    args = ap.parse_args(argv)
    docs = args.docs or (20_000 if args.quick else 100_000)
    repeats = args.repeats or (3 if args.quick else 5)
    args.records = docs
    args.token_records = docs // 2 if args.quick else docs
    spec = CorpusSpec(docs=docs, shards=max(4, docs // 5000))
    corpus = ensure_corpus(spec, Path(args.corpus_dir) if args.corpus_dir else None)
    tokenized_dir = None
    wl = [w.strip() for w in args.workloads.split(",") if w.strip()]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if "W4" in wl:
        tokenized_dir = workloads.pretokenize(corpus, corpus.root / "tokenized")
    results: list[dict] = []
    for workers in [int(w) for w in args.workers.split(",")]:
        args.workers_now = workers
        for w in wl:
            for system in systems:
                runs = []
                for _ in range(repeats):
                    runs.append(run_one(w, system, corpus, args, tokenized_dir))
                    if "error" in runs[-1]:
                        break
                results.append(_summarise(w, system, workers, runs))
                print(_line(results[-1]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"corpus": spec.__dict__, "repeats": repeats, "results": results,
               "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (out / "bench.json").write_text(json.dumps(payload, indent=1))
    table = format_table(results)
    (out / "bench.md").write_text(table + "\n")
    print("\n" + table)
    try:
        draw_chart(results, out / "bench.png")
    except ImportError:
        print("matplotlib not installed: no chart", file=sys.stderr)
    return 0


def _summarise(workload: str, system: str, workers: int, runs: list[dict]) -> dict:
    unit = "records" if workload == "W1" else "tokens"
    rates = [r for r in (_rate(x, unit) for x in runs) if r is not None]
    entry = {"workload": workload, "system": system, "workers": workers, "unit": f"{unit}/s",
             "median": statistics.median(rates) if rates else None, "runs": runs}
    if workload == "W3":
        ok = [x for x in runs if "restore_first_batch_s" in x]
        if ok:
            entry["checkpoint_bytes"] = statistics.median(x["checkpoint_bytes"] for x in ok)
            entry["restore_first_batch_s"] = statistics.median(x["restore_first_batch_s"] for x in ok)
            entry["cold_first_batch_s"] = statistics.median(x["first_batch_s"] for x in ok)
    errors = [x["error"] for x in runs if "error" in x]
    if errors:
        entry["error"] = errors[0]
    return entry


def _line(e: dict) -> str:
    med = "-" if e["median"] is None else f"{e['median']:,.0f} {e['unit']}"
    extra = f"  ({e['error']})" if e.get("error") else ""
    return f"{e['workload']} workers={e['workers']} {e['system']:<18} {med}{extra}"


def format_table(results: list[dict]) -> str:
    rows = ["| workload | workers | system | median | vs zephon | vs limit | note |",
            "|---|---|---|---|---|---|---|"]
    for e in results:
        ours = next((x["median"] for x in results if x["workload"] == e["workload"]
                     and x["workers"] == e["workers"] and x["system"] == "zephon"), None)
        lim = next((x["median"] for x in results if x["workload"] == e["workload"]
                    and x["workers"] == e["workers"] and x["system"] == "limit"), None)
        m = e["median"]
        vs_ours = f"{m / ours:.2f}x" if m and ours else "-"
        vs_lim = f"{m / lim:.0%}" if m and lim else "-"
        note = e.get("error", "")
        if e["workload"] == "W3" and "restore_first_batch_s" in e:
            note = (f"ckpt {e['checkpoint_bytes']:.0f} B, restore->first batch "
                    f"{e['restore_first_batch_s']:.2f}s vs cold {e['cold_first_batch_s']:.2f}s")
        med = f"{m:,.0f} {e['unit']}" if m else "-"
        rows.append(f"| {e['workload']} | {e['workers']} | {e['system']} | {med} | {vs_ours} | "
                    f"{vs_lim} | {note} |")
    return "\n".join(rows)


def draw_chart(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(e["workload"], e["workers"]) for e in results})
    fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 3.6), squeeze=False)
    for ax, (w, k) in zip(axes[0], groups):
        entries = [e for e in results if e["workload"] == w and e["workers"] == k and e["median"]]
        ax.bar([e["system"] for e in entries], [e["median"] for e in entries],
               color=["#2a7" if e["system"] == "zephon" else "#889" for e in entries])
        ax.set_title(f"{w} (workers={k})")
        ax.set_ylabel(entries[0]["unit"] if entries else "")
        ax.tick_params(axis="x", rotation=30, labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
