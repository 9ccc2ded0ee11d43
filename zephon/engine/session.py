"""A live run of a pipeline: resolves options and topology, picks the engine, owns its lifetime."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from zephon.engine.chunk_source import engine_source
from zephon.engine.lane_plan import LanePlan
from zephon.engine.plan import compile_plan
from zephon.engine.topology import resolve_topology

log = logging.getLogger("zephon")

def engine_kind(pipeline) -> tuple[str, int]:
    """("inline" | "process" | "threads" | "ray", workers) chosen from options and environment
    (for "ray": ``ray_workers``, 0 when the cluster's CPUs decide)."""
    opts = pipeline._options
    runner, _ = opts.resolve("runner")
    if runner == "ray":
        return "ray", int(opts.get("ray_workers") or 0)
    workers, _ = opts.resolve("num_workers")
    if runner == "inline":
        return "inline", 0
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
        # where each token-aware dataset's figure came from, and how long it took
        self.priming = prime(pipeline, pending.get("token_ratios") if pending else None)
        self.topology = resolve_topology(opts)
        store = opts.get("aggregate_store")
        if store and self.topology.world_size > 1:  # unreachable: say so now, not at a checkpoint
            from zephon.engine.store_gather import client

            client(str(store), float(opts.get("aggregate_timeout_s")))
        self.plan = compile_plan(pipeline._all_ops())
        self.tracking = (pipeline._observability or {}).get("tracking", "off")
        self.plan.worker_ops[0].timing = self.tracking == "nodes"  # fetch: per-shard timing
        fetch_batch = pipeline._fetch_kw.get("max_batch")
        self.micro = int(fetch_batch or opts.get("micro_batch_size"))
        self.kind, self.workers = engine_kind(pipeline)
        self.active = False
        self.engine = None
        self.final_states: dict[int, dict | None] | None = None
        self.restore_states: dict[int, dict | None] = {}
        if pipeline._pending_restore is not None:
            from zephon.engine.checkpoint import lane_states

            self.restore_states = lane_states(pipeline._pending_restore)

    def lane_plan(self) -> LanePlan:
        topo = self.topology
        restore = {lane: st for lane, st in self.restore_states.items()
                   if st is not None and lane in topo.owned_lanes}
        extra = {"prefetch": self.pipeline._prefetch} if self.pipeline._prefetch else {}
        source = engine_source(self.pipeline.work_source,
                               self.pipeline._options.get("mixture_config"), restore)
        return LanePlan(self.plan, source, topo.owned_lanes,
                        topo.canonical_replicas, self.micro, restore or None, extra)

    def _make_engine(self):
        if self.kind == "ray":  # imports Ray: only when chosen
            from zephon.engine.ray_runner import RayEngine

            return RayEngine(self.lane_plan(), self.pipeline._options)
        if self.kind == "inline" or self.workers == 0:
            from zephon.engine.inline import InlineEngine

            return InlineEngine(self.lane_plan())
        from zephon.engine.process import ProcessEngine

        return ProcessEngine(self.lane_plan(), self.workers, self.pipeline._options,
                             runner=self.kind)

    def _observer(self):
        from zephon.engine.observe import Observer

        ws = self.pipeline.work_source
        names = list(ws.component_ids())
        weights = dict(getattr(getattr(ws, "mixture", None), "weights", {}) or {})
        progress = bool(self.pipeline._options.get("progress"))
        return Observer(names, weights, progress)

    def __iter__(self) -> Iterator[Any]:
        from zephon.arrow_memory import use_decode_pool
        from zephon.engine import metrics

        use_decode_pool()  # the inline engine decodes in this process (see arrow_memory.py)
        self.active = True
        self.engine = self._make_engine()
        self.pipeline._pending_restore = None
        self.observer = obs = self._observer()
        sink = self._sink()
        it = iter(self.engine)
        counted = metrics.now()  # when counts were last gathered (losses are said promptly)
        try:
            while True:
                t0 = metrics.now()
                unit = next(it, None)
                if unit is None:
                    break
                obs.delivered(unit, metrics.now() - t0)
                if sink is not None:
                    sink.maybe_emit(self.metrics_snapshot)
                if t0 - counted > 500_000_000:
                    counted = t0
                    self._gather_counters()
                yield unit
            self._gather_counters()
            summary = obs.ledger.summary()
            if summary is not None:  # the end of the stream: what was not delivered whole
                log.warning("%s", summary)
        finally:
            if obs.progress is not None:
                obs.progress.close()
            self.close()

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
        extra = {"engine": self.kind, "workers": self.workers, "priming": self.priming}
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
    from zephon.engine import checkpoint
    from zephon.engine.gather import gather
    from zephon.engine.priming import prime
    from zephon.engine.topology import resolve_topology

    if pipeline._pending_restore is not None:
        return pipeline._pending_restore
    prime(pipeline)
    topo = resolve_topology(pipeline._options)
    if pipeline._runtime is None:
        states = {lane: None for lane in topo.owned_lanes}
    else:
        states = pipeline._runtime.lane_states()
    local = checkpoint.build(pipeline, topo.canonical_replicas, states)
    pipeline._checkpoint_round = getattr(pipeline, "_checkpoint_round", 0) + 1
    return gather(local, pipeline._options, topo, pipeline._checkpoint_round)
