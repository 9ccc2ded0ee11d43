"""The coordinator: hands out work by sequence number, reorders results, runs the serial stage.

It is a process of its own (a child of the training process; the workers are its children):
the serial operators (shuffle, mixture, packing, batch) are stateful Python and would otherwise
compete with the training loop for the GIL, and the training process then does nothing but map
finished frames. Finished units reach it through an output ring of ``prefetch_batches``
slots (``output_ring.py``); each descriptor says (slot, length), and the frame carries every
unit's lane state.

Order is ``LaneScheduler``'s (``engine/scheduler.py``): the coordinator is its transport over
worker processes, as the threads runner is over a thread pool. Up to ``workers x slots`` blocks
are outstanding.

A block goes to the workers as one task per row-group owner (``ownership.py``: each Parquet
row group is decoded by one worker only); the parts' results are put back in pointer order
before the lane sees them. The coordinator pulls the lanes' pointer blocks a window ahead of
issuing them (``pull_ahead``, ``seen``; the lanes share the window) and tells the owner of every
row group met there for the first time, so that it decodes the row group while the ones before
it are still being read. A block whose parts failed is redone unsplit and in pointer order, so
that the error raised is the one inline would raise (the first failing record).

Faults. A dead worker's unfinished blocks are issued again (all their parts), with the same
pointers; ``max_worker_retries`` deaths on one block end the run with an error naming it.
A killed fork server (the helper that forks replacement workers) is replaced at the next start,
and the workers it forked run on (``spawning.py``).
An exception in an operator travels, packed with its traceback, to the point of the stream where
the inline engine would have raised it, and from there to the training loop.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection as mpc

from zephon.arrow_memory import arrow_without_pandas, use_decode_pool
from zephon.engine.config import EngineConfig, mp_context
from zephon.engine.failures import Failure, RemoteError, pack_exception
from zephon.engine.lanes.lane import held_by_op, round_robin_states
from zephon.engine.observe import metrics
from zephon.engine.process import cleanup, heap, shm, spawning
from zephon.engine.process.output_ring import OutputRing
from zephon.engine.process.ownership import Ownership, merge, same_columns
from zephon.engine.process.worker import WorkerPool
from zephon.engine.scheduler import LaneScheduler
from zephon.errors import WorkerCrashedError
from zephon.ops.base import OpContext, StageInfo

log = logging.getLogger("zephon.engine")

_PENDING = object()  # a part whose result has not arrived


# -- the coordinator process -------------------------------------------------------------------


class _Stop(BaseException):
    """The training process closed the engine (or died): unwind, whatever is running."""


class WorkerScheduler(LaneScheduler):
    """``LaneScheduler`` over worker processes: the coordinator's transport, and the whole
    engine where the training process coordinates its workers itself (``DirectEngine``)."""

    def __init__(self, lane_plan, cfg: EngineConfig, ops_blob: bytes, parent: tuple[int, float],
                 fork_first: bool, environment: dict | None = None) -> None:
        # a micro-batch goes out as one task per row-group owner (ownership.py), and the owners
        # of row groups a window ahead hear of them first, to decode them meanwhile. The window
        # is shared by the lanes (they advance in turn), so that what is decoded ahead stays
        # about a window's worth of blocks however many lanes this rank owns
        ownership = Ownership.for_plan(lane_plan, cfg.workers)
        share = -(-cfg.window // max(1, len(lane_plan.lanes)))
        super().__init__(lane_plan, cfg.window, cfg.deterministic,
                         pull_ahead=share if ownership is not None else 0)
        self.ownership = ownership
        self.cfg = cfg
        self.attempts: dict[int, int] = {}
        spec = {"prefix": cfg.prefix, "ops": ops_blob, "slots": cfg.slots,
                "any_order": self.ownership is not None and self.ownership.any_order,
                "slot_bytes": cfg.slot_bytes, "parent": parent,
                "log_level": cfg.log_level, "workers": cfg.workers, "environment": environment}
        ctx = mp_context(cfg.start_method, *spawning.preload("zephon.engine.process.worker"))
        self.pool = WorkerPool(ctx, spec,
                               cfg.workers, cfg.max_retries, on_result=self._part_done,
                               on_failure=self._failed, on_lost=self._lost,
                               fork_first=fork_first)
        self.task_of: dict[int, tuple[int, int]] = {}  # task -> (seq, part)
        self.parts: dict[int, list] = {}  # seq -> its parts' results (_PENDING until in)
        self.whole: set[int] = set()  # seqs going out unsplit and in order after a failure
        self.next_task = 0

    def wait(self) -> None:
        self.pool.wait([], timeout=1.0)
        self._fill()

    # transport
    def free_capacity(self) -> bool:
        return self.pool.has_free()

    def seen(self, block) -> None:
        if self.ownership is None or self.ownership.whole_only:
            return
        for worker, groups in self.ownership.claim(block).items():
            self.pool.hint(worker, groups)

    def send(self, seq: int, block) -> None:
        if self.ownership is None or self.ownership.whole_only or seq in self.whole:
            parts = [(None, block)]
        else:
            parts = self.ownership.split(block)
        # parts are sorted here anyway (merge): their workers need not restore pointer order; a
        # block sent whole comes back in order, and merge has nothing to do
        ordered = len(parts) == 1 or not self.ownership.any_order
        self.parts[seq] = [_PENDING] * len(parts)
        tasks = []
        for i in range(len(parts)):  # all registered first: a death while sending redoes all
            self.task_of[self.next_task] = (seq, i)
            tasks.append(self.next_task)
            self.next_task += 1
        for task, (worker, part) in zip(tasks, parts):
            self.pool.submit(task, part, worker, ordered)

    def _part_done(self, task: int, result) -> None:
        """A part's result; the micro-batch is complete once its last part is in."""
        entry = self.task_of.pop(task, None)
        if entry is None:  # a part of an attempt given up (a worker died on another part)
            return
        seq, i = entry
        got = self.parts[seq]
        got[i] = result
        if any(r is _PENDING for r in got):
            return
        del self.parts[seq]
        failed = next((r for r in got if isinstance(r, Failure)), None)
        mixed = failed is None and len(got) > 1 and not same_columns(got)
        if (failed is not None or mixed) and self.ownership is not None \
                and seq not in self.whole:
            # parts (or records in shard order) may fail on another record first than the whole
            # micro-batch would; parts of datasets with different columns would join them in
            # another order. Redo it whole and in order: exactly what inline does
            if mixed:  # and from now on, send every micro-batch whole
                self.ownership.whole_only = True
            self.whole.add(seq)
            self.resend([seq])
            return
        self.whole.discard(seq)
        self.complete(seq, failed or merge(got))

    def _forget(self, seq: int) -> None:
        """Give up an attempt at ``seq``: results of its other parts will be ignored."""
        self.parts.pop(seq, None)
        for task in [t for t, (s, _) in self.task_of.items() if s == seq]:
            del self.task_of[task]


    def _failed(self, task: int, packed) -> None:
        self._part_done(task, Failure(RemoteError(packed)))

    def _lost(self, tasks: list[int], why: str) -> None:
        seqs = sorted({self.task_of[t][0] for t in tasks if t in self.task_of})
        for seq in seqs:
            self._forget(seq)
            n = self.attempts[seq] = self.attempts.get(seq, 0) + 1
            if n <= self.cfg.max_retries:
                self.resend([seq])
                continue
            block = self.blocks[seq]
            m = block.meta
            err = WorkerCrashedError(
                f"a worker died ({why}) {n} times on the micro-batch of lane "
                f"{int(m['lane_id'][0])}, chunk {int(m['chunk_id'][0])} starting at sample "
                f"{block.ids()[0]} ({len(block)} records); max_worker_retries="
                f"{self.cfg.max_retries}")
            self.complete(seq, Failure(RemoteError(pack_exception(err))))


