"""The feed workload: does a training loop ever wait for data?

A training step holds its core: it launches kernels, then synchronizes. The consumer here does
what such a step does to the machine: after each batch it keeps its core busy for ``T`` ms
(spinning in Python, so it holds the GIL as a kernel-launching loop does), then asks for the
next batch, and it times every ask. W2's pipeline feeds it (tokenize -> shuffle(buffer) ->
pack_flat(2049, best_fit) -> batch(rows)) from raw JSONL, once with default options
(``num_workers="auto"``) and once per fixed worker count, each in a fresh interpreter as a
user's script would run.

Per (setting, T): ``wait_frac``, the time spent waiting for batches as a share of the loop's
time after its third step (the GPU-idle share a real node would see); ``max_wait_s``, the
longest single wait after the first batch (a stall: a switch of engines, a refill); the first
batch's time; and, for the default, what it chose (``metrics_snapshot()["autotune"]``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import zephon
from zephon.bench.corpus import Corpus
from zephon.bench.params import BenchParams

SKIP_STEPS = 3  # the steps before the data wait is judged (the first batches fill buffers)
MIN_STEPS = 20


def hold_core(seconds: float) -> None:
    """Keep this core (and the GIL) busy for ``seconds``, as a training step's kernel launches
    and synchronization do."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def steps_for(step_ms: float, seconds: float) -> int:
    return max(MIN_STEPS, int(seconds * 1000 / step_ms))


def run_feed(corpus: Corpus, setting: str | int, step_ms: float, params: BenchParams,
             rows: int) -> dict[str, Any]:
    """One feed run in this process: ``setting`` "auto" (default options) or a worker count."""
    from zephon.bench.pipelines import build
    from zephon.bench.workloads import batch_counts

    steps = steps_for(step_ms, params.seconds_for("W2"))
    # "auto" is the default's value: the same as leaving num_workers out
    p = build(corpus, "W2", params.w2_format, setting if setting == "auto" else int(setting),
              params, microbatch=rows)
    waits: list[float] = []
    tokens = 0
    t_start = time.perf_counter()
    it = iter(p)
    try:
        for _ in range(steps + SKIP_STEPS):
            t0 = time.perf_counter()
            batch = next(it)
            waits.append(time.perf_counter() - t0)
            tokens += batch_counts(batch)[1]
            hold_core(step_ms / 1e3)
        snap = p.metrics_snapshot()
    finally:
        p.close()
    total = time.perf_counter() - t_start
    judged = waits[SKIP_STEPS:]
    busy = len(judged) * step_ms / 1e3
    return {"setting": setting, "step_ms": step_ms, "rows": rows, "steps": len(judged),
            "first_batch_s": waits[0], "wait_frac": sum(judged) / (sum(judged) + busy),
            "max_wait_s": max(waits[1:]), "tokens_per_s": tokens / total,
            "engine": snap.get("engine"), "workers": snap.get("workers"),
            "autotune": snap.get("autotune")}


def run_isolated(corpus: Corpus, setting: str | int, step_ms: float, params: BenchParams,
                 rows: int, timeout_s: float = 600.0) -> dict[str, Any]:
    """``run_feed`` in a fresh interpreter (the default's choices start from a clean process)."""
    from dataclasses import asdict

    job = {"root": str(corpus.root), "spec": asdict(corpus.spec), "setting": setting,
           "step_ms": step_ms, "params": asdict(params), "rows": rows}
    env = dict(os.environ)
    env.pop("ZEPHON_NUM_WORKERS", None)  # the default means the default
    env.pop("ZEPHON_RUNNER", None)
    here = str(Path(zephon.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    try:
        out = subprocess.run([sys.executable, "-m", "zephon.bench.feed"], input=json.dumps(job),
                             capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"setting": setting, "step_ms": step_ms, "error": f"timed out after {timeout_s} s"}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"setting": setting, "step_ms": step_ms,
                "error": f"feed run failed (exit {out.returncode}): {tail}"[:300]}
    return json.loads(lines[-1])


def collect(corpus: Corpus, params: BenchParams, settings: list, steps_ms: list[float],
            rows: int, log=print) -> list[dict[str, Any]]:
    runs = []
    for step_ms in steps_ms:
        for setting in settings:
            r = run_isolated(corpus, setting, step_ms, params, rows)
            runs.append(r)
            log(line(r))
    return runs


def label(setting) -> str:
    if setting == "auto":
        return "default (auto)"
    return "inline" if int(setting) == 0 else f"{int(setting)} workers"


def line(r: dict) -> str:
    if "error" in r:
        return f"feed T={r['step_ms']:g}ms {label(r['setting'])}: {r['error']}"
    chose = f" -> {r['engine']} x{r['workers']}" if r["setting"] == "auto" else ""
    return (f"feed T={r['step_ms']:g}ms {label(r['setting'])}{chose}: wait {r['wait_frac']:.1%}"
            f", max wait {1e3 * r['max_wait_s']:.0f} ms, first batch {r['first_batch_s']:.2f} s")


def table(runs: list[dict]) -> str:
    """Rows: settings; columns: T; cells: data wait share / longest wait."""
    steps = sorted({r["step_ms"] for r in runs})
    settings = list(dict.fromkeys(r["setting"] for r in runs))
    out = ["| setting | " + " | ".join(f"T = {t:g} ms: wait / longest" for t in steps) + " |",
           "|---" * (len(steps) + 1) + "|"]
    for s in settings:
        cells = []
        for t in steps:
            r = next((x for x in runs if x["setting"] == s and x["step_ms"] == t), None)
            if r is None or "error" in r:
                cells.append("-" if r is None else "error")
            else:
                cells.append(f"{r['wait_frac']:.1%} / {1e3 * r['max_wait_s']:.0f} ms")
        out.append(f"| {label(s)} | " + " | ".join(cells) + " |")
    chose = [f"T = {r['step_ms']:g} ms: {r['engine']}"
             + (f" x{r['workers']}" if r.get("workers") else "") for r in runs
             if r["setting"] == "auto" and "error" not in r]
    if chose:
        out += ["", "The default ran: " + "; ".join(chose) + "."]
    return "\n".join(out)


def main() -> None:
    from zephon.bench.corpus import CorpusSpec
    from zephon.bench.isolated import _params

    job = json.loads(sys.stdin.read())
    corpus = Corpus(Path(job["root"]), CorpusSpec(**job["spec"]))
    result = run_feed(corpus, job["setting"], job["step_ms"], _params(job["params"]),
                      job["rows"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
