"""The Ray runner: the stateless stage in Ray actors anywhere in a cluster.

For a training node whose own CPUs cannot keep up with its accelerators (heavy tokenization,
decoding, filtering with a model): fetch and the stateless operators run in actors on whatever
nodes Ray places them (``ray_pool.py``, ``ray_actor.py``), while the ordering, the serial
operators (shuffle, mixture, packing, batch) and the checkpoint state stay in the training
process, as with the threads runner. ``RayScheduler`` is a ``LaneScheduler`` transport: blocks
are numbered, results are put back in lane order and the work of a dead actor is issued again by
the same code as for worker processes and threads, so the stream is the inline stream and a
checkpoint taken here restores under any other runner, and the other way round.

Ray is imported only here (and in the modules this one imports), and this module only when
``runner="ray"`` is chosen. If Ray is not connected yet, the engine connects
(``ray_address``, else Ray's own rule) and disconnects when it closes; a connection the user made
is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import cloudpickle

from zephon.engine.failures import Failure, unpack_exception
from zephon.engine.lanes.lane import delivered_units, held_by_op, round_robin_states
from zephon.engine.lanes.lane_plan import LanePlan
from zephon.engine.ray.config import RayConfig
from zephon.engine.scheduler import LaneScheduler
from zephon.errors import WorkerCrashedError
from zephon.ops.base import OpContext, StageInfo

log = logging.getLogger("zephon.engine")

try:
    import ray
except ImportError as e:  # the optional extra is missing
    raise ImportError("options(runner='ray') needs Ray: pip install 'zephon[ray]'") from e


class RayScheduler(LaneScheduler):
    """Ordering, redo and backpressure of ``LaneScheduler`` over an ``ActorPool``."""

    def __init__(self, lane_plan: LanePlan, config: RayConfig, workers: int) -> None:
        super().__init__(lane_plan, workers * config.inflight, config.deterministic)
        from zephon.engine.ray.pool import ActorPool

        self.config = config
        self.attempts: dict[int, int] = {}
        ops_blob = cloudpickle.dumps(lane_plan.plan.worker_ops)
        self.pool = ActorPool(config, ops_blob, workers, on_result=self.complete,
                              on_failure=self._failed, on_lost=self._lost)

    def free_capacity(self) -> bool:
        return self.pool.has_free()

    def send(self, seq: int, block) -> None:
        self.pool.submit(seq, block)

    def wait(self) -> None:
        while not self.pool.wait(timeout=1.0):
            pass

    def _failed(self, seq: int, packed: tuple[bytes, str], where: dict | None) -> None:
        blob, text = packed
        if where:  # the remote traceback says where it was raised
            text = (f"in Ray actor pid {where['pid']} on node {where['ip']} "
                    f"({where['node_id'][:12]}):\n{text}")
        self.complete(seq, Failure(unpack_exception((blob, text))))

    def _lost(self, seqs: list[int], why: str) -> None:
        for seq in seqs:
            n = self.attempts[seq] = self.attempts.get(seq, 0) + 1
            if n <= self.config.max_retries:
                self.resend([seq])
                continue
            block = self.blocks.get(seq)
            if block is None:  # its lane is done with it already
                continue
            m = block.meta
            self.complete(seq, Failure(WorkerCrashedError(
                f"a Ray actor died ({why}) {n} times on the micro-batch of lane "
                f"{int(m['lane_id'][0])}, chunk {int(m['chunk_id'][0])} starting at sample "
                f"{block.ids()[0]} ({len(block)} records); max_worker_retries="
                f"{self.config.max_retries}")))


def connect(config: RayConfig) -> bool:
    """Connect to Ray unless connected; True when this call connected (and so disconnects)."""
    if ray.is_initialized():
        return False
    kw = {"address": config.address} if config.address else {}
    ray.init(**kw, logging_level=logging.WARNING, log_to_driver=True)
    return True


def actor_count(config: RayConfig) -> int:
    if config.workers is not None:
        return config.workers
    cpus = float(ray.cluster_resources().get("CPU", 1))
    per = config.cpus_per_actor
    return max(1, int(cpus // per) if per > 0 else int(cpus))


class RayEngine:
    """Yields the units of the inline engine; the stateless stage runs in Ray actors."""

    kind = "ray"  # what the session reports as running

    def __init__(self, lane_plan: LanePlan, options) -> None:
        self.lane_plan = lane_plan
        self.config = RayConfig.from_options(options)
        self.last_states: dict[int, dict | None] = {}
        self.scheduler: RayScheduler | None = None
        self.closed = False
        self.owns_connection = connect(self.config)
        try:
            self.workers = actor_count(self.config)
            ctx = OpContext(StageInfo(1, "serial", 0), worker_id=0, runner="ray",
                            num_workers=self.workers)
            for op in lane_plan.plan.serial_ops:
                op.setup(ctx)
            self.scheduler = RayScheduler(lane_plan, self.config, self.workers)
            self.runners = [lane_plan.runner(lane, self.scheduler.prepared(lane), ctx)
                            for lane in lane_plan.lanes]
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator:
        return delivered_units(round_robin_states(self.runners), self.last_states)

    def lane_states(self) -> dict[int, dict | None]:
        return dict(self.last_states)

    def held_by_op(self) -> dict[str, int]:
        return held_by_op(self.runners)

    def pids(self) -> list[int]:
        return []  # the actors are Ray's processes, on any node

    def actors(self) -> list[dict]:
        return self.scheduler.pool.snapshot() if self.scheduler is not None else []

    def snapshot_extra(self) -> dict:
        """What ``metrics_snapshot()`` adds for this runner: the actors, their nodes, their
        busy time."""
        actors = self.actors()
        pool = self.scheduler.pool if self.scheduler is not None else None
        return {"workers": self.workers, "ray": {
            "actors": actors, "nodes": sorted({a["node_id"] for a in actors if a["node_id"]}),
            "replaced": pool.replaced if pool is not None else 0,
            "busy_s": sum(a["busy_s"] for a in actors)}}

    def describe(self) -> list[str]:
        """Lines for ``explain()`` while the pipeline runs."""
        lines = []
        for a in self.actors():
            where = (f"node {a['node_id'][:12]} ({a['ip']}) pid {a['pid']}" if a["ready"]
                     else "starting")
            lines.append(f"  ray actor {a['index']}.{a['generation']}: {where}, "
                         f"{a['blocks']} blocks, busy {a['busy_s']:.2f}s "
                         f"(cpu {a['cpu_s']:.2f}s), "
                         f"{a['inflight']} in flight")
        return lines

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.runners = []
        if self.scheduler is not None:
            self.scheduler.pool.close()
        if self.owns_connection and ray.is_initialized():
            ray.shutdown()
