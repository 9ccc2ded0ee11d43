"""Running every (workers, workload, format, system) cell of the benchmark and summarising it.

A cell runs ``repeats`` times and keeps every run's raw figures; its median is over the runs'
rates. A system that fails records its error in its cell and the others go on. The limits use
all cores whatever the worker count, but they are measured again in every worker group, beside
the loaders they are compared with.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from zephon.bench import checkpoints, isolated, limits, workloads
from zephon.bench.corpus import Corpus
from zephon.bench.meter import rate
from zephon.bench.params import BenchParams
from zephon.bench.reference import run_reference
from zephon.bench.torch_baseline import run_torch

WORKLOADS = ("W1", "W2", "W3", "W4", "W5")
SYSTEMS = ("zephon", "reference-0.2.0", "torch-dataloader", "trl", "limit")
REFERENCE = "reference-0.2.0"


def formats_of(workload: str, params: BenchParams) -> tuple[str, ...]:
    if workload == "W1":
        return params.formats
    if workload == "W5":
        return ("jsonl",)  # conversations
    return ("tokenized",) if workload == "W4" else (params.w2_format,)


def _error(e: BaseException) -> dict:
    return {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}


def _attempt(fn: Callable[[], dict]) -> dict:
    try:
        return fn()
    except Exception as e:  # a broken system must not hide the others' figures
        return _error(e)


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


def one_run(corpus: Corpus, workload: str, fmt: str, workers: int, system: str,
            p: BenchParams, fold_w3: bool = False) -> dict:
    """One run of an in-process system (zephon, torch-dataloader, limit) on W1, W2 or W4;
    ``fold_w3``: a W2 run of ours ends with W3's checkpoint and restore."""
    if system == "trl" and workload != "W5":
        return {"error": "not applicable: TRL is compared on supervised fine-tuning (W5)"}
    if workload == "W5" and system != "zephon":
        from zephon.bench import chat

        run = {"trl": chat.run_trl, "torch-dataloader": chat.run_hand}.get(system)
        if run is None:
            return _attempt(lambda: limits.run_limit(corpus, workload, fmt, p))
        return _attempt(lambda: run(corpus, workers, p))
    if workload == "W2" and system in ("zephon", "torch-dataloader"):  # memory of its own
        return _attempt(lambda: isolated.run(corpus, system, fmt, workers, p,
                                             checkpoint=fold_w3 and system == "zephon"))
    if system == "zephon":
        return _attempt(lambda: workloads.run_ours(corpus, workload, fmt, workers, p,
                                                   checkpoint=fold_w3 and workload == "W2"))
    if system == "torch-dataloader":
        return _attempt(lambda: run_torch(corpus, workload, fmt, workers, p))
    if system == "limit":
        return _attempt(lambda: limits.run_limit(corpus, workload, fmt, p))
    raise ValueError(f"unknown system {system!r}")


