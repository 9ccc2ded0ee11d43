"""Worker processes: the worker stage (fetch, decode, map, tokenize) on pointer blocks.

Each worker owns ``ZEPHON_SHM_SLOTS`` slots of shared memory (``shm.SlotPool``). With each task
the coordinator assigns one of them: it writes the task's pointer block into the slot and sends
``(task, slot, length)``; the worker copies the pointers out, runs the operators, writes the
result frame into the same slot and answers ``(task, slot, length)``. A worker is never given
more tasks than it has slots, so a pool whose slots all hold results the coordinator has not
taken stops the coordinator from handing it work (backpressure), and the pipes carry nothing but
descriptors.

``WorkerPool`` is the coordinator's side: it starts the workers, queues each task on the worker
that owns its row groups (``ownership.py``) or else on the least loaded one, sends it as soon as
that worker has a free slot, reads results in place (zero-copy views that hand the slot back
when the serial stage drops them; past ``slots - 1`` held slots per worker a result is copied
out instead, so every worker can always take new work), and replaces a worker that dies,
reporting the tasks it held so the scheduler can redo exactly those; its queued tasks wait for
the replacement.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection as mpc
import os
import signal
from collections import deque

import numpy as np

from zephon.arrow_memory import arrow_without_pandas, use_decode_pool
from zephon.engine.autotune import tokenizer_threads
from zephon.engine.failures import RemoteError, pack_exception
from zephon.engine.lanes.lane import apply_ops
from zephon.engine.observe import metrics
from zephon.engine.process import cleanup, heap, shm, spawning
from zephon.engine.process.frames import (
    FrameWriter,
    frame_size,
    private_copy,
    read_frame,
    write_frame,
)
from zephon.errors import EngineError, WorkerCrashedError
from zephon.io.ahead import read_ahead
from zephon.io.formats.jsonl_reader import release_parsed_pages
from zephon.ops.base import OpContext, StageInfo
from zephon.ops.fetch import FetchOp

log = logging.getLogger("zephon.engine")


# -- the worker process ------------------------------------------------------------------------


def worker_main(conn, spec: dict) -> None:
    index = spec["index"]
    metrics.mark("worker_start")  # start-up marks ship with the first result's counters

    def on_exit() -> None:
        shm.unlink_created()
        if not cleanup.alive(spec["parent"]):  # orphaned: nobody else will sweep
            shm.sweep(spec["prefix"])

    spawning.adopt_environment(spec.get("environment"))  # a fork server's may be stale
    spawning.name_process("zephon-worker")
    shm.created.clear()  # a forked worker inherits the coordinator's list: not ours to unlink
    cleanup.watch(spec["parent"], cleanup.init_child(f"worker {index}", on_exit,
                                                     spec["log_level"]))
    # the tokenizers' Rust pool starts a thread per core in every process: the workers share
    # out the cores they leave the training loop instead (one each when there is a worker per
    # core), so a small pool still tokenizes on every core and a large one does not
    # oversubscribe the machine N-fold
    threads = tokenizer_threads(spec["workers"])
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true" if threads > 1 else "false")
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    # likewise: no guesses of the shard readers; only the row groups the coordinator says this
    # worker owns are decoded ahead, on one thread (``_serve``, "decode_ahead")
    read_ahead.disable()
    release_parsed_pages()  # and no shard pages kept mapped once parsed
    try:
        use_decode_pool()
        heap.return_freed_memory()  # a worker may come from the fork server, not the coordinator
        ops = spawning.user_blob_loads(spec["ops"], "operators")
        arrow_without_pandas()  # after the user's functions: see arrow_memory.py
        ctx = OpContext(StageInfo(0, "workers", 0), worker_id=index, runner="process",
                        num_workers=spec["workers"])
        for op in ops:
            op.setup(ctx)
        metrics.mark("worker_setup")
        # whether results may come back in shard order: the coordinator sorts them (ownership.py)
        any_order = bool(spec.get("any_order"))
        pool = shm.SlotPool(spec["prefix"], f"w{index}.{spec['generation']}_", spec["slots"],
                            spec["slot_bytes"])
    except BaseException as e:
        conn.send(("fatal", pack_exception(e)))
        on_exit()
        return
    metrics.mark("worker_ready")
    conn.send(("hello", pool.names, os.getpid()))
    try:
        _serve(conn, ops, pool, any_order)
    finally:
        on_exit()


def _serve(conn, ops, pool: shm.SlotPool, any_order: bool = False) -> None:
    fetch = ops[0] if ops and isinstance(ops[0], FetchOp) else None
    # the stage for a part of a micro-batch that the coordinator puts in pointer order itself
    # (``any_order``): fetch leaves the records grouped by shard, one copy of each fewer
    loose = [fetch.in_shard_order(), *ops[1:]] if fetch is not None and any_order else ops
    while True:
        try:
            msg = conn.recv()
        except EOFError:  # the coordinator is gone
            return
        if msg[0] == "stop":
            return
        if msg[0] == "decode_ahead":  # row groups this worker owns, to decode before asked
            if fetch is not None:
                fetch.decode_ahead(msg[1])
            continue
        _, seq, slot, length, inline, ordered = msg
        stage = ops if ordered else loose
        # a task on this slot proves the coordinator has mapped its current segment
        shm.created.discard(pool.names[slot])
        root = private_copy(inline if inline is not None else pool.maps[slot], length)
        ((_, task, _),) = read_frame(root)
        try:
            reply = _result(pool, seq, slot, apply_ops(stage, task))
        except Exception as e:
            reply = ("fail", seq, slot, pack_exception(e))
        conn.send((*reply, metrics.LOCAL.take_delta()))  # operator counters ride along


def _result(pool: shm.SlotPool, seq: int, slot: int, block) -> tuple:
    if block is None:
        return ("done", seq, slot, 0, None)
    grown = None
    writer = FrameWriter(pool.view(slot))
    if not writer.add("block", block):
        grown = pool.grow(slot, frame_size("block", block))
        writer = FrameWriter(pool.view(slot))
        if not writer.add("block", block):
            raise EngineError("a grown slot cannot hold the block it was grown for")
    return ("done", seq, slot, writer.finish(), grown)


# -- the coordinator's side --------------------------------------------------------------------


class _Worker:
    __slots__ = ("index", "child", "conn", "views", "free", "inflight", "ready", "queue",
                 "watch_sentinel")

    def __init__(self, index: int, child: spawning.Child, conn) -> None:
        self.index = index
        self.child = child
        self.conn = conn
        # False once the fork server that would report its exit has died: then only EOF on
        # its pipe (it holds the only other end) says that it ended
        self.watch_sentinel = True
        self.views = shm.SlotViews()
        self.free: list[int] = []
        self.inflight: dict[int, int] = {}  # slot -> task
        self.ready = False
        self.queue: deque = deque()  # (task, block, ordered) waiting for one of its slots


class WorkerPool:
    """Starts, feeds and replaces the workers. Events go to three callbacks:
    ``on_result(seq, block | None)``, ``on_failure(seq, packed exception)`` and
    ``on_lost(seqs, why)`` for the tasks of a worker that died."""

    def __init__(self, mpctx, spec: dict, count: int, max_retries: int, *, on_result,
                 on_failure, on_lost, fork_first: bool = False) -> None:
        self.mpctx = mpctx
        # Forking is safe while this process has a single thread, and skips starting a fork
        # server (a fresh interpreter importing numpy and Arrow: most of the start-up time).
        # Replacements come later, when threads may exist, and go through ``mpctx``.
        self.fork = multiprocessing.get_context("fork") if fork_first else None
        self.spec = spec
        self.max_retries = max_retries
        self.on_result, self.on_failure, self.on_lost = on_result, on_failure, on_lost
        self.early_deaths = [0] * count
        self.starts = [0] * count  # per worker index: names its shared memory uniquely
        self.buffers = shm.PrivateBuffers(keep=count * spec["slots"])
        # results stay in their slot, as views, until the serial stage drops them; at most
        # slots - 1 per worker, so that every worker always has a slot to take new work
        self.leases = shm.Leases()
        self.hold_limit = spec["slots"] - 1
        self.workers: list[_Worker] = []
        self.closed = False
        self.results_seen = False
        for i in range(count):
            self.workers.append(self._start(i))

    def _start(self, index: int) -> _Worker:
        def make():
            here, there = self.mpctx.Pipe()
            spec = dict(self.spec, index=index, generation=self.starts[index])
            self.starts[index] += 1
            forkable = self.fork is not None and cleanup.single_threaded()
            proc = (self.fork if forkable else self.mpctx).Process(
                target=worker_main, args=(there, spec), daemon=True, name=f"zephon-worker-{index}")
            return proc, here, there

        child, here = spawning.start_retrying(make, f"worker {index}")
        return _Worker(index, child, here)

    def has_free(self) -> bool:
        """Can one more task go out now: some worker has a slot that no queued task awaits."""
        self._reclaim()
        self._pump_all()
        return any(w.ready and len(w.free) > len(w.queue) for w in self.workers)

    def _reclaim(self) -> None:
        for w, slot in self.leases.returned():
            if self.workers[w.index] is w:  # a dead worker's slots are not coming back
                w.free.append(slot)

    def submit(self, task: int, block, worker: int | None = None, ordered: bool = False) -> None:
        """Queue ``block`` as ``task`` on ``worker`` (its owner), or on the least loaded one;
        it goes out as soon as that worker has a free slot. ``ordered``: its records must come
        back in pointer order, even where the workers may return them in shard order."""
        if worker is None:
            w = max((w for w in self.workers if w.ready), key=lambda w: len(w.free) - len(w.queue),
                    default=self.workers[0])
        else:
            w = self.workers[worker]
        w.queue.append((task, block, ordered))
        self._pump(w)

    def hint(self, worker: int, groups: list) -> None:
        """Tell ``worker`` that it owns these row groups, (dataset, shard, row group) each: it
        starts decoding them on its read-ahead thread. Only a hint: a worker that is not ready
        or has died misses it, and its reads decode what they need."""
        w = self.workers[worker]
        if not w.ready:
            return
        try:
            w.conn.send(("decode_ahead", groups))
        except OSError:  # it died: its sentinel reports that
            pass

    def _pump_all(self) -> None:
        for w in list(self.workers):
            self._pump(w)

    def _pump(self, w: _Worker) -> None:
        while w.ready and w.free and w.queue and self.workers[w.index] is w:
            self._send(w, *w.queue.popleft())

    def _send(self, w: _Worker, task: int, block, ordered: bool) -> None:
        slot = w.free.pop()
        w.inflight[slot] = task
        writer = FrameWriter(memoryview(w.views.map(slot)))
        if writer.add("block", block):
            msg = ("task", task, slot, writer.finish(), None, ordered)
        else:  # a slot configured smaller than a pointer block: the pointers ride the pipe
            frame = write_frame([("block", block, None)])
            msg = ("task", task, slot, len(frame), frame.tobytes(), ordered)
        try:
            w.conn.send(msg)
        except OSError:  # it died before we noticed: this task is redone with its others
            self._died(w)

    def wait(self, extra: list, timeout: float) -> list:
        """Handle what the workers sent or did; returns the ``extra`` objects that are ready."""
        by_conn = {w.conn: w for w in self.workers}
        by_sentinel = {w.child.sentinel: w for w in self.workers if w.watch_sentinel}
        ready = mpc.wait([*by_conn, *by_sentinel, *extra], timeout)
        for r in ready:
            if r in by_conn:
                self._drain(by_conn[r])
            elif r in by_sentinel:
                self._exited(by_sentinel[r])
        self._reclaim()
        self._pump_all()  # slots freed by these results take the queued tasks
        return [r for r in ready if any(r is e for e in extra)]

    def _drain(self, w: _Worker) -> None:
        try:
            while w.conn.poll():
                self._message(w, w.conn.recv())
        except (EOFError, OSError):
            self._died(w)

    def _message(self, w: _Worker, msg: tuple) -> None:
        tag = msg[0]
        if tag in ("done", "fail"):
            metrics.LOCAL.merge(msg[-1])  # the worker's operator counters
            msg = msg[:-1]
        if tag == "done":
            if not self.results_seen:  # the first fill: a start-up mark
                self.results_seen = True
                metrics.mark("first_result")
            _, seq, slot, length, grown = msg
            if grown:
                w.views.attach(slot, grown)
            del w.inflight[slot]
            self._reclaim()
            result = None
            if not length:
                w.free.append(slot)
            elif sum(k[0] is w for k in self.leases.out) < self.hold_limit:
                root = np.frombuffer(w.views.map(slot), dtype=np.uint8, count=length)
                ((_, result, _),) = read_frame(root)
                self.leases.lend(root, (w, slot))
            else:  # keep slots circulating: this worker's others are all still in use
                ((_, result, _),) = read_frame(self.buffers.copy(w.views.map(slot), length))
                w.free.append(slot)
            self.on_result(seq, result)
        elif tag == "fail":
            _, seq, slot, packed = msg
            self._free(w, slot)
            self.on_failure(seq, packed)
        elif tag == "hello":
            w.views.attach_all(msg[1])
            w.free = list(range(len(msg[1])))
            w.ready = True
            self.early_deaths[w.index] = 0
            log.debug("worker %d (pid %d) ready", w.index, msg[2])
        elif tag == "fatal":  # the operators' setup failed: retrying will not help
            raise RemoteError(msg[1])

    def _exited(self, w: _Worker) -> None:
        """Its sentinel fired: it ended, or (started through the fork server) that server did."""
        if w.child.via_server:
            self._drain(w)  # what it sent; EOF there if it is really gone
            if self.workers[w.index] is not w:
                return
            if w.child.running():
                w.watch_sentinel = False
                log.warning("zephon: the fork server that started worker %d (pid %d) died; the "
                            "worker runs on, and a new server starts the next replacement",
                            w.index, w.child.pid)
                return
        self._died(w)

    @staticmethod
    def _free(w: _Worker, slot: int) -> None:
        del w.inflight[slot]
        w.free.append(slot)

    def _died(self, w: _Worker) -> None:
        if self.closed or self.workers[w.index] is not w:
            return  # already handled (EOF and sentinel both fire)
        try:  # what it sent before dying is valid: its slots are still mapped here
            while w.conn.poll():
                self._message(w, w.conn.recv())
        except (EOFError, OSError):
            pass
        if not w.child.wait(1.0):  # closed its pipe but hangs: make sure
            w.child.signal(signal.SIGKILL)
            w.child.wait(5.0)
        w.conn.close()
        why = w.child.exit_description()
        lost = sorted(w.inflight.values())
        if not w.ready:
            self.early_deaths[w.index] += 1
            if self.early_deaths[w.index] > self.max_retries:
                raise RemoteError(pack_exception(WorkerCrashedError(
                    f"worker {w.index} died during start-up ({why}) "
                    f"{self.early_deaths[w.index]} times in a row")))
        log.warning("zephon: worker %d (pid %s) %s; starting a replacement, redoing %d "
                    "micro-batch(es)", w.index, w.child.pid, why, len(lost))
        self.workers[w.index] = fresh = self._start(w.index)
        fresh.queue = w.queue  # tasks not sent yet wait for the replacement
        if lost:
            self.on_lost(lost, why)

    def close(self, timeout: float = 2.0) -> None:
        if self.closed:
            return
        self.closed = True
        for w in self.workers:
            try:
                w.conn.send(("stop",))
            except (OSError, ValueError):
                pass
        spawning.end_all([w.child for w in self.workers], timeout)
        for w in self.workers:
            w.conn.close()

    def kill(self) -> None:
        """Emergency stop (signal handler, parent gone): no waiting, no messages."""
        for w in list(self.workers):
            try:
                os.kill(w.child.pid, signal.SIGKILL)
            except (OSError, TypeError):
                pass
