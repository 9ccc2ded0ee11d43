"""The Ray runner against the process runner, on this machine: W2 (tokenize -> shuffle ->
pack_flat(2049, best_fit) -> batch(8)) over JSONL.

    python benchmarks/bench_ray.py [--docs 20000] [--batches 250] [--rounds 3] [--json out.json]

- overhead: tokens/s with the stateless stage (fetch, tokenize) in 2 Ray actors against 2
  worker processes, as a ratio. Both runners do the same work per block; what differs is the
  transport (the object store and Ray's task calls against shared-memory slots and pipes) and
  where the serial stage runs (the training process against the coordinator process);
- scaling: tokens/s with 1 and 2 actors.

The Ray cluster is started once by this script on this machine (2 CPUs, a 200 MB object
store, no dashboard) and shut down at the end; each run starts its own actors, which is timed
apart (first batch) from the steady state (tokens/s from the first batch on). Runs alternate
(process, ray x2, ray x1, ...) so that drift in the machine's load weighs on each alike; the
figures are medians over the rounds. On 2 shared cores the actors, the driver's serial stage
and Ray's own daemons compete for the same CPUs: these figures say what the transport costs,
not what a cluster gains (that is more CPUs than the training node has).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time

from zephon.bench.corpus import CorpusSpec, ensure_corpus
from zephon.bench.params import QUICK, with_overrides
from zephon.bench.workloads import batch_counts, build, clear_caches

MB = 1 << 20


def run(corpus, params, runner: str, workers: int, batches: int) -> dict:
    """One W2 run: seconds to the first batch and tokens/s after it."""
    clear_caches()
    p = build(corpus, "W2", "jsonl", workers, params)
    if runner == "ray":
        p.options(runner="ray", ray_workers=workers)
    else:
        p.options(runner="process")
    t0 = time.perf_counter()
    it = iter(p)
    try:
        next(it)
        first = time.perf_counter() - t0
        t1, tokens, n = time.perf_counter(), 0, 0
        for b in it:
            tokens += batch_counts(b)[1]
            n += 1
            if n == batches:
                break
        wall = time.perf_counter() - t1
        snap = p.metrics_snapshot()
    finally:
        p.close()
    out = {"runner": runner, "workers": workers, "first_batch_s": first,
           "tokens_per_s": tokens / wall, "batches": n}
    if runner == "ray":
        # wall time in the operators against CPU time: below 1, the actor waited for a core
        out["actor_busy_s"] = [round(a["busy_s"], 2) for a in snap["ray"]["actors"]]
        out["actor_cpu_share"] = [round(a["cpu_s"] / a["busy_s"], 2) if a["busy_s"] else None
                                  for a in snap["ray"]["actors"]]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--batches", type=int, default=250, help="measured batches per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the runs and the summary here")
    args = ap.parse_args(argv)

    import ray

    corpus = ensure_corpus(CorpusSpec(docs=args.docs, shards=8))
    params = with_overrides(QUICK, shuffle_buffer=1024)
    ray.init(num_cpus=2, object_store_memory=200 * MB, include_dashboard=False,
             logging_level=logging.WARNING)
    plan = [("process", 2), ("ray", 2), ("ray", 1)]
    runs: list[dict] = []
    try:
        for r in range(args.rounds):
            for runner, workers in plan:
                out = run(corpus, params, runner, workers, args.batches)
                runs.append(out)
                print(f"round {r + 1}: {runner:7s} x{workers}  first batch "
                      f"{out['first_batch_s']:5.2f} s  {out['tokens_per_s'] / 1e6:6.3f} M tok/s"
                      + (f"  actor busy {out['actor_busy_s']} s, on a core "
                         f"{out['actor_cpu_share']} of it" if runner == "ray" else ""),
                      flush=True)
    finally:
        ray.shutdown()

    def med(runner: str, workers: int, key: str = "tokens_per_s") -> float:
        return statistics.median(x[key] for x in runs
                                 if x["runner"] == runner and x["workers"] == workers)

    summary = {"process_x2_tok_s": med("process", 2), "ray_x2_tok_s": med("ray", 2),
               "ray_x1_tok_s": med("ray", 1),
               "ray_x2_over_process_x2": med("ray", 2) / med("process", 2),
               "ray_x2_over_ray_x1": med("ray", 2) / med("ray", 1),
               "first_batch_s": {f"{r}_x{w}": med(r, w, "first_batch_s") for r, w in plan}}
    print(f"\nmedians over {args.rounds} rounds (W2, {args.docs} docs, {args.batches} batches "
          f"of 8 x 2049 after the first):")
    print(f"  process x2 {summary['process_x2_tok_s'] / 1e6:.3f} M tok/s, "
          f"ray x2 {summary['ray_x2_tok_s'] / 1e6:.3f}, ray x1 {summary['ray_x1_tok_s'] / 1e6:.3f}")
    print(f"  ray x2 / process x2 = {summary['ray_x2_over_process_x2']:.2f}  "
          f"(the object store and Ray's calls against shared-memory slots)")
    print(f"  ray x2 / ray x1 = {summary['ray_x2_over_ray_x1']:.2f}  (2 cores, shared)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