def w3_runs(cells: list[dict], corpus: Corpus, fmt: str, workers: int, system: str,
            p: BenchParams) -> list[dict]:
    """W3's runs: those folded into the W2 runs of the same system and settings, else (ours)
    W3 on its own; W3's limit is Zephon's cold start, the best a restore can do."""
    def cell(w: str, s: str) -> dict | None:
        return next((c for c in cells if (c["workload"], c["format"], c["workers"], c["system"])
                     == (w, fmt, workers, s)), None)

    if system in ("torch-dataloader", "trl"):
        return [{"error": "not applicable: a DataLoader has no checkpoint of its position"}]
    if system == "limit":
        ours = cell("W3", "zephon")
        if ours is None:
            return [{"error": "the W3 limit is zephon's cold start: run zephon too"}]
        return [{"seconds": r["cold_first_batch_s"]} for r in ours["runs"]
                if "cold_first_batch_s" in r] or [{"error": "zephon's W3 failed"}]
    w2 = cell("W2", system)
    if w2 is not None and any("w3" in r for r in w2["runs"]):
        return [{**r["w3"], "seconds": r["w3"]["restore_first_batch_s"]}
                if "error" not in r["w3"] else r["w3"] for r in w2["runs"] if "w3" in r]
    if system == REFERENCE:
        return run_reference(_ref_cfg(corpus, "W3", fmt, workers, p), p.ref_timeout_s)
    runs: list[dict] = []
    for _ in range(p.repeats):
        runs.append(_attempt(lambda: checkpoints.run_w3(corpus, fmt, workers, p)))
        if "error" in runs[-1]:
            break
    return runs


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
    if workload == "W2" and system != "limit":
        e["pss_peak_bytes"] = med("pss_peak_bytes")
    if system == "zephon" and workload in ("W1", "W2", "W4"):
        for key in ("serial_us_per_record", "train_us_per_record", "coordinator_us_per_record"):
            e[key] = med(key)
    if workload in ("W2", "W4", "W5") and system not in ("limit", "trl"):
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
    """Every cell. Within a (workers, workload, format) group the in-process systems take
    turns, repeat by repeat, so that a machine shared with other jobs slows them alike and
    their ratios hold; the reference runs its repeats in one subprocess first."""
    cells: list[dict] = []
    for k in workers:
        for w in wl:
            if w in p.first_workers_only and k != workers[0]:
                continue
            for fmt in formats_of(w, p):
                t0 = time.perf_counter()
                if w == "W3":
                    for s in systems:
                        cells.append(summarise(w, fmt, k, s, w3_runs(cells, corpus, fmt, k, s, p)))
                        log(line(cells[-1]))
                    continue
                fold = w == "W2" and "W3" in wl and ("W3" not in p.first_workers_only
                                                     or k == workers[0])
                runs: dict[str, list[dict]] = {s: [] for s in systems}
                if REFERENCE in systems and w == "W5":
                    runs[REFERENCE] = [{"error": "not measured: the reference's client does "
                                        "not drive tokenize_chat"}]
                elif REFERENCE in systems:
                    cfg = {**_ref_cfg(corpus, w, fmt, k, p), "checkpoint": fold}
                    runs[REFERENCE] = run_reference(cfg, p.ref_timeout_s)
                local = [s for s in systems if s != REFERENCE]
                for _ in range(p.repeats):
                    for s in local:
                        if runs[s] and "error" in runs[s][-1]:
                            continue  # the same error would repeat
                        runs[s].append(one_run(corpus, w, fmt, k, s, p, fold_w3=fold))
                group_s = time.perf_counter() - t0
                for s in systems:
                    cells.append(summarise(w, fmt, k, s, runs[s]))
                    log(line(cells[-1]))
                log(f"  ({group_s:.0f} s)")
    return cells


def line(e: dict) -> str:
    m = e.get("median")
    med = "-" if m is None else (f"{m:.2f} s" if e["unit"] == "s" else f"{m:,.0f} {e['unit']}")
    extra = f"  ({e['error']})" if e.get("error") else ""
    return f"{e['workload']} {e['format']:<9} workers={e['workers']} {e['system']:<17} {med}{extra}"


PACKERS = ("best_fit", "first_fit")


def padding_comparison(corpus: Corpus, p: BenchParams, systems: list[str],
                       log: Callable[[str], None] = print) -> dict[str, dict]:
    """W4 side metric: the padding fraction of each packer over the first ``padding_batches``
    batches of W4's stream (ours: the same documents for every algorithm; the reference packs
    the same corpus in its own curriculum order)."""
    out: dict[str, dict] = {}
    if "zephon" in systems:
        for a in PACKERS:
            out[f"zephon {a}"] = _attempt(lambda a=a: workloads.packed(corpus, p, a,
                                                                     p.padding_batches))
    if REFERENCE in systems:
        cfg = {**_ref_cfg(corpus, "W4", "tokenized", 0, p), "padding": list(PACKERS),
               "batches": p.padding_batches}
        for r in run_reference(cfg, p.ref_timeout_s):
            out[f"{REFERENCE} {r.get('algorithm', '?')}"] = r
    for label, r in out.items():
        r["padding_fraction"] = workloads.padding_fraction(r)
        log(f"  padding {label}: " + (r.get("error") or f"{r['padding_fraction']:.3%}"))
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
