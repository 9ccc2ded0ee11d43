"""Running every (workers, workload, format, system) cell of the benchmark and summarising it.

A cell runs ``repeats`` times and keeps every run's raw figures; its median is over the runs'
rates. A system that fails records its error in its cell and the others go on. The limits do not
depend on the worker count (they use all cores by themselves), so each runs once per workload
and format and is shown in every worker group.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from zephon.bench import checkpoints, limits, workloads
from zephon.bench.corpus import Corpus
from zephon.bench.meter import rate
from zephon.bench.params import BenchParams
from zephon.bench.reference import run_reference
from zephon.bench.torch_baseline import run_torch

WORKLOADS = ("W1", "W2", "W3", "W4")
SYSTEMS = ("zephon", "reference-0.2.0", "torch-dataloader", "limit")
REFERENCE = "reference-0.2.0"


def formats_of(workload: str, params: BenchParams) -> tuple[str, ...]:
    if workload == "W1":
        return params.formats
    return ("tokenized",) if workload == "W4" else (params.w2_format,)


def _error(e: BaseException) -> dict:
    return {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}


def _repeat(fn: Callable[[], dict], repeats: int) -> list[dict]:
    runs: list[dict] = []
    for _ in range(repeats):
        try:
            runs.append(fn())
        except Exception as e:  # a broken system must not hide the others' figures
            runs.append(_error(e))
            break  # the same error would repeat
    return runs


def _ref_cfg(corpus: Corpus, workload: str, fmt: str, workers: int, p: BenchParams) -> dict:
    return {"workload": workload, "datasets": corpus.datasets(fmt), "mixture": corpus.mixture,
            "tokenizer": corpus.tokenizer_path, "chunk_size": p.chunk_size, "workers": workers,
            "shuffle_buffer": p.shuffle_buffer, "seconds": p.seconds_for(workload),
            "repeats": p.repeats, "w3_batches": p.w3_batches, "checkpoint": False}


def _w3_from_w2(cells: list[dict], fmt: str, workers: int, system: str) -> list[dict] | None:
    """W3's runs when they were folded into the W2 runs of the same system and settings."""
    w2 = next((c for c in cells if (c["workload"], c["format"], c["workers"], c["system"])
               == ("W2", fmt, workers, system)), None)
    if w2 is None or not any("w3" in r for r in w2["runs"]):
        return None
    runs = [r["w3"] for r in w2["runs"] if "w3" in r]
    return [{**r, "seconds": r["restore_first_batch_s"]} if "error" not in r else r for r in runs]


def run_cell(corpus: Corpus, workload: str, fmt: str, workers: int, system: str,
             p: BenchParams, cells: list[dict], fold_w3: bool = False) -> list[dict]:
    """The raw runs of one cell. ``cells``: those summarised so far (W3 reuses W2's runs and
    W3's limit is Zephon's cold start); ``fold_w3``: W2 runs end with W3's checkpoint."""
    if workload == "W3" and system in ("zephon", REFERENCE):
        folded = _w3_from_w2(cells, fmt, workers, system)
        if folded is not None:
            return folded
    if system == "zephon":
        if workload == "W3":
            return _repeat(lambda: checkpoints.run_w3(corpus, fmt, workers, p), p.repeats)
        return _repeat(lambda: workloads.run_ours(corpus, workload, fmt, workers, p,
                                                  checkpoint=fold_w3 and workload == "W2"),
                       p.repeats)
    if system == REFERENCE:
        cfg = _ref_cfg(corpus, workload, fmt, workers, p)
        cfg["checkpoint"] = fold_w3 and workload == "W2"
        return run_reference(cfg, p.ref_timeout_s)
    if system == "torch-dataloader":
        if workload == "W3":
            return [{"error": "not applicable: a DataLoader has no checkpoint of its position"}]
        return _repeat(lambda: run_torch(corpus, workload, fmt, workers, p), p.repeats)
    if system == "limit":
        if workload == "W3":  # the best a restore can do is a cold start of the same pipeline
            ours = next((c for c in cells if (c["workload"], c["format"], c["workers"],
                                              c["system"]) == ("W3", fmt, workers, "zephon")), None)
            if ours is None:
                return [{"error": "the W3 limit is zephon's cold start: run zephon too"}]
            return [{"seconds": r["cold_first_batch_s"]} for r in ours["runs"]
                    if "cold_first_batch_s" in r] or [{"error": "zephon's W3 failed"}]
        fn = {"W1": lambda: limits.raw_read(corpus, fmt, p),
              "W2": lambda: limits.tokenizer_alone(corpus, p),
              "W4": lambda: limits.memcpy(p)}[workload]
        return _repeat(fn, p.repeats)
    raise ValueError(f"unknown system {system!r}")


