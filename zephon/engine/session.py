"""A live run of a pipeline: resolves options and topology, primes, asks the factory for an
engine and owns its lifetime.

It runs a ``PipelineSpec`` (``spec.py``) and writes nothing back to the pipeline: what a run
learns is its own (``spec`` after priming and memory sizing, the lane states); the pipeline
asks for it. ``on_started`` tells the pipeline that its pending checkpoint has been taken up.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from zephon.engine import autotune
from zephon.engine.factory import engine_kind, make_engine
from zephon.engine.lanes.chunk_source import engine_source
from zephon.engine.lanes.lane_plan import LanePlan
from zephon.engine.plan.stages import compile_plan
from zephon.engine.plan.topology import resolve_topology
from zephon.engine.spec import PipelineSpec

log = logging.getLogger("zephon")

class Session:
    def __init__(self, spec: PipelineSpec, on_started: Callable[[], None] | None = None) -> None:
        from zephon.engine.priming.token_ratios import prime

        self.spec = spec
        self.on_started = on_started
        opts = spec.options
        pending = spec.pending_restore
        # start-up, in time.monotonic(): the clock the coordinator's and workers' marks use
        self.times: dict[str, float] = {"start": time.monotonic()}
        self.topology = resolve_topology(opts)
        store = opts.get("aggregate_store")
        if store and self.topology.world_size > 1:  # unreachable: say so now, not at a checkpoint
            from zephon.state.store_gather import client

            client(str(store), float(opts.get("aggregate_timeout_s")))
        self.plan = compile_plan(spec.all_ops)
        self.tracking = spec.tracking
        self.micro = spec.micro_batch_size
        self.kind, self.workers = engine_kind(opts)
        self.tuner = None
        if self.kind == "auto":
            fixed = "process" if opts.resolve("runner")[0] == "process" else None
            self.tuner = autotune.AutoTuner(self.plan.worker_ops, fixed)
            choice = self.tuner.first()
            self.kind, self.workers = choice.runner, choice.workers
        self.options = opts
        # refuses what cannot fit
        self.memory, self.options, self.spec, self.plan = self._memory_for(self.kind,
                                                                            self.workers)
        self.race = None  # a candidate engine racing the running one (``_move``)
        self._race_target: tuple | None = None
        self.race_limit_s = autotune.RACE_S
        if self.kind == "process":  # the fork server imports while this process primes
            from zephon.engine.observe.startup import warm_forkserver

            warm_forkserver(opts.get("start_method"))
        self.times["primed_from"] = time.monotonic()
        # where each token-aware dataset's figure came from, and how long it took; the run reads
        # a primed copy of the work source
        source, self.priming = prime(spec, pending.get("token_ratios") if pending else None)
        self.spec = self.spec.with_work_source(source)
        self.times["primed"] = time.monotonic()
        self.startup: dict[str, float] | None = None
        self.active = False
        self.engine = None
        self.final_states: dict[int, dict | None] | None = None
        self.restore_states: dict[int, dict | None] = {}
        if pending is not None:
            from zephon.engine.plan.checkpoint_view import view_of
            from zephon.state.checkpoint import lane_states

            self.restore_states = lane_states(pending, view_of(self.spec, self.topology))

    def _memory_for(self, kind: str, workers: int):
        """(memory plan, options, spec, compiled plan) for an engine of ``kind``: slots and
        caches sized to ``memory_budget`` (when set); the fetch operator's datasets carry the
        row-group cache size to the processes that decode. Raises ValueError when it cannot
        fit; sets nothing."""
        from zephon.engine.plan.memory import SizedOptions, plan_memory
        from zephon.io.options import StoreOptions, resolve_store

        base, spec, compiled = self.spec.options, self.spec, self.plan
        io = base.explicit.get("io_options")
        store = StoreOptions.coerce(io)
        rg_fixed = ("limit_bytes" in store.parquet_rg_cache._given
                    or "rg_cache_bytes" in store.cache._given or store.parquet_rg_cache.enabled
                    is False or bool(os.environ.get("ZEPHON_RG_CACHE_BYTES", "").strip()))
        plan = plan_memory(base, compiled.worker_ops, compiled.serial_ops, kind, workers,
                           self.micro, resolve_store(io).rg_cache_bytes, rg_fixed)
        options = SizedOptions(base, plan.sized) if plan.sized else base
        rg = plan.sized.get("rg_cache_bytes")
        if rg is not None:  # the run's fetch reads through datasets with that cache size
            limit = {"parquet_rg_cache": {"limit_bytes": int(rg)}}
            fetch = spec.fetch
            spec = spec.with_fetch(fetch.with_datasets(
                [ds.with_store_options(StoreOptions.coerce(
                    getattr(ds, "_store_options", None)).merged(limit))
                 if hasattr(ds, "with_store_options") else ds for ds in fetch.datasets]))
            compiled = compile_plan(spec.all_ops)
        return plan, options, spec, compiled

    def _make_engine(self):
        engine = self._engine_factory(self.kind, self.workers, self.options, self.spec,
                                      self.plan, self.restore_states)()
        # the factory runs a process engine inline where no process may start (a daemonic
        # process): report what runs
        if engine.kind != self.kind:
            self.kind, self.workers = engine.kind, 0
        return engine

    def _observer(self):
        from zephon.engine.observe import mixture_check
        from zephon.engine.observe.observer import Observer

        ws = self.spec.work_source
        names = list(ws.component_ids())
        weights = dict(getattr(getattr(ws, "mixture", None), "weights", {}) or {})
        progress = bool(self.spec.options.get("progress"))
        obs = Observer(names, weights, progress)
        obs.mixture = mixture_check.build(self.spec, names, obs, self._gather_counters)
        return obs

    def __iter__(self) -> Iterator[Any]:
        from zephon.arrow_memory import use_decode_pool
        from zephon.engine.observe import metrics

        use_decode_pool()  # the inline engine decodes in this process (see arrow_memory.py)
        self.active = True
        self.engine = self._make_engine()
        self.times["engine_started"] = time.monotonic()
        if self.on_started is not None:
            self.on_started()
        self.observer = obs = self._observer()
        sink = self._sink()
        it = iter(self.engine)
        counted = metrics.now()  # when counts were last gathered (losses are said promptly)
        tuner, consumer_ns, wait_ns = self.tuner, 0, 0
        try:
            while True:
                t0 = metrics.now()
                unit = next(it, None)
                if unit is None:
                    break
                t1 = metrics.now()
                if self.race is not None:  # a unit the candidate need not hand over
                    self.race.delivered()
                obs.delivered(unit, t1 - t0)
                if self.startup is None:
                    self._first_unit()
                if sink is not None:
                    sink.maybe_emit(self.metrics_snapshot)
                if t0 - counted > 500_000_000:
                    counted = t0
                    self._gather_counters()
                yield unit
                if self.race is not None:
                    taken = self._race_step()
                    if taken is not None:
                        it = taken
                if tuner is not None and not tuner.settled:
                    consumer_ns += metrics.now() - t1
                    wait_ns += t1 - t0
                    choice = tuner.observe(time.monotonic(), consumer_ns, wait_ns, obs.units,
                                           self._counters)
                    if choice is not None:
                        self._move(choice)
            self._gather_counters(final=True)
            summary = obs.ledger.summary(self._passes())
            if summary is not None:  # the end of the stream: what was not delivered whole
                log.warning("%s", summary)
        finally:
            if obs.progress is not None:
                obs.progress.close()
            self.close()

    def _passes(self) -> dict[int, float]:
        """Records drawn (delivered + counted as lost) per dataset over its records, where
        the work source tells its datasets' sizes."""
        from zephon.engine.observe.mixture_check import dataset_size

        obs, out = self.observer, {}
        lost: dict[int, int] = {}
        for (_, _, d), (recs, _) in obs.ledger.losses.counts.items():
            lost[d] = lost.get(d, 0) + recs
        for d in lost:
            size = dataset_size(self.spec.work_source, d)
            if size and 0 <= d < len(obs.records):
                out[d] = (int(obs.records[d]) + lost[d]) / size
        return out

    def _counters(self):
        """(operator registry, records delivered), up to date: what the tuner measures."""
        self._gather_counters()
        return self.observer.registry, int(self.observer.records.sum())

    def _move(self, choice) -> None:
        """Go over to the engine ``choice`` names: it races the running engine from the lanes'
        states after the last unit delivered and takes over once it is ahead
        (``handover.EngineRace``); the stream goes on unchanged either way. The memory budget
        may hold the current engine only, which stays."""
        from zephon.engine.handover import EngineRace

        tuner = self.tuner
        try:
            memory, options, spec, plan = self._memory_for(choice.runner, choice.workers)
        except ValueError as e:
            tuner.concluded(False, f"would not fit ({e})")
            return
        states = self.lane_states()
        make = self._engine_factory(choice.runner, choice.workers, options, spec, plan, states)
        # a process engine is made here (its coordinator starts at once and the user's
        # operators are pickled while this thread alone touches them); an inline one re-derives
        # what the lanes held, which takes a while: on the race's thread
        engine = make() if choice.runner != "inline" else None
        self.race = EngineRace(make, self.race_limit_s, engine)
        self._race_target = (choice, states, memory, options, spec, plan)
        log.info("zephon: starting %s beside %s: %s", choice.label(), self.kind, choice.why)

    def _race_step(self):
        """After each unit the running engine delivered during a race: the candidate's
        iterator when it has taken over, else None."""
        race = self.race
        taken = race.take()
        if taken is None:
            if race.lost:
                self.race = None
                race.drop()
                self.tuner.concluded(False, race.why_lost())
            return None
        engine, it = taken
        choice, states, memory, options, spec, plan = self._race_target
        self._gather_counters()  # the old engine's counts, before it goes
        self.engine.close()
        self.race = self._race_target = None
        self.engine, self.restore_states = engine, states
        self.kind, self.workers = engine.kind, (choice.workers if engine.kind != "inline" else 0)
        self.memory, self.options, self.spec, self.plan = memory, options, spec, plan
        self.tuner.concluded(True, f"took over after {race.behind} units")
        self.tuner.restart_window()
        log.info("zephon: %s took over: %s", choice.label(), choice.why)
        return it

    def _engine_factory(self, kind: str, workers: int, options, spec, plan, states):
        def make():
            restore = {lane: st for lane, st in states.items()
                       if st is not None and lane in self.topology.owned_lanes}
            extra = {"prefetch": dict(spec.prefetch)} if spec.prefetch else {}
            source = engine_source(spec.work_source, spec.options.get("mixture_config"),
                                   restore)
            lane_plan = LanePlan(plan, source, self.topology.owned_lanes,
                                 self.topology.canonical_replicas, self.micro, restore or None,
                                 extra)
            return make_engine(kind, workers, lane_plan,
                               spec.options if kind == "ray" else options)
        return make

    def _first_unit(self) -> None:
        """Freeze the start-up breakdown: where the time to the first unit went."""
        from zephon.engine.observe.startup import breakdown

        self._gather_counters()  # the coordinator's and workers' marks ride with their counts
        self.startup = breakdown(self.times, self.observer.registry.marks)

    def _gather_counters(self, final: bool = False) -> None:
        obs, engine = self.observer, self.engine
        if engine is not None and hasattr(engine, "collect_metrics"):
            for delta in engine.collect_metrics():
                obs.merge(delta)
        obs.merge_local()
        options = self.spec.options
        obs.ledger.check_filtered(int(obs.records.sum()), options.get("filter_warn_ratio"),
                                  options.get("filter_raise_ratio"), final)

    def _sink(self):
        sink = self.spec.sink
        if self.spec.tracking == "off" or sink is None:
            return None
        from zephon.observability import MetricsSink, MetricsSinkConfig

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
        from zephon.engine.plan.memory import tree_pss

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
        names = "->".join(op.op_name for op in self.spec.all_ops)
        plan_id = hashlib.sha256(names.encode()).hexdigest()[:12]
        sink = self.spec.sink
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
        if self.race is not None:
            race, self.race = self.race, None
            race.drop()
            if self.tuner is not None:
                self.tuner.concluded(False, "the stream was closed first")
        if self.engine is not None and self.final_states is None:
            self.final_states = self.lane_states()
            self.engine.close()
        self.active = False


def checkpoint_of(spec: PipelineSpec, runtime: Session | None,
                  gather_round: int) -> tuple[dict, Any]:
    """(the checkpoint at the delivered position of ``runtime``, or at the start; the work
    source it was taken with, primed). ``gather_round`` numbers the collective checkpoints a
    multi-rank run takes, so ranks gather the same one."""
    from zephon.engine.plan.checkpoint_view import view_of
    from zephon.engine.priming.token_ratios import prime
    from zephon.state import checkpoint
    from zephon.state.gather import gather

    source, _ = prime(spec)
    spec = spec.with_work_source(source)
    topo = resolve_topology(spec.options)
    if runtime is None:
        states = {lane: None for lane in topo.owned_lanes}
    else:
        states = runtime.lane_states()
    local = checkpoint.build(view_of(spec, topo), states)
    return gather(local, spec.options, topo, gather_round), source
