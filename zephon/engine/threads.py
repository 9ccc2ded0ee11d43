"""The threads runner: the worker stage on a thread pool in the training process.

No processes, no shared memory, no pickling: right when the operators release the GIL (Arrow
reads, the Cython kernels, tokenizers) or on free-threaded Python. Ordering and the serial stage
are the coordinator's (``LaneScheduler``), run on the calling thread, so the stream is the same
as inline and as with processes. An operator's exception is re-raised with its own traceback.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterator

from zephon.engine.config import EngineConfig
from zephon.engine.failures import Failure
from zephon.engine.lanes.lane import apply_ops, delivered_units, round_robin_states
from zephon.engine.lanes.lane_plan import LanePlan
from zephon.engine.scheduler import LaneScheduler
from zephon.ops.base import OpContext, StageInfo


class ThreadScheduler(LaneScheduler):
    def __init__(self, lane_plan: LanePlan, cfg: EngineConfig, pool: cf.Executor) -> None:
        super().__init__(lane_plan, cfg.window, cfg.deterministic)
        self.ops = lane_plan.plan.worker_ops
        self.pool = pool
        self.futures: dict[cf.Future, int] = {}

    def free_capacity(self) -> bool:
        return len(self.futures) < self.window

    def send(self, seq: int, block) -> None:
        self.futures[self.pool.submit(apply_ops, self.ops, block)] = seq

    def wait(self) -> None:
        done, _ = cf.wait(list(self.futures), return_when=cf.FIRST_COMPLETED)
        for f in done:
            seq = self.futures.pop(f)
            error = f.exception()
            self.complete(seq, f.result() if error is None else Failure(error))


class ThreadsEngine:
    kind = "threads"  # what the session reports as running

    def __init__(self, lane_plan: LanePlan, cfg: EngineConfig) -> None:
        self.config = cfg
        self.last_states: dict[int, dict | None] = {}
        ctx = OpContext(StageInfo(0, "threads", 0), worker_id=0, runner="threads",
                        num_workers=cfg.workers)
        for op in lane_plan.plan.ops:  # one process: one setup, shared by the threads
            op.setup(ctx)
        self.pool = cf.ThreadPoolExecutor(cfg.workers, thread_name_prefix="zephon-worker")
        self.scheduler = ThreadScheduler(lane_plan, cfg, self.pool)
        self.runners = [lane_plan.runner(lane, self.scheduler.prepared(lane), ctx)
                        for lane in lane_plan.lanes]

    def __iter__(self) -> Iterator:
        return delivered_units(round_robin_states(self.runners), self.last_states)

    def lane_states(self) -> dict[int, dict | None]:
        return dict(self.last_states)

    def pids(self) -> list[int]:
        return []

    def close(self) -> None:
        # running blocks finish in the background; queued ones are dropped
        self.pool.shutdown(wait=False, cancel_futures=True)
