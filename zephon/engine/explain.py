"""explain(): the compiled plan as text, with where each setting came from."""

from __future__ import annotations

from typing import Any

from zephon.engine.factory import engine_kind
from zephon.engine.plan.stages import compile_plan
from zephon.engine.plan.topology import resolve_topology
from zephon.engine.spec import PipelineSpec


def _parallelism(op) -> int:
    try:
        return op.traits().parallelism
    except Exception:  # user traits() may be fragile; explain must not fail
        return 1


def _ray_lines(spec: PipelineSpec, runtime: Any) -> list[str]:
    """The Ray runner's settings and, while the pipeline runs, its actors (no Ray import)."""
    from zephon.engine.ray.config import RayConfig

    lines = [f"  ray: {RayConfig.from_options(spec.options).describe()}"]
    engine = getattr(runtime, "engine", None)
    describe = getattr(engine, "describe", None)
    if describe is not None:
        lines.extend(describe())
    return lines


def explain(spec: PipelineSpec, runtime: Any = None) -> str:
    """``spec``'s plan as text; ``runtime``, the pipeline's live session if it has one."""
    opts = spec.options
    plan = compile_plan(spec.all_ops)
    kind, workers = engine_kind(opts)
    topo = resolve_topology(opts)
    lines = []
    auto = None
    if kind == "auto":
        live = runtime
        if live is not None and live.tuner is not None:  # what the measurements settled on
            kind, workers, auto = live.kind, live.workers, live.tuner.describe()
        else:
            from zephon.engine.autotune import AutoTuner

            fixed = "process" if opts.resolve("runner")[0] == "process" else None
            first = AutoTuner(plan.worker_ops, fixed).first()
            kind, workers = first.runner, first.workers
            auto = (f"starts {first.label()} ({first.why}); measures the first "
                    "seconds of the stream and may settle on another runner or worker count")
    w_names = [f"{o.op_name}@p{_parallelism(o)}" for o in plan.worker_ops]
    s_names = [f"{o.op_name}@p1" for o in plan.serial_ops]  # serial: one at a time per lane
    where = "worker processes" if kind == "process" else ("worker threads" if kind == "threads"
                                                          else "calling process")
    if kind == "ray":
        where = "ray actors"
    lines.append(f"Stage[0] place=local break='start' runner={kind} workers={workers} "
                 f"runs_in={where} ops={w_names}")
    if auto is not None:
        lines.append(f"  num_workers='auto': {auto}")
    if kind == "process":
        from zephon.engine.process.ownership import Ownership

        why = Ownership.why_not(plan.worker_ops, workers)
        lines.append("  row-group owners: " + (
            "on (each local Parquet row group is read by one worker, which starts decoding it "
            "a window ahead)" if why is None else f"off ({why})"))
    if kind == "ray":
        lines.extend(_ray_lines(spec, runtime))
    if s_names:
        lines.append(f"Stage[1] place=local break='stateful' runner=serial-per-lane "
                     f"runs_in={'coordinator' if kind == 'process' else 'calling process'} "
                     f"ops={s_names}")
    lines.append("")
    lines.append("Execution Graph:")
    lines.append(f"Lanes: canonical_replicas={topo.canonical_replicas} dp_degree={topo.dp_degree} "
                 f"dp_group_id={topo.dp_group_id} owned={list(topo.owned_lanes)} "
                 f"mapping={topo.mapping_strategy}")
    for name in ("runner", "num_workers", "start_method", "micro_batch_size", "prefetch_batches",
                 "shm_slot_bytes", "shm_slots", "deterministic", "log_level", "memory_budget"):
        value, source = opts.resolve(name)
        lines.append(f"  {name}={value!r} ({source})")
    from zephon._ext import status
    from zephon.engine.priming.token_ratios import describe

    tokens = describe(spec)
    if tokens is not None:
        lines.append(tokens)

    kernels = ", ".join(f"{k}={v}" for k, v in status().items())
    lines.append(f"Kernels: {kernels}")
    chain = " -> ".join(["pointers", *w_names, *s_names]) + " ==> pipeline_end"
    lines.append(chain)
    return "\n".join(lines)
