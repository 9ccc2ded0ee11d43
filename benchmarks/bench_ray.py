"""The Ray runner against the process runner, on this machine: W2 (tokenize -> shuffle ->
pack_flat(2049, best_fit) -> batch(8)) over JSONL, and W1 (fetch + batch(32)) where the
transport is most of the work.

    python benchmarks/bench_ray.py [--docs 20000] [--batches 200] [--rounds 3] [--json out.json]

- overhead: throughput with the stateless stage (fetch, tokenize) in 2 Ray actors against 2
  worker processes, as a ratio. Both runners do the same work per block; what differs is the
  transport (the object store and Ray's task calls against shared-memory slots and pipes) and
  where the serial stage runs (the training process against the coordinator process), which
  shows as the training process's CPU per batch;
- scaling: W2 tokens/s with 1 and 2 actors.

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
from zephon.bench.pipelines import build, clear_caches
from zephon.bench.workloads import batch_counts

MB = 1 << 20


def run(corpus, params, workload: str, runner: str, workers: int, batches: int) -> dict:
    """One run: seconds to the first batch, then tokens/s (W2) or records/s (W1) and the
    training process's CPU per batch after it."""
    clear_caches()
    p = build(corpus, workload, "jsonl", workers, params)
    if runner == "ray":
        p.options(runner="ray", ray_workers=workers)
    else:
        p.options(runner="process")
    t0 = time.perf_counter()
    it = iter(p)
    try:
        next(it)
        first = time.perf_counter() - t0
        t1, c1, amount, n = time.perf_counter(), time.process_time(), 0, 0
        for b in it:
            amount += batch_counts(b)[1] if workload == "W2" else len(b)
            n += 1
            if n == batches:
                break
        wall, cpu = time.perf_counter() - t1, time.process_time() - c1
        snap = p.metrics_snapshot()
    finally:
        p.close()
    out = {"workload": workload, "runner": runner, "workers": workers, "first_batch_s": first,
           "per_s": amount / wall, "batches": n, "driver_cpu_ms_per_batch": 1e3 * cpu / n}
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
    plan = [("W2", "process", 2), ("W2", "ray", 2), ("W2", "ray", 1), ("W1", "process", 2),
            ("W1", "ray", 2)]
    runs: list[dict] = []
    try:
        for r in range(args.rounds):
            for workload, runner, workers in plan:
                n = args.batches if workload == "W2" else 8 * args.batches
                out = run(corpus, params, workload, runner, workers, n)
                runs.append(out)
                unit = "M tok/s" if workload == "W2" else "M rec/s"
                print(f"round {r + 1}: {workload} {runner:7s} x{workers}  first batch "
                      f"{out['first_batch_s']:5.2f} s  {out['per_s'] / 1e6:6.3f} {unit}  "
                      f"training process {out['driver_cpu_ms_per_batch']:.2f} ms CPU/batch"
                      + (f"  actor busy {out['actor_busy_s']} s, on a core "
                         f"{out['actor_cpu_share']} of it" if runner == "ray" else ""),
                      flush=True)
    finally:
        ray.shutdown()

    def med(workload: str, runner: str, workers: int, key: str = "per_s") -> float:
        return statistics.median(x[key] for x in runs if x["workload"] == workload
                                 and x["runner"] == runner and x["workers"] == workers)

    def span(workload: str, runner: str, workers: int) -> str:
        v = [x["per_s"] / 1e6 for x in runs if x["workload"] == workload
             and x["runner"] == runner and x["workers"] == workers]
        return f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"

    summary = {f"{w}_{r}_x{n}": {k: med(w, r, n, k) for k in
                                 ("per_s", "first_batch_s", "driver_cpu_ms_per_batch")}
               for w, r, n in plan}
    summary["W2_ray_x2_over_process_x2"] = med("W2", "ray", 2) / med("W2", "process", 2)
    summary["W1_ray_x2_over_process_x2"] = med("W1", "ray", 2) / med("W1", "process", 2)
    summary["W2_ray_x2_over_ray_x1"] = med("W2", "ray", 2) / med("W2", "ray", 1)
    print(f"\nmedians (min-max) over {args.rounds} rounds, {args.docs} docs:")
    print(f"  W2 M tok/s: process x2 {span('W2', 'process', 2)}, ray x2 {span('W2', 'ray', 2)}, "
          f"ray x1 {span('W2', 'ray', 1)}")
    print(f"  W1 M rec/s: process x2 {span('W1', 'process', 2)}, ray x2 {span('W1', 'ray', 2)}")
    print(f"  ray x2 / process x2: W2 {summary['W2_ray_x2_over_process_x2']:.2f}, "
          f"W1 {summary['W1_ray_x2_over_process_x2']:.2f}  (the object store and Ray's calls "
          f"against shared-memory slots; the serial stage in the training process)")
    print(f"  W2 ray x2 / ray x1 = {summary['W2_ray_x2_over_ray_x1']:.2f}  (2 shared cores)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
