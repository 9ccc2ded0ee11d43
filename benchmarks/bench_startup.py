"""Start-up, defaults and memory (issue #19), side by side, each run in a fresh process.

    python benchmarks/bench_startup.py [--repeats 3] [--compare OLD_TREE]
        [--only w1,access,w2,start,ttfb] [--format jsonl]

On the bench's Parquet/JSONL corpus (``python -m zephon bench``'s, 100k documents of ~2 KB):

- w1: the seed's own loop, ``for r in batch.records: r.payload["text"]`` over fetch +
  ``batch(32)`` of the Parquet mixture, records/s in 4 s after the first batch, with the
  default options, inline and with 2 worker processes; and the same loop reading
  ``batch.column("text").to_pylist()`` with the default options. Target: the default at least
  as fast as the best of inline and 2 workers;
- access: the cost of reading every text of the same delivered batches, through
  ``batch.records`` or through ``batch.column("text")``, in microseconds per record. Target:
  columns at least 3x the records path;
- w2: W2 (tokenize -> shuffle(8192) -> pack_flat(2049) -> batch(8), JSONL) with 2 workers:
  tokens/s and the peak PSS of the process tree (shared pages counted once), against the
  torch DataLoader doing the same work with 2 workers (``zephon/bench/torch_baseline.py``).
  Targets: PSS <= 400 MB and below the DataLoader's; tokens/s >= 95% of ``--compare``'s;
- start: time to the first batch of W2 (2 workers) and of ``python -m zephon demo``'s
  pipeline (defaults), with ``metrics_snapshot()["startup"]``'s breakdown;
- ttfb: the pretraining guide's pipeline with ``TokenEstimation()``, 2 workers: seconds from
  building it to its first batch with an empty node cache (cold), again (warm), and restored
  from a checkpoint of the warm run. Targets: cold <= 3 s, warm <= 1 s, restore <= warm;
- mixture (with ttfb in ``--only``): the realised token shares over the first 2,000 batches
  of that pipeline, its estimate from the node cache the cold run filled, with and without
  ``ensure_mixture``; ``max_off`` is the largest |share - weight|. Target: within 1%.

``--compare OLD_TREE`` runs the w1 default, w2 and start cells with that source tree too, turn
about with this one. Runs start from a temporary directory so that the worker processes import
the tree they are meant to (see bench_engine.py's note). Every comparison alternates the
systems run by run; the tables show medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _corpus():
    from zephon.bench.corpus import CorpusSpec, ensure_corpus

    return ensure_corpus(CorpusSpec(), log=lambda m: print(m, file=sys.stderr))


def _w1_pipeline(corpus, workers):
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    ds = [Dataset.from_path(n, p) for n, p in corpus.datasets("parquet")]
    ws = StaticMixtureWorkSource(datasets=ds, mixture=MixtureSpec(corpus.mixture), seed=42,
                                 exhausted_policy="repeat")
    p = Pipeline(ws)
    if workers != "default":
        p.options(num_workers=int(workers))
    return p.batch(microbatch_size=32)


def child_w1(mode: str, workers: str, seconds: float) -> dict:
    p = _w1_pipeline(_corpus(), workers)
    n, t1, first, t0 = 0, None, None, time.perf_counter()
    for b in p:
        if t1 is None:
            first, t1 = time.perf_counter() - t0, time.perf_counter()
        if mode == "records":
            for r in b.records:
                r.payload["text"]
        else:
            for _t in b.column("text").to_pylist():
                pass
        n += len(b)
        if time.perf_counter() - t1 >= seconds:
            break
    rate = n / (time.perf_counter() - t1)
    snap = p.metrics_snapshot() or {}
    p.close()
    return {"rate": rate, "first_batch_s": first, "engine": snap.get("engine"),
            "workers": snap.get("workers"), "autotune": snap.get("autotune")}


def child_access() -> dict:
    from zephon.types import SampleBatch

    p = _w1_pipeline(_corpus(), "0")
    blocks = [b.block for _, b in zip(range(2000), p)]
    p.close()
    n = sum(len(b) for b in blocks)
    out: dict[str, float] = {}
    for _ in range(3):
        for name in ("records", "column"):
            t = time.perf_counter()
            for blk in blocks:
                batch = SampleBatch._from_block(blk)  # fresh: records are built per batch
                if name == "records":
                    for r in batch.records:
                        r.payload["text"]
                else:
                    for _t in batch.column("text").to_pylist():
                        pass
            us = (time.perf_counter() - t) / n * 1e6
            out[name] = min(out.get(name, float("inf")), us)
    return out


def _tree_pss() -> int:
    import psutil

    me = psutil.Process()
    total = 0
    for q in [me, *me.children(recursive=True)]:
        try:
            total += q.memory_full_info().pss
        except psutil.Error:
            pass
    return total


def child_w2(system: str, seconds: float) -> dict:
    from zephon.bench import workloads
    from zephon.bench.meter import Meter, rate
    from zephon.bench.params import FULL, with_overrides

    params = with_overrides(FULL, w2_seconds=seconds)
    corpus = _corpus()
    if system == "torch":
        from zephon.bench.torch_baseline import run_torch

        r = run_torch(corpus, "W2", "jsonl", 2, params)
        return {"rate": rate(r, "tokens"), "pss_mb": r["pss_peak_bytes"] / 2**20,
                "first_batch_s": r.get("first_batch_s")}
    # our own loop (not run_ours), so that an older tree is measured the same way
    workloads.clear_caches()
    meter, peak, last = Meter("tokens", seconds), 0, 0.0
    p = workloads.build(corpus, "W2", "jsonl", 2, params)
    for b in p:
        if time.monotonic() - last >= 2.0:
            last, peak = time.monotonic(), max(peak, _tree_pss())
        if meter.add(*workloads.batch_counts(b)):
            break
    peak = max(peak, _tree_pss())
    r = meter.result()
    p.close()
    return {"rate": rate(r, "tokens"), "pss_mb": peak / 2**20,
            "first_batch_s": r.get("first_batch_s")}


def child_start(which: str) -> dict:
    t0 = time.perf_counter()
    if which == "demo":
        from zephon import demo

        p = demo.build(Path(tempfile.mkdtemp(prefix="zs-demo-")), 20_000, None, 2049)
    else:
        from zephon.bench import workloads
        from zephon.bench.params import FULL

        p = workloads.build(_corpus(), "W2", "jsonl", 2, FULL)
    t0 = time.perf_counter()
    next(iter(p))
    first = time.perf_counter() - t0
    snap = p.metrics_snapshot() or {}
    p.close()
    return {"first_batch_s": first, "startup": snap.get("startup")}


def _readme_pipeline(corpus, fmt: str, ensure: bool = True):
    """The pretraining guide's pipeline, token-aware (``TokenEstimation()``), on the corpus
    (``ensure=False``: without ``ensure_mixture``, the estimate alone keeps the mixture)."""
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import StaticMixtureWorkSource, TokenEstimation

    ws = StaticMixtureWorkSource(
        datasets=[Dataset.from_path(n, p) for n, p in corpus.datasets(fmt)],
        mixture=dict(corpus.mixture), seed=42, token_estimation=TokenEstimation())
    p = (Pipeline(ws)
         .tokenize(tokenizer=corpus.tokenizer_path, field="text")
         .shuffle(buffer_size=8192, seed=1))
    if ensure:
        p = p.ensure_mixture()
    return (p.pack_flat(max_length=2049, algorithm="best_fit", num_bins=64, pad_token_id=0)
            .batch(microbatch_size=8)
            .options(num_workers=2))


def child_ttfb(mode: str, cache_dir: str, fmt: str) -> dict:
    """Seconds from building the guide's pipeline (datasets discovered, priming included) to
    its first batch, with the node cache in ``cache_dir``: "cold" (empty), "warm" (filled by
    the cold run; it also saves a checkpoint after 20 batches) or "restore" (that checkpoint)."""
    os.environ["ZEPHON_CACHE_DIR"] = cache_dir
    corpus = _corpus()
    t0 = time.perf_counter()
    p = _readme_pipeline(corpus, fmt)
    ckpt = Path(cache_dir) / f"ttfb-{fmt}.json"
    if mode == "restore":
        p = p.restore(json.loads(ckpt.read_text()))
    it = iter(p)
    next(it)
    first = time.perf_counter() - t0
    snap = p.metrics_snapshot() or {}
    if mode == "warm":
        for _ in range(19):
            next(it)
        ckpt.write_text(json.dumps(p.checkpoint()))
    p.close()
    priming = snap.get("priming") or {}
    return {"first_batch_s": first, "priming_s": priming.get("seconds"),
            "priming": {k: v.get("source") for k, v in (priming.get("datasets") or {}).items()},
            "startup": snap.get("startup")}


def child_mixture(cache_dir: str, fmt: str, ensure: str, batches: int) -> dict:
    """The realised token mixture over the first ``batches`` batches of the guide's pipeline,
    its estimate from the node cache in ``cache_dir`` (the ttfb cell's cold run filled it)."""
    os.environ["ZEPHON_CACHE_DIR"] = cache_dir
    corpus = _corpus()
    p = _readme_pipeline(corpus, fmt, ensure=ensure == "ensure")
    for _, _b in zip(range(int(batches)), p):
        pass
    snap = p.metrics_snapshot() or {}
    p.close()
    ds = snap.get("datasets", {})
    off = max(abs(v["token_share"] - v["target"]) for v in ds.values())
    return {"max_off": off, "shares": {k: round(v["token_share"], 4) for k, v in ds.items()},
            "target": {k: v["target"] for k, v in ds.items()},
            "priming": {k: v.get("source") for k, v
                        in ((snap.get("priming") or {}).get("datasets") or {}).items()}}


CHILDREN = {"w1": child_w1, "access": child_access, "w2": child_w2, "start": child_start,
            "ttfb": child_ttfb, "mixture": child_mixture}


def run_child(tree: Path, kind: str, *args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, *map(str, args)]
    out = subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), capture_output=True,
                         text=True, timeout=600)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _med(runs: list[dict], key: str) -> float | None:
    xs = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(xs) if xs else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", nargs="+")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--w2-seconds", type=float, default=10.0)
    ap.add_argument("--compare", default=None, help="an older source tree to run beside")
    ap.add_argument("--only", default="w1,access,w2,start,ttfb")
    ap.add_argument("--format", default="jsonl", help="ttfb's shard format (jsonl, parquet)")
    ap.add_argument("--mixture-batches", type=int, default=2000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        conv = [float(x) if x.replace(".", "", 1).isdigit() and "." in x else x for x in rest]
        print(json.dumps(CHILDREN[kind](*conv)))
        return 0
    _corpus()  # generated once, before anything is timed
    only = args.only.split(",")
    trees = {"new": HERE}
    if args.compare:
        trees["old"] = Path(args.compare).resolve()
    cells: dict[str, list[dict]] = {}

    def turn(label: str, tree: Path, *child) -> None:
        r = run_child(tree, *child)
        cells.setdefault(label, []).append(r)
        print(f"  {label}: {json.dumps(r)[:300]}", flush=True)

    for i in range(args.repeats):
        print(f"repeat {i + 1}/{args.repeats}", flush=True)
        if "w1" in only:
            for label, mode, w in (("w1 records default", "records", "default"),
                                   ("w1 records inline", "records", "0"),
                                   ("w1 records 2 workers", "records", "2"),
                                   ("w1 column default", "column", "default")):
                turn(label, HERE, "w1", mode, w, float(args.seconds))
            if "old" in trees:
                turn("w1 records default (old)", trees["old"], "w1", "records", "default",
                     float(args.seconds))
        if "access" in only:
            turn("access", HERE, "access")
        if "w2" in only:
            for name, tree in trees.items():
                turn(f"w2 zephon ({name})", tree, "w2", "zephon", float(args.w2_seconds))
            turn("w2 torch DataLoader", HERE, "w2", "torch", float(args.w2_seconds))
        if "ttfb" in only:
            for name, tree in trees.items():
                cache = tempfile.mkdtemp(prefix="zs-ttfb-")  # an empty node cache
                for mode in ("cold", "warm", "restore"):
                    turn(f"ttfb {mode} ({name})", tree, "ttfb", mode, cache, args.format)
                if "mixture" in only:  # the estimate the cold run cached
                    for ensure in ("ensure", "estimate-only"):
                        turn(f"mixture {ensure} ({name})", tree, "mixture", cache,
                             args.format, ensure, args.mixture_batches)
        if "start" in only:
            for name, tree in trees.items():
                turn(f"start W2 2 workers ({name})", tree, "start", "w2")
                turn(f"start demo ({name})", tree, "start", "demo")
    print("\n| cell | median | runs |\n|---|---|---|")
    for label, runs in cells.items():
        keys = [k for k in ("rate", "pss_mb", "first_batch_s", "priming_s", "max_off", "records",
                            "column")
                if _med(runs, k) is not None]
        med = ", ".join(f"{k} {_med(runs, k):,.2f}" for k in keys)
        print(f"| {label} | {med} | {len(runs)} |")
    if args.json:
        Path(args.json).write_text(json.dumps(cells, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
