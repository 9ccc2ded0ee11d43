"""W5 (SFT: tokenize_chat -> pack_flat 2049 -> batch 8) side by side with its limit, the
tokenizer's fastest batch call alone over the conversations already rendered
(``zephon.bench.chat.tokenizer_alone``), for a machine too noisy for absolute figures.

Every run is a fresh process; the systems take turns run by run (limit, then each checkout), so
load from other jobs falls on all of them alike, and what counts is the median of the paired
ratios ours/limit. ``--checkout name=path`` adds another copy of Zephon (e.g. the commit before
a change, ``git archive`` + its built kernels), run the same way from its own directory.

    python benchmarks/bench_w5.py --workers 2 --repeats 9 --seconds 4
    python benchmarks/bench_w5.py --workers 0,2 --checkout base=/tmp/zephon-base
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
# one run in a fresh interpreter of the checkout it is started in; the result on one line
_RUN = """
import json, sys
from zephon.bench.runner import _same_allocator_for_all
_same_allocator_for_all()
from zephon.bench import chat, workloads
from zephon.bench.corpus import CorpusSpec, ensure_corpus
from zephon.bench.meter import rate
from zephon.bench.params import QUICK, with_overrides
a = json.loads(sys.argv[1])
p = with_overrides(QUICK, w2_seconds=a["seconds"])
corpus = ensure_corpus(CorpusSpec(docs=p.docs, shards=p.shards), log=lambda m: None)
if a["system"] == "limit":
    r = chat.tokenizer_alone(corpus, p)
else:
    r = workloads.run_ours(corpus, "W5", "jsonl", a["workers"], p)
print("RESULT " + json.dumps({"rate": rate(r, "tokens"), **r}))
"""


def run_one(checkout: Path, system: str, workers: int, seconds: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONWARNINGS": "ignore"}
    arg = json.dumps({"system": system, "workers": workers, "seconds": seconds})
    out = subprocess.run([sys.executable, "-c", _RUN, arg], cwd=checkout, env=env,
                         capture_output=True, text=True, timeout=600)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return {"error": (out.stderr.strip().splitlines() or ["no result"])[-1]}
    return json.loads(line[len("RESULT "):])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="2", help="worker counts, comma-separated")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--seconds", type=float, default=4.0,
                    help="steady state per run (the limit runs twice as long, two calls)")
    ap.add_argument("--checkout", action="append", default=[],
                    help="name=path of another Zephon checkout to run beside this one")
    args = ap.parse_args(argv)
    checkouts = {"zephon": HERE}
    for item in args.checkout:
        name, _, path = item.partition("=")
        checkouts[name] = Path(path).resolve()
    report = {}
    for workers in (int(w) for w in args.workers.split(",")):
        rates: dict[str, list[float | None]] = {"limit": [], **{n: [] for n in checkouts}}
        for r in range(args.repeats):
            got = {"limit": run_one(HERE, "limit", workers, args.seconds)}
            for name, path in checkouts.items():
                got[name] = run_one(path, "zephon", workers, args.seconds)
            for name, res in got.items():
                rates[name].append(res.get("rate"))
            print(f"workers={workers} run {r + 1}: " + ", ".join(
                f"{n} {g['rate'] / 1e3:,.0f}k" if g.get("rate") else f"{n} {g.get('error')}"
                for n, g in got.items()), flush=True)
        limit = rates["limit"]
        for name in checkouts:
            pairs = [a / b for a, b in zip(rates[name], limit) if a and b]
            ok = [x for x in rates[name] if x]
            report[f"{name} workers={workers}"] = {
                "median_tokens_per_s": statistics.median(ok) if ok else None,
                "limit_median_tokens_per_s": statistics.median([x for x in limit if x]),
                "median_paired_ratio": statistics.median(pairs) if pairs else None,
                "paired_ratios": [round(x, 3) for x in pairs]}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
