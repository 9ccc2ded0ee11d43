"""Turning the runner's results into the markdown tables and the PNG chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zephon.bench.params import BenchParams

TARGETS = {  # what the issues ask of us, shown beside the measured ratios
    ("W1", "reference-0.2.0"): "ours >= 10x",
    ("W1", "torch-dataloader"): "ours ahead",
    ("W1", "limit"): ">= 80% (2 workers)",
    ("W2", "reference-0.2.0"): "ours >= 1.6x",
    ("W2", "torch-dataloader"): "ours ahead",
    ("W2", "limit"): ">= 90%",
    ("W3", "limit"): "restore <= 1.2x cold",
    ("W4", "zephon"): ">= 50M tokens/s/core",
}


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


def _note(e: dict) -> str:
    if e.get("error"):
        return "error: " + e["error"].replace("|", "/")[:140]
    parts = []
    if e["workload"] == "W3" and e.get("checkpoint_bytes") is not None:
        parts.append(f"ckpt {e['checkpoint_bytes'] / 1024:.1f} KB in {e['checkpoint_s'] * 1e3:.0f} ms;"
                     f" cold start {e['cold_first_batch_s']:.2f} s")
        if "restore_exact" in e:
            parts.append("restored stream exact" if e["restore_exact"] else "RESTORED STREAM DIFFERS")
    if e.get("padding_fraction") is not None:
        parts.append(f"padding {e['padding_fraction']:.2%}")
    if e.get("note"):
        parts.append(e["note"])
    target = TARGETS.get((e["workload"], e["system"]))
    if target:
        parts.append(f"target: {target}")
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
                    f"{vs_ours} | {vs_lim} | {_note(e)} |")
    return "\n".join(rows)


def checkpoint_table(sweeps: dict[str, list[dict]]) -> str:
    rows = ["| system | chunk size | after batches | checkpoint | checkpoint time | restore -> "
            "first batch | cold start | exact |", "|---|---|---|---|---|---|---|---|"]
    for system, points in sweeps.items():
        for p in points:
            if "error" in p:
                rows.append(f"| {system} | {p.get('chunk_size', '-')} | {p.get('batches', '-')} "
                            f"| error: {p['error'].replace('|', '/')[:120]} | | | | |")
                continue
            exact = {True: "yes", False: "NO"}.get(p.get("restore_exact"), "-")
            rows.append(f"| {system} | {p['chunk_size']:,} | {p['batches']:,} | "
                        f"{p['checkpoint_bytes'] / 1024:.1f} KB | {p['checkpoint_s'] * 1e3:.0f} ms | "
                        f"{p['restore_first_batch_s']:.2f} s | {p['cold_first_batch_s']:.2f} s | "
                        f"{exact} |")
    return "\n".join(rows)


def padding_table(padding: dict[str, float | None]) -> str:
    rows = ["| packer (W4 stream, max_length 2049, 64 bins) | padding fraction |", "|---|---|"]
    rows += [f"| {k} | {'-' if v is None else f'{v:.2%}'} |" for k, v in padding.items()]
    return "\n".join(rows)


def markdown(payload: dict[str, Any]) -> str:
    meta = payload["meta"]
    p = BenchParams(**{k: tuple(v) if isinstance(v, list) else v
                       for k, v in payload["params"].items()})
    head = (f"Zephon benchmark, {meta['time']}, {meta['cpus']} CPUs ({meta['platform']}), "
            f"{p.docs:,} documents, median of {p.repeats} runs, each run stopped after "
            f"{p.seconds:g} s of steady state ({p.w2_seconds:g} s for W2); `{meta['command']}` "
            f"took {meta['elapsed_s']:.0f} s.")
    parts = [head, "", results_table(payload["results"])]
    if payload.get("checkpoints"):
        parts += ["", "W3 checkpoint size and restore (pre-tokenized documents -> shuffle("
                  f"{p.shuffle_buffer}) -> pack_flat({p.ckpt_max_length}) -> "
                  f"batch({p.ckpt_microbatch}), inline):",
                  "", checkpoint_table(payload["checkpoints"])]
    if payload.get("padding"):
        parts += ["", "W4 padding fraction on the same pre-tokenized stream:", "",
                  padding_table(payload["padding"])]
    return "\n".join(parts) + "\n"


def draw_chart(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(e["workload"], e["format"]) for e in results})
    workers = sorted({e["workers"] for e in results})
    systems = list(dict.fromkeys(e["system"] for e in results))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.8), squeeze=False)
    width = 0.8 / max(len(workers), 1)
    for ax, (w, fmt) in zip(axes[0], panels):
        unit = "s"
        for j, k in enumerate(workers):
            vals = []
            for s in systems:
                e = next((x for x in results if (x["workload"], x["format"], x["workers"],
                                                 x["system"]) == (w, fmt, k, s)), None)
                vals.append((e or {}).get("median") or 0)
                unit = (e or {}).get("unit", unit)
            xs = [i + (j - (len(workers) - 1) / 2) * width for i in range(len(systems))]
            ax.bar(xs, vals, width, label=f"{k} workers" if k else "inline")
        ax.set_xticks(range(len(systems)))
        ax.set_xticklabels(systems, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{w} ({fmt})" + (" - lower is better" if unit == "s" else ""), fontsize=9)
        ax.set_ylabel({"s": "seconds to first batch after restore"}.get(unit, unit), fontsize=8)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
