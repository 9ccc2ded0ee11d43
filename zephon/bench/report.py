"""Turning the runner's results into the markdown tables and the PNG chart."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from zephon.bench.params import BenchParams

# What the issues ask, per (workload, system row): (label, what to check, bound, the fewest
# workers it applies to). "ours/row": Zephon's median over the row's; "restore/cold": W3's
# restore over the cold start (the limit row); "per_core": W4's tokens/s per core.
TARGETS: dict[tuple[str, str], tuple[str, str, float, int]] = {
    ("W1", "reference-0.2.0"): ("ours >= 10x", "ours/row", 10.0, 0),
    ("W1", "torch-dataloader"): ("ours ahead", "ours/row", 1.0, 0),
    ("W1", "limit"): ("ours >= 80% with 2 workers", "ours/row", 0.8, 2),
    ("W1", "zephon"): ("serial path <= 0.5 us/record with 2 workers", "serial", 0.5, 2),
    ("W2", "reference-0.2.0"): ("ours >= 1.6x", "ours/row", 1.6, 0),
    ("W2", "torch-dataloader"): ("ours ahead", "ours/row", 1.0, 0),
    ("W2", "limit"): ("ours >= 90%", "ours/row", 0.9, 0),
    ("W3", "limit"): ("restore <= 1.2x cold start", "restore/cold", 1.2, 0),
    ("W4", "zephon"): (">= 50M tokens/s per core", "per_core", 50e6, 0),
    ("W5", "trl"): ("ours ahead", "ours/row", 1.0, 0),
    ("W5", "limit"): ("ours >= 90% with 2 workers", "ours/row", 0.9, 2),
}


def _target(e: dict, ours: dict | None) -> str:
    t = TARGETS.get((e["workload"], e["system"]))
    if t is None or e["workers"] < t[3]:
        return ""
    label, kind, bound, _ = t
    m, o = e.get("median"), ours and ours.get("median")
    if kind == "ours/row":
        value = o / m if m and o else None
        shown = "-" if value is None else (f"{value:.0%}" if bound < 1 else f"{value:.2f}x")
        ok = value is not None and value >= bound
    elif kind == "restore/cold":
        value = o / m if m and o else None
        shown = "-" if value is None else f"{value:.2f}x"
        ok = value is not None and value <= bound
    elif kind == "serial":
        value = e.get("serial_us_per_record")
        shown = "-" if value is None else f"{value:.2f} us"
        ok = value is not None and value <= bound
    else:
        value = m / max(1, e["workers"]) if m else None
        shown = "-" if value is None else f"{value / 1e6:.1f}M"
        ok = value is not None and value >= bound
    verdict = "-" if value is None else ("met" if ok else "NOT met")
    return f"target {label}: {shown}, {verdict}"


def _fmt_rate(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v:.2f} s"
    if v >= 1e6:
        return f"{v / 1e6:.1f}M {unit}"
    return f"{v / 1e3:.1f}k {unit}" if v >= 1e3 else f"{v:.0f} {unit}"


def _find(results: list[dict], e: dict, system: str) -> dict | None:
    return next((x for x in results if x["system"] == system and x["workload"] == e["workload"]
                 and x["format"] == e["format"] and x["workers"] == e["workers"]), None)


def _ratio(a: float | None, b: float | None, pct: bool = False) -> str:
    if not a or not b:
        return "-"
    return f"{a / b:.0%}" if pct else f"{a / b:.2f}x"


def _note(e: dict, ours: dict | None) -> str:
    if e.get("error"):
        return "error: " + e["error"].replace("|", "/")[:140]
    parts = []
    if e["workload"] == "W3" and e.get("checkpoint_bytes") is not None:
        parts.append(f"ckpt {e['checkpoint_bytes'] / 1024:.1f} KB in {e['checkpoint_s'] * 1e3:.0f} ms;"
                     f" cold start {e['cold_first_batch_s']:.2f} s")
        if "restore_exact" in e:
            parts.append("restored stream exact" if e["restore_exact"] else "RESTORED STREAM DIFFERS")
    if e.get("pss_peak_bytes"):
        parts.append(f"PSS {e['pss_peak_bytes'] / 2**20:.0f} MiB (process tree, peak)")
    if e.get("serial_us_per_record") is not None:
        serial = (f"serial path {e['serial_us_per_record']:.2f} us/record (training process "
                  f"{e['train_us_per_record']:.2f}")
        if e.get("coordinator_us_per_record"):
            serial += f", coordinator {e['coordinator_us_per_record']:.2f}"
        parts.append(serial + ")")
    if e.get("note"):
        parts.append(e["note"])
    if not e.get("error") and _target(e, ours):
        parts.append(_target(e, ours))
    return "; ".join(parts)


def results_table(results: list[dict]) -> str:
    rows = ["| workload | format | workers | system | median | first batch | vs zephon | vs limit "
            "| notes |", "|---|---|---|---|---|---|---|---|---|"]
    for e in results:
        ours, lim = _find(results, e, "zephon"), _find(results, e, "limit")
        m = e.get("median")
        if e["unit"] == "s":  # lower is better: show how many times slower than ours
            vs_ours = _ratio(m, ours and ours.get("median"))
            vs_lim = _ratio(m, lim and lim.get("median"))
        else:
            vs_ours = _ratio(m, ours and ours.get("median"))
            vs_lim = _ratio(m, lim and lim.get("median"), pct=True)
        first = e.get("first_batch_s")
        rows.append(f"| {e['workload']} | {e['format']} | {e['workers']} | {e['system']} | "
                    f"{_fmt_rate(m, e['unit'])} | {'-' if first is None else f'{first:.2f} s'} | "
                    f"{vs_ours} | {vs_lim} | {_note(e, ours)} |")
    return "\n".join(rows)


def checkpoint_table(sweeps: dict[str, list[dict]]) -> str:
    rows = ["| system | chunk size | after batches | checkpoint | checkpoint time | restore -> "
            "first batch | cold start | exact |", "|---|---|---|---|---|---|---|---|"]
    for system, points in sweeps.items():
        for p in points:
            if "error" in p:
                chunk, batches = p.get("chunk_size"), p.get("batches")
                rows.append(f"| {system} | {'-' if chunk is None else f'{chunk:,}'} | "
                            f"{'-' if batches is None else f'{batches:,}'} | error: "
                            f"{p['error'].replace('|', '/')[:120]} | | | | |")
                continue
            exact = {True: "yes", False: "NO"}.get(p.get("restore_exact"), "-")
            rows.append(f"| {system} | {p['chunk_size']:,} | {p['batches']:,} | "
                        f"{p['checkpoint_bytes'] / 1024:.1f} KB | {p['checkpoint_s'] * 1e3:.0f} ms | "
                        f"{p['restore_first_batch_s']:.2f} s | {p['cold_first_batch_s']:.2f} s | "
                        f"{exact} |")
    return "\n".join(rows)


def padding_table(padding: dict[str, dict], batches: int) -> str:
    rows = [f"| packer (first {batches:,} W4 batches: max_length 2049, 64 bins) | tokens | "
            "padding fraction |", "|---|---|---|"]
    for label, r in padding.items():
        if r.get("padding_fraction") is None:
            rows.append(f"| {label} | - | error: {str(r.get('error', '-')).replace('|', '/')[:120]} |")
        else:
            rows.append(f"| {label} | {r['tokens']:,} | {r['padding_fraction']:.3%} |")
    return "\n".join(rows)


def markdown(payload: dict[str, Any]) -> str:
    meta = payload["meta"]
    p = BenchParams(**{k: tuple(v) if isinstance(v, list) else v
                       for k, v in payload["params"].items()})
    head = (f"Zephon benchmark, {meta['time']}, {meta['cpus']} CPUs ({meta['platform']}), "
            f"{p.docs:,} documents, median of {p.repeats} runs, each run stopped after "
            f"{p.seconds:g} s of steady state ({p.w2_seconds:g} s for W2); `{meta['command']}` "
            f"took {meta['elapsed_s']:.0f} s."
            + (f" Every system read through Arrow's {meta['arrow_pool']} allocator."
               if meta.get("arrow_pool") else ""))
    parts = [head, "", results_table(payload["results"])]
    if payload.get("checkpoints"):
        parts += ["", "W3 checkpoint size and restore (pre-tokenized documents -> shuffle("
                  f"{p.shuffle_buffer}) -> pack_flat({p.ckpt_max_length}) -> "
                  f"batch({p.ckpt_microbatch}), inline):",
                  "", checkpoint_table(payload["checkpoints"])]
    if payload.get("padding"):
        parts += ["", "W4 padding fraction (target: best_fit below the reference's):", "",
                  padding_table(payload["padding"], p.padding_batches)]
    if payload.get("feed"):
        from zephon.bench import feed

        rows = payload["feed"][0].get("rows", 8)
        parts += ["", f"Feed: a training step holds its core T ms per batch of {rows} x 2,048 "
                  "tokens (W2's pipeline); the loop's data wait after its third step, and its "
                  "longest wait after the first batch (target: default <= 2%, <= 50 ms, within "
                  "noise of the best fixed setting):", "", feed.table(payload["feed"])]
    return "\n".join(parts) + "\n"


# the README's headline: (label, workload, format) of inline runs, and the systems compared
README_ROWS = (("W1 fetch + `batch(32)`, JSONL", "W1", "jsonl"),
               ("W2 tokenize → shuffle → pack → batch", "W2", "jsonl"),
               ("W3 restore a checkpoint → first batch", "W3", "jsonl"),
               ("W4 pack pre-tokenized Parquet", "W4", "tokenized"))
README_SYSTEMS = (("zephon", "Zephon"), ("reference-0.2.0", "Zephon 0.2.0"),
                  ("torch-dataloader", "torch DataLoader"))
README_BEGIN = "<!-- the table below is written by `python benchmarks/readme_table.py` -->"
README_END = "<!-- end of the generated table -->"


def readme_table(payload: dict[str, Any]) -> str:
    """The README's headline table from a run's ``bench.json``, with what measured it: the
    command, the date, the machine and the commit (``benchmarks/readme_table.py`` writes it
    between ``README_BEGIN`` and ``README_END``)."""
    meta, results = payload["meta"], payload["results"]
    commit = meta.get("commit")
    where = (f"commit `{commit[:7]}`" + (" with uncommitted changes" if meta.get("dirty") else "")
             if commit else "an unrecorded commit")
    lines = [README_BEGIN, "",
             f"`{meta['command']}` at {where}, {meta['time']}, on {meta['cpus']} CPUs "
             f"({meta['platform']}), inline (no worker processes):", "",
             "| workload | " + " | ".join(name for _, name in README_SYSTEMS) + " |",
             "|---|" + "---|" * len(README_SYSTEMS)]
    for label, workload, fmt in README_ROWS:
        cells = []
        for system, _ in README_SYSTEMS:
            e = next((r for r in results if (r["workload"], r["format"], r["workers"],
                                             r["system"]) == (workload, fmt, 0, system)), None)
            if e is None:
                cells.append("not run")
            elif e.get("median") is None:
                cells.append("no checkpoint" if workload == "W3" else "failed")
            else:
                cells.append(_fmt_rate(e["median"], e["unit"]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", README_END])


def _short(v: float, unit: str) -> str:
    if unit == "s":
        return f"{v:.1f}"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.0f}"


def draw_chart(results: list[dict], path: Path) -> None:
    """One panel per workload and format: each system's median, a bar per worker count; rates
    on a log scale (the limits sit orders of magnitude above some loaders)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(e["workload"], e["format"]) for e in results})
    workers = sorted({e["workers"] for e in results})
    systems = list(dict.fromkeys(e["system"] for e in results))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.9), squeeze=False)
    width = 0.8 / max(len(workers), 1)
    for ax, (w, fmt) in zip(axes[0], panels):
        unit = next(e["unit"] for e in results if (e["workload"], e["format"]) == (w, fmt))
        low = float("inf")
        for j, k in enumerate(workers):
            xs, vals = [], []
            for i, s in enumerate(systems):
                e = next((x for x in results if (x["workload"], x["format"], x["workers"],
                                                 x["system"]) == (w, fmt, k, s)), None)
                if e and e.get("median"):
                    xs.append(i + (j - (len(workers) - 1) / 2) * width)
                    vals.append(e["median"])
            low = min([low, *vals])
            bars = ax.bar(xs, vals, width, label=f"{k} workers" if k else "inline")
            ax.bar_label(bars, [_short(v, unit) for v in vals], fontsize=6, rotation=90,
                         padding=2)
        ax.margins(y=0.25)
        if unit != "s" and low < float("inf"):
            ax.set_yscale("log")  # bars from a whole decade below the smallest: honest heights
            ax.set_ylim(bottom=10 ** math.floor(math.log10(low)))
        ax.set_xticks(range(len(systems)))
        ax.set_xticklabels(systems, rotation=30, ha="right", fontsize=7)
        ax.set_title(f"{w} ({fmt})" + (", lower is better" if unit == "s" else ""), fontsize=9)
        ax.set_ylabel("s to first batch after restore" if unit == "s" else unit, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
