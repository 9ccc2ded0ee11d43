"""The one place an engine is chosen and made: inline, threads, process or Ray, as peers.

``engine_kind`` reads the options (``runner``, ``num_workers``, ``ray_workers``) and says which
engine and how many workers; ``"auto"`` (``num_workers="auto"``, the default) is settled by the
``AutoTuner`` (``autotune.py``), which may also switch engines mid-stream: the session then asks
this factory for the next one. Every engine takes a ``LanePlan`` and yields the same units.
"""

from __future__ import annotations

import warnings
from typing import Any

from zephon.engine.lanes.lane_plan import LanePlan
from zephon.errors import ConfigError

RUNNERS = ("inline", "threads", "process", "ray")


def engine_kind(options: Any) -> tuple[str, int]:
    """("inline" | "process" | "threads" | "ray" | "auto", workers) chosen from options and
    environment; "auto" (``num_workers="auto"``, the default) is settled by ``AutoTuner``; for
    "ray", workers is ``ray_workers`` (0 when the cluster's CPUs decide)."""
    runner, _ = options.resolve("runner")
    if runner == "ray":
        return "ray", int(options.get("ray_workers") or 0)
    workers, _ = options.resolve("num_workers")
    if runner == "inline":
        return "inline", 0
    if isinstance(workers, str):
        if workers.strip().lower() != "auto":
            raise ConfigError(f"num_workers must be an integer or 'auto', got {workers!r}")
        if runner == "threads":
            from zephon.engine.autotune import usable_cores

            return "threads", usable_cores()
        return "auto", 0
    if runner is None:
        runner = "process" if workers > 0 else "inline"
    if runner == "process" and workers <= 0:
        return "inline", 0
    return runner, max(int(workers), 1)


def coordinator_in_training(plan, options: Any) -> bool:
    """Whether worker processes are coordinated by the training process itself: by default
    when the serial stage only slices records into batches (a coordinator process would only
    copy them), else as ``options(coordinator=...)`` says."""
    where = options.get("coordinator")
    if where == "auto":
        return all(op.traits().cost == "slice" for op in plan.serial_ops)
    return where == "training"


def make_engine(kind: str, workers: int, lane_plan: LanePlan, options: Any):
    """The engine ``kind`` with ``workers`` workers over ``lane_plan``.

    A process engine asked for where no process may be started (a daemonic process, such as a
    DataLoader worker, or no POSIX shared memory) runs inline, with a warning.
    """
    if kind not in RUNNERS:
        raise ConfigError(f"runner must be one of {', '.join(RUNNERS)}, got {kind!r}")
    if kind == "ray":  # imports Ray: only when chosen
        from zephon.engine.ray.runner import RayEngine

        return RayEngine(lane_plan, options)
    if kind == "process":
        from zephon.engine.process.engine import DirectEngine, ProcessEngine, can_start_processes

        if workers > 0 and can_start_processes():
            if coordinator_in_training(lane_plan.plan, options):
                return DirectEngine(lane_plan, workers, options)
            return ProcessEngine(lane_plan, workers, options)
        if workers > 0:
            warnings.warn("zephon: this process cannot start worker processes (it is daemonic, "
                          "e.g. a DataLoader worker, or has no POSIX shared memory); running "
                          "the pipeline inline", RuntimeWarning, stacklevel=4)
    if kind == "threads" and workers > 0:
        from zephon.engine.config import EngineConfig
        from zephon.engine.process.cleanup import setup_logging
        from zephon.engine.threads import ThreadsEngine

        config = EngineConfig.from_options(options, workers)
        if options.resolve("log_level")[1] != "default":  # else the application's setting
            setup_logging(config.log_level)
        return ThreadsEngine(lane_plan, config)
    from zephon.engine.inline import InlineEngine

    return InlineEngine(lane_plan)
