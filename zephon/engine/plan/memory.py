"""``memory_budget``: size the engine's memory to fit, refuse what cannot, report the shares.

What a pipeline's process tree holds, part by part (estimates made before the stream, from
the options and the data; the measured total is the tree's PSS, shared pages counted once):

- ``processes``: the coordinator and worker interpreters (Python, numpy, Arrow, the operators'
  resources such as a tokenizer), ``PROCESS_BYTES`` each; the training process is the
  caller's and is not counted;
- ``shm``: the shared-memory slots, ``workers x shm_slots x shm_slot_bytes`` for the workers'
  results plus ``prefetch_batches`` output slots (at most 2 MiB each to start);
- ``row_group_cache``: decoded Parquet row groups kept by each process that decodes (every
  worker; the training process inline);
- ``buffers``: records held by stateful operators (shuffle, mixture, packing bins), from
  their sizes and the datasets' mean bytes per record (twice that once tokenized).

With a budget, the parts the user did not set are sized to fit it: the fixed ones
(processes, buffers) first, then what is left is shared between the slots and the row-group
cache (fewer slots first, then smaller ones), each never above its default and never below
what one micro-batch needs. A budget
that cannot hold even that is refused, with every part's figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zephon.engine.config import OUTPUT_SLOT_BYTES

PROCESS_BYTES = 64 << 20  # one coordinator or worker interpreter (measured 40-60 MB PSS)
MIN_RG_CACHE = 16 << 20   # a few row groups of 2 KB records
MIN_SLOT = 1 << 20
SIZED = ("shm_slot_bytes", "shm_slots", "prefetch_batches")


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def mean_record_bytes(datasets) -> float:
    sizes, rows = 0.0, 0
    for ds in datasets:
        try:
            raw = ds.raw_bytes() if hasattr(ds, "raw_bytes") else None
            if raw is not None:
                sizes, rows = sizes + float(sum(raw)), rows + int(ds.total())
        except Exception:  # an estimate: a dataset that cannot tell is left out
            continue
    return sizes / rows if rows else 2048.0


def held_records(ops) -> tuple[int, int]:
    """(records held by stateful operators at most, token rows of open packing bins)."""
    records = tokens = 0
    for op in ops:
        if op.traits().requires_serial_state:
            r, t = op.held_bound()
            records, tokens = records + r, tokens + t
    return records, tokens


@dataclass
class MemoryPlan:
    budget: int | None
    parts: dict[str, int]
    sized: dict[str, Any]  # option -> value chosen to fit the budget
    notes: list[str]

    def report(self, pss: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"budget_bytes": self.budget, "parts": dict(self.parts),
                               "planned_bytes": sum(self.parts.values()), "sized": self.sized}
        if self.budget:
            out["share"] = {k: v / self.budget for k, v in self.parts.items()}
        if pss is not None:
            out["pss_bytes"] = pss
            if self.budget:
                out["pss_share"] = pss / self.budget
        return out


def plan_memory(options, worker_ops, serial_ops, kind: str, workers: int, micro: int,
                rg_cache_bytes: int, rg_cache_fixed: bool) -> MemoryPlan:
    """The parts for this engine; sized to ``memory_budget`` when one is set."""
    budget_raw, _ = options.resolve("memory_budget")
    from zephon.option_values import parse_size_bytes

    budget = parse_size_bytes(budget_raw, "memory_budget") if budget_raw not in (None, "") \
        else None
    fetch = worker_ops[0] if worker_ops and hasattr(worker_ops[0], "datasets") else None
    datasets = list(getattr(fetch, "datasets", []) or [])
    rec = mean_record_bytes(datasets)
    tokenized = any(op.traits().cost == "tokenize" for op in worker_ops)
    per_rec = rec * (2 if tokenized else 1)
    held, tokens = held_records(serial_ops)
    parquet = any(getattr(ds, "fmt", None) == "parquet" for ds in datasets)
    procs = (workers + 1) if kind == "process" else 0
    decoders = workers if kind == "process" else 1
    per_worker = int(options.get("shm_slots"))
    prefetch = int(options.get("prefetch_batches"))
    fixed = {"processes": procs * PROCESS_BYTES, "buffers": int(held * per_rec + tokens * 4)}
    slot_bytes = int(options.get("shm_slot_bytes"))
    rg_each = rg_cache_bytes if parquet else 0
    sized: dict[str, Any] = {}
    notes: list[str] = []

    def shm_total() -> int:
        if kind != "process":
            return 0
        return workers * per_worker * slot_bytes + prefetch * min(slot_bytes, OUTPUT_SLOT_BYTES)

    if budget is not None:
        # a slot holds one micro-batch's records (the worker's result) with room to spare
        min_slot = max(MIN_SLOT, int(micro * per_rec * 1.5))
        free = budget - sum(fixed.values())
        can_size = {n for n in SIZED if options.resolve(n)[1] == "default"}
        shm_share = free * (0.5 if parquet and not rg_cache_fixed else 1.0)
        if kind == "process" and shm_total() > shm_share:  # fewer slots, then smaller ones
            if "shm_slots" in can_size:
                per_worker = sized["shm_slots"] = 2
            if "prefetch_batches" in can_size:
                prefetch = sized["prefetch_batches"] = 4
            if "shm_slot_bytes" in can_size and shm_total() > shm_share:
                per_slot = shm_share / (workers * per_worker + prefetch)
                slot_bytes = sized["shm_slot_bytes"] = max(min_slot, int(per_slot))
        if parquet and not rg_cache_fixed:
            left = free - shm_total()
            rg_each = max(MIN_RG_CACHE, min(rg_cache_bytes, int(left // max(1, decoders))))
            sized["rg_cache_bytes"] = rg_each
    parts = {**fixed, "shm": shm_total(), "row_group_cache": decoders * rg_each}
    if budget is not None and sum(parts.values()) > budget:
        listed = ", ".join(f"{k} {_mb(v)}" for k, v in parts.items())
        raise ValueError(
            f"memory_budget={_mb(budget)} cannot hold this pipeline: it needs at least "
            f"{_mb(sum(parts.values()))} ({listed}; {procs} zephon processes of ~"
            f"{_mb(PROCESS_BYTES)}, {held:,} held records of ~{per_rec:,.0f} B, slots of "
            f"{_mb(slot_bytes)} for micro-batches of {micro} records). Raise the budget, or "
            "lower num_workers, micro_batch_size or the buffers' sizes")
    if budget is not None:
        notes.append(f"memory_budget {_mb(budget)}: " + ", ".join(
            f"{k}={_mb(v) if isinstance(v, int) and v > 4096 else v}" for k, v in sized.items()))
    return MemoryPlan(budget, parts, sized, notes)


class SizedOptions:
    """The pipeline's options with the values a memory budget chose for the settings the user
    left at their defaults (source "memory_budget" in ``explain()``)."""

    def __init__(self, base, sized: dict[str, Any]) -> None:
        self.base = base
        self.sized = sized
        self.explicit = base.explicit

    def resolve(self, name: str) -> tuple[Any, str]:
        value, source = self.base.resolve(name)
        if source == "default" and name in self.sized:
            return self.sized[name], "memory_budget"
        return value, source

    def get(self, name: str) -> Any:
        return self.resolve(name)[0]


def tree_pss() -> int | None:
    """PSS of this process and its descendants (shared pages counted once), or None."""
    try:
        import psutil

        me = psutil.Process()
        total = 0
        for p in [me, *me.children(recursive=True)]:
            try:
                total += p.memory_full_info().pss
            except (psutil.Error, AttributeError):
                pass
        return total
    except Exception:  # psutil missing, or no PSS on this platform
        return None