def summarise(workload: str, fmt: str, workers: int, system: str, runs: list[dict]) -> dict:
    unit = workloads.UNITS[workload]
    if unit == "seconds":
        vals = [r["seconds"] for r in runs if "error" not in r and r.get("seconds")]
    else:
        vals = [v for v in (rate(r, unit) for r in runs) if v is not None]
    e: dict[str, Any] = {"workload": workload, "format": fmt, "workers": workers,
                         "system": system, "unit": "s" if unit == "seconds" else f"{unit}/s",
                         "median": statistics.median(vals) if vals else None, "runs": runs}
    ok = [r for r in runs if "error" not in r]

    def med(key: str) -> float | None:
        xs = [r[key] for r in ok if r.get(key) is not None]
        return statistics.median(xs) if xs else None

    if system != "limit":
        e["first_batch_s"] = med("first_batch_s")
    if workload == "W3" and system != "limit":
        for key in ("checkpoint_bytes", "checkpoint_s", "cold_first_batch_s",
                    "restore_first_batch_s"):
            e[key] = med(key)
        e["first_batch_s"] = e["restore_first_batch_s"]
        if any("restore_exact" in r for r in ok):
            e["restore_exact"] = all(r.get("restore_exact") for r in ok)
    if workload in ("W2", "W4") and system != "limit":
        fr = [workloads.padding_fraction(r) for r in ok]
        fr = [f for f in fr if f is not None]
        e["padding_fraction"] = statistics.median(fr) if fr else None
    if system == "limit" and workload == "W3":
        e["note"] = "cold start of zephon's same pipeline"
    errors = [r["error"] for r in runs if "error" in r]
    if errors and not vals:
        e["error"] = errors[0]
    elif errors:
        e["note"] = f"{len(errors)} of {len(runs)} runs failed: {errors[0]}"
    return e


def collect(corpus: Corpus, p: BenchParams, workers: list[int], wl: list[str],
            systems: list[str], log: Callable[[str], None] = print) -> list[dict]:
    cells: list[dict] = []
    limit_cache: dict[tuple[str, str], list[dict]] = {}
    for k in workers:
        for w in wl:
            if w == "W3" and not p.w3_all_workers and k != workers[0]:
                continue
            for fmt in formats_of(w, p):
                for s in systems:
                    t0 = time.perf_counter()
                    if s == "limit" and w != "W3" and (w, fmt) in limit_cache:
                        runs = limit_cache[(w, fmt)]
                    else:
                        fold = "W3" in wl and (p.w3_all_workers or k == workers[0])
                        runs = run_cell(corpus, w, fmt, k, s, p, cells, fold_w3=fold)
                        if s == "limit":
                            limit_cache[(w, fmt)] = runs
                    cells.append(summarise(w, fmt, k, s, runs))
                    cells[-1]["cell_s"] = time.perf_counter() - t0  # where the minutes go
                    log(line(cells[-1]))
    return cells


def line(e: dict) -> str:
    m = e.get("median")
    med = "-" if m is None else (f"{m:.2f} s" if e["unit"] == "s" else f"{m:,.0f} {e['unit']}")
    extra = f"  ({e['error']})" if e.get("error") else ""
    return (f"{e['workload']} {e['format']:<9} workers={e['workers']} {e['system']:<17} {med}"
            f"{extra}  [{e.get('cell_s', 0):.0f} s]")


def padding_comparison(corpus: Corpus, p: BenchParams, cells: list[dict]) -> dict:
    """W4 side metric: padding of best_fit and first_fit (ours) and of the reference's best_fit
    (and the hand-written DataLoader packer's), each packing the pre-tokenized corpus."""
    out: dict[str, float | None] = {}
    for s, label in (("zephon", "zephon best_fit"), (REFERENCE, "reference-0.2.0 best_fit"),
                     ("torch-dataloader", "torch-dataloader best_fit (hand-written)")):
        e = next((c for c in cells if c["workload"] == "W4" and c["system"] == s
                  and c.get("padding_fraction") is not None), None)
        if e is not None:
            out[label] = e["padding_fraction"]
    try:
        ff = workloads.run_ours(corpus, "W4", "tokenized", 0, p, algorithm="first_fit")
        out["zephon first_fit"] = workloads.padding_fraction(ff)
    except Exception as e:  # noqa: BLE001  (reported, not fatal)
        out["zephon first_fit"] = None
        out["zephon first_fit error"] = str(e)  # type: ignore[assignment]
    return out


def checkpoint_sweeps(corpus: Corpus, p: BenchParams, systems: list[str],
                      log: Callable[[str], None] = print) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    if "zephon" in systems:
        out["zephon"] = checkpoints.sweep(corpus, p, log)
    if REFERENCE in systems:
        # 100k batches would take the reference minutes; its size already shows at 1k
        points = [[c, b] for c, b in p.ckpt_points if b <= 1000]
        cfg = {**_ref_cfg(corpus, "W4", "tokenized", 0, p), "sweep": points,
               "max_length": p.ckpt_max_length, "microbatch": p.ckpt_microbatch}
        out[REFERENCE] = run_reference(cfg, p.ref_timeout_s)
        for pt in out[REFERENCE]:
            log(f"  W3 sweep reference chunk_size={pt.get('chunk_size')} "
                f"batches={pt.get('batches')}: "
                + (pt.get("error") or f"{pt['checkpoint_bytes']:,} B"))
    return out
