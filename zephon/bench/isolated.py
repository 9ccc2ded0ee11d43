"""W2 runs in a fresh interpreter each, so that their memory is the system's own.

W2 reports the peak PSS of the process tree (``memory.py``). Run in the benchmark's own
process, that tree held whatever earlier runs had left in it: torch, imported by the
DataLoader's runs, counted in every later Zephon run (~230 MB of the 750 MB once reported),
and Zephon's fork server, which outlives its pipelines, in every later DataLoader run. A fresh
interpreter per run imports only what its system needs, and the tree is that system's alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import zephon
from zephon.bench.corpus import Corpus, CorpusSpec
from zephon.bench.params import BenchParams


def run(corpus: Corpus, system: str, fmt: str, workers: int, params: BenchParams,
        checkpoint: bool, timeout_s: float = 900.0) -> dict:
    """One W2 run of ``system`` ("zephon" or "torch-dataloader") in a child interpreter."""
    job = {"root": str(corpus.root), "spec": asdict(corpus.spec), "system": system,
           "fmt": fmt, "workers": workers, "params": asdict(params), "checkpoint": checkpoint}
    env = dict(os.environ)
    here = str(Path(zephon.__file__).resolve().parent.parent)  # this checkout, first
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-m", "zephon.bench.isolated"], input=json.dumps(job),
                         capture_output=True, text=True, timeout=timeout_s, env=env)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"isolated W2 run failed (exit {out.returncode}): {tail}"[:300]}
    return json.loads(lines[-1])


def _params(d: dict) -> BenchParams:
    d = dict(d)
    for key in ("first_workers_only", "formats"):
        d[key] = tuple(d[key])
    d["ckpt_points"] = tuple(tuple(p) for p in d["ckpt_points"])
    return BenchParams(**d)


def main() -> None:
    job = json.loads(sys.stdin.read())
    corpus = Corpus(Path(job["root"]), CorpusSpec(**job["spec"]))
    params = _params(job["params"])
    if job["system"] == "zephon":
        from zephon.bench.workloads import run_ours

        result = run_ours(corpus, "W2", job["fmt"], job["workers"], params,
                          checkpoint=job["checkpoint"])
    else:
        from zephon.bench.torch_baseline import run_torch

        result = run_torch(corpus, "W2", job["fmt"], job["workers"], params)
    result["torch_in_tree"] = "torch" in sys.modules  # the check that isolation holds
    print(json.dumps(result))


if __name__ == "__main__":
    main()