class Coordinator(WorkerScheduler):
    """The coordinator process: its workers' scheduler, the serial stage, and the output ring
    that carries finished units to the training process."""

    def __init__(self, conn, lane_plan, cfg: EngineConfig, ops_blob: bytes) -> None:
        super().__init__(lane_plan, cfg, ops_blob, cleanup.identity(),
                         fork_first=cfg.start_method == "forkserver"
                         and "fork" in multiprocessing.get_all_start_methods())
        self.conn = conn
        self.out = OutputRing(conn, cfg, self.wait)
        ctx = OpContext(StageInfo(1, "serial", 0), worker_id=0, runner="process")
        for op in lane_plan.plan.serial_ops:
            op.setup(ctx)
        self.runners = [lane_plan.runner(lane, self.prepared(lane), ctx) for lane in self.lanes]
        self.out.held_fn = lambda: held_by_op(self.runners)

    def wait(self) -> None:
        self.out.flush()  # never sit on finished units while waiting for more
        if self.pool.wait([self.conn], timeout=1.0):
            self.from_parent()
        self._fill()  # also while the output ring is full: keep the workers busy up to the window

    def from_parent(self) -> None:
        try:
            while self.conn.poll():
                msg = self.conn.recv()
                if msg[0] != "free":
                    raise _Stop
                self.out.release(msg[1])
        except (EOFError, OSError):
            raise _Stop from None

    def run(self) -> None:
        try:
            for lane, unit, state in self.out.paced(round_robin_states(self.runners)):
                self.out.add(lane, unit, state)
            self.out.flush()
            self.conn.send(("end", metrics.LOCAL.take_delta()))  # counts since the last frame
        except _Stop:
            raise
        except BaseException as e:  # the stream ends here, exactly where inline would raise
            self.out.flush()
            self.conn.send(("error", e.packed if isinstance(e, RemoteError)
                            else pack_exception(e)))
        self.pool.close()  # nothing more to compute: give the CPUs back now


