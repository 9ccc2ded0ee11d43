"""A live run of a pipeline: resolves options and topology, picks the engine, owns its lifetime."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from zephon.engine.chunk_source import engine_source
from zephon.engine.lane_plan import LanePlan
from zephon.engine.plan import compile_plan
from zephon.engine.topology import resolve_topology

log = logging.getLogger("zephon")

def engine_kind(pipeline) -> tuple[str, int]:
    """("inline" | "process" | "threads" | "ray" | "auto", workers) chosen from options and
    environment; "auto" (``num_workers="auto"``, the default) is settled by ``AutoTuner``; for
    "ray", workers is ``ray_workers`` (0 when the cluster's CPUs decide)."""
    opts = pipeline._options
    runner, _ = opts.resolve("runner")
    if runner == "ray":
        return "ray", int(opts.get("ray_workers") or 0)
    workers, _ = opts.resolve("num_workers")
    if runner == "inline":
        return "inline", 0
    if isinstance(workers, str):
        if workers.strip().lower() != "auto":
            raise ValueError(f"num_workers must be an integer or 'auto', got {workers!r}")
        if runner == "threads":
            from zephon.engine.autotune import usable_cores

            return "threads", usable_cores()
        return "auto", 0
    if runner is None:
        runner = "process" if workers > 0 else "inline"
    if runner == "process" and workers <= 0:
        return "inline", 0
    return runner, max(int(workers), 1)


class Session:
    def __init__(self, pipeline) -> None:
        from zephon.engine.priming import prime

        self.pipeline = pipeline
        opts = pipeline._options
        pending = pipeline._pending_restore
        # start-up, in time.monotonic(): the clock the coordinator's and workers' marks use
        self.times: dict[str, float] = {"start": time.monotonic()}
        self.topology = resolve_topology(opts)
        store = opts.get("aggregate_store")
        if store and self.topology.world_size > 1:  # unreachable: say so now, not at a checkpoint
            from zephon.state.store_gather import client

            client(str(store), float(opts.get("aggregate_timeout_s")))
        self.plan = compile_plan(pipeline._all_ops())
        self.tracking = (pipeline._observability or {}).get("tracking", "off")
        self.plan.worker_ops[0].timing = self.tracking == "nodes"  # fetch: per-shard timing
        fetch_batch = pipeline._fetch_kw.get("max_batch")
        self.micro = int(fetch_batch or opts.get("micro_batch_size"))
        self.kind, self.workers = engine_kind(pipeline)
        self.tuner = None
        if self.kind == "auto":
            from zephon.engine.autotune import AutoTuner

            fixed = "process" if opts.resolve("runner")[0] == "process" else None
            self.tuner = AutoTuner(self.plan.worker_ops, fixed)
            choice = self.tuner.first()
            self.kind, self.workers = choice.runner, choice.workers
        self.options = opts
        self.memory = self._plan_memory(self.kind, self.workers)  # refuses what cannot fit
        if self.kind == "process":  # the fork server imports while this process primes
            from zephon.engine.startup import warm_forkserver

            warm_forkserver(opts.get("start_method"))
        self.times["primed_from"] = time.monotonic()
        # where each token-aware dataset's figure came from, and how long it took
        self.priming = prime(pipeline, pending.get("token_ratios") if pending else None)
        self.times["primed"] = time.monotonic()
        self.startup: dict[str, float] | None = None
        self.active = False
        self.engine = None
        self.final_states: dict[int, dict | None] | None = None
        self.restore_states: dict[int, dict | None] = {}
        if pipeline._pending_restore is not None:
            from zephon.engine.checkpoint_view import view_of
            from zephon.state.checkpoint import lane_states

            self.restore_states = lane_states(pipeline._pending_restore,
                                              view_of(pipeline, self.topology))

    def lane_plan(self) -> LanePlan:
        topo = self.topology
        restore = {lane: st for lane, st in self.restore_states.items()
                   if st is not None and lane in topo.owned_lanes}
        extra = {"prefetch": self.pipeline._prefetch} if self.pipeline._prefetch else {}
        source = engine_source(self.pipeline.work_source,
                               self.pipeline._options.get("mixture_config"), restore)
        return LanePlan(self.plan, source, topo.owned_lanes,
                        topo.canonical_replicas, self.micro, restore or None, extra)

    def _plan_memory(self, kind: str, workers: int):
        """Size slots and caches to ``memory_budget`` (when set) for this engine; the fetch
        operator's datasets carry the row-group cache size to the processes that decode."""
        from zephon.engine.memory import SizedOptions, plan_memory
        from zephon.io.options import StoreOptions, resolve_store

        base = self.pipeline._options
        io = base.explicit.get("io_options")
        store = StoreOptions.coerce(io)
        rg_fixed = ("limit_bytes" in store.parquet_rg_cache._given
                    or "rg_cache_bytes" in store.cache._given or store.parquet_rg_cache.enabled
                    is False or bool(os.environ.get("ZEPHON_RG_CACHE_BYTES", "").strip()))
        plan = plan_memory(base, self.plan.worker_ops, self.plan.serial_ops, kind, workers,
                           self.micro, resolve_store(io).rg_cache_bytes, rg_fixed)
        self.options = SizedOptions(base, plan.sized) if plan.sized else base
        rg = plan.sized.get("rg_cache_bytes")
        fetch = self.plan.worker_ops[0] if self.plan.worker_ops else None
        if rg is not None and hasattr(fetch, "datasets"):
            limit = {"parquet_rg_cache": {"limit_bytes": int(rg)}}
            fetch.datasets = [ds.with_store_options(StoreOptions.coerce(
                getattr(ds, "_store_options", None)).merged(limit))
                if hasattr(ds, "with_store_options") else ds for ds in fetch.datasets]
        return plan

    def _make_engine(self):
        if self.kind == "ray":  # imports Ray: only when chosen
            from zephon.engine.ray_runner import RayEngine

            return RayEngine(self.lane_plan(), self.pipeline._options)
        if self.kind == "inline" or self.workers == 0:
            from zephon.engine.inline import InlineEngine

            return InlineEngine(self.lane_plan())
        from zephon.engine.process import ProcessEngine

        return ProcessEngine(self.lane_plan(), self.workers, self.options, runner=self.kind)

    def _observer(self):
        from zephon.engine import mixture_check
        from zephon.engine.observe import Observer

        ws = self.pipeline.work_source
        names = list(ws.component_ids())
        weights = dict(getattr(getattr(ws, "mixture", None), "weights", {}) or {})
        progress = bool(self.pipeline._options.get("progress"))
        obs = Observer(names, weights, progress)
        obs.mixture = mixture_check.build(self.pipeline, names, obs, self._gather_counters)
        return obs

    def __iter__(self) -> Iterator[Any]:
        from zephon.arrow_memory import use_decode_pool
        from zephon.engine import metrics

        use_decode_pool()  # the inline engine decodes in this process (see arrow_memory.py)
        self.active = True
        self.engine = self._make_engine()
        self.times["engine_started"] = time.monotonic()
        self.pipeline._pending_restore = None
        self.observer = obs = self._observer()
        sink = self._sink()
        it = iter(self.engine)
        counted = metrics.now()  # when counts were last gathered (losses are said promptly)
        tuner, consumer_ns = self.tuner, 0
        try:
            while True:
                t0 = metrics.now()
                unit = next(it, None)
                if unit is None:
                    break
                t1 = metrics.now()
                obs.delivered(unit, t1 - t0)
                if self.startup is None:
                    self._first_unit()
                if sink is not None:
                    sink.maybe_emit(self.metrics_snapshot)
                if t0 - counted > 500_000_000:
                    counted = t0
                    self._gather_counters()
                yield unit
                if tuner is not None and not tuner.settled:
                    consumer_ns += metrics.now() - t1
                    choice = tuner.observe(time.monotonic(), consumer_ns, obs.units,
                                           self._counters)
                    if choice is not None and self._switch(choice):
                        it = iter(self.engine)
            self._gather_counters()
            summary = obs.ledger.summary()
            if summary is not None:  # the end of the stream: what was not delivered whole
                log.warning("%s", summary)
        finally:
            if obs.progress is not None:
                obs.progress.close()
            self.close()

    def _counters(self):
        """(operator registry, records delivered), up to date: what the tuner measures."""
        self._gather_counters()
        return self.observer.registry, int(self.observer.records.sum())

    def _switch(self, choice) -> bool:
        """Hand the stream over to the engine ``choice`` names, between two delivered units:
        the new engine resumes every lane from its state after the last unit delivered, as a
        restore from a checkpoint taken here would, so the stream goes on unchanged. False:
        the memory budget holds the current engine only, which stays."""
        try:
            self.memory = self._plan_memory(choice.runner, choice.workers)
        except ValueError as e:
            self.tuner.history.append(f"stayed: {choice.label()} would not fit ({e})")
            return False
        self._gather_counters()  # the old engine's counts, before it goes
        states = self.lane_states()
        self.engine.close()
        self.restore_states = states
        self.kind, self.workers = choice.runner, choice.workers
        log.info("zephon: switching to %s: %s", choice.label(), choice.why)
        self.engine = self._make_engine()
        return True

    def _first_unit(self) -> None:
        """Freeze the start-up breakdown: where the time to the first unit went."""
        from zephon.engine.startup import breakdown

        self._gather_counters()  # the coordinator's and workers' marks ride with their counts
        self.startup = breakdown(self.times, self.observer.registry.marks)

    def _gather_counters(self) -> None:
        obs, engine = self.observer, self.engine
        if engine is not None and hasattr(engine, "collect_metrics"):
            for delta in engine.collect_metrics():
                obs.merge(delta)
        obs.merge_local()

    def _sink(self):
        conf = self.pipeline._observability
        if not conf or conf.get("tracking") == "off" or conf.get("sink") is None:
            return None
        from zephon.observability import MetricsSink, MetricsSinkConfig

        sink = conf["sink"]
        return MetricsSink(sink if isinstance(sink, MetricsSinkConfig) else MetricsSinkConfig(**sink))

    def metrics_snapshot(self) -> dict | None:
        obs = getattr(self, "observer", None)
        if obs is None:
            return None
        engine = self.engine
        held = engine.held_by_op() if hasattr(engine, "held_by_op") else None
        if held:  # the process engine's counts arrive with its frames instead
            obs.held = held
        self._gather_counters()
        from zephon.engine.memory import tree_pss

        extra: dict[str, Any] = {"engine": self.kind, "workers": self.workers,
                                 "startup": self.startup, "priming": self.priming,
                                 "memory": self.memory.report(tree_pss()),
                                 # pids by role
                                 "processes": engine.processes() if hasattr(engine, "processes")
                                 else {}}
        if self.tuner is not None:
            extra["autotune"] = self.tuner.describe()
        if hasattr(engine, "snapshot_extra"):  # the Ray runner: its actors and their nodes
            extra.update(engine.snapshot_extra())
        return obs.snapshot(extra)

    def timing_snapshot(self, kind: str) -> Any:
        """``FetchTimingSummary`` (kind "fetch") or ``PrefetchTimingSummary`` ("prefetch"),
        None when tracking is off or nothing ran yet."""
        import hashlib

        from zephon import timing_stats

        obs = getattr(self, "observer", None)
        if obs is None or self.tracking == "off":
            return None
        if self.active:
            self._gather_counters()
        names = "->".join(op.op_name for op in self.pipeline._all_ops())
        plan_id = hashlib.sha256(names.encode()).hexdigest()[:12]
        sink = (self.pipeline._observability or {}).get("sink")
        interval = float(getattr(sink, "flush_interval_s", None)
                         or (sink or {}).get("flush_interval_s", 0.0) if sink else 0.0)
        build = timing_stats.fetch_summary if kind == "fetch" else timing_stats.prefetch_summary
        return build(obs.fetch_timing, plan_id, interval, self.tracking)

    def lane_states(self) -> dict[int, dict | None]:
        """Per owned lane: its state at the last unit delivered to the caller."""
        if self.final_states is not None:
            return self.final_states
        states = dict(self.restore_states)
        if self.engine is not None:
            states.update({k: v for k, v in self.engine.lane_states().items() if v is not None})
        return {lane: states.get(lane) for lane in self.topology.owned_lanes}

    def close(self) -> None:
        if self.engine is not None and self.final_states is None:
            self.final_states = self.lane_states()
            self.engine.close()
        self.active = False


def checkpoint_of(pipeline) -> dict:
    """The checkpoint at the delivered position (or the pending restore, or the start)."""
    from zephon.engine.checkpoint_view import view_of
    from zephon.engine.priming import prime
    from zephon.engine.topology import resolve_topology
    from zephon.state import checkpoint
    from zephon.state.gather import gather

    if pipeline._pending_restore is not None:
        return pipeline._pending_restore
    prime(pipeline)
    topo = resolve_topology(pipeline._options)
    if pipeline._runtime is None:
        states = {lane: None for lane in topo.owned_lanes}
    else:
        states = pipeline._runtime.lane_states()
    local = checkpoint.build(view_of(pipeline, topo), states)
    pipeline._checkpoint_round = getattr(pipeline, "_checkpoint_round", 0) + 1
    return gather(local, pipeline._options, topo, pipeline._checkpoint_round)