def linger(conn) -> None:
    """Stay until the training process closes the engine: it may not yet have mapped every
    segment named in a descriptor, and our exit unlinks what is still named."""
    try:
        while True:
            mpc.wait([conn])
            msg = conn.recv()
            if msg[0] != "free":
                return
    except (EOFError, OSError):
        return


def coordinator_main(conn, lane_plan_blob: bytes, ops_blob: bytes, cfg: EngineConfig) -> None:
    coord: Coordinator | None = None

    def on_exit() -> None:
        try:
            if coord is not None:
                coord.pool.kill()
            shm.unlink_created()
            shm.sweep(cfg.prefix)
        finally:
            spawning.remove_temp_dir(cfg.tempdir)  # ours to remove when the parent is gone

    spawning.adopt_environment(cfg.environment)  # before storage is opened or workers start
    spawning.use_temp_dir(cfg.tempdir)
    spawning.name_process("zephon-coord")
    spawning.adopt_orphans()  # workers whose fork server is killed stay ours (spawning.py)
    leave = cleanup.init_child("coordinator", on_exit, cfg.log_level)
    log.debug("coordinator started: %d workers, start method %s", cfg.workers, cfg.start_method)
    try:
        try:
            use_decode_pool()  # before the workers fork from us: they inherit it
            heap.return_freed_memory()  # and this too
            lane_plan = spawning.user_blob_loads(lane_plan_blob, "pipeline")
            arrow_without_pandas()  # once the user's functions are in (and inherited too)
            coord = Coordinator(conn, lane_plan, cfg, ops_blob)
            metrics.mark("coordinator_ready")
        finally:  # the watcher is a thread: only once the first workers are forked
            cleanup.watch(cfg.parent, leave)
        coord.run()
        linger(conn)
    except _Stop:
        pass
    except BaseException as e:  # start-up failed (no shared memory, operator setup, ...)
        packed = e.packed if isinstance(e, RemoteError) else pack_exception(e)
        try:
            conn.send(("error", packed))
            linger(conn)
        except OSError:
            pass
    finally:
        if coord is not None:
            coord.pool.close()
        shm.unlink_created()
        shm.sweep(cfg.prefix)
