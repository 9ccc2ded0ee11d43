"""The process engine as the training process sees it.

A coordinator process (``coordinator.py``) with ``workers`` worker processes (``worker.py``)
does all the work; this process only maps finished frames out of the output ring and wraps
them as ``SampleBatch`` views (numpy/Arrow/torch see the shared memory itself, no copy).
``engine/factory.py`` chooses it, and runs the pipeline inline instead in a process that may
not have children (a daemonic one, such as a torch DataLoader worker).

Zero copy and slot reuse. A frame's views all hang off one uint8 ``root`` array; a weak
reference on it tells us when the user has dropped every batch of the frame, and only then is
the slot handed back to the coordinator. So that a user who keeps batches (``list(pipeline)``)
cannot starve the coordinator of slots, at most ``min(prefetch // 2, prefetch - 1)`` frames are
held as views at once; further frames are copied out and their slot is returned immediately.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import tempfile
import uuid
import weakref
from collections.abc import Iterator

import cloudpickle
import numpy as np
import psutil

from zephon.engine.config import EngineConfig, mp_context
from zephon.engine.failures import RemoteError, unpack_exception
from zephon.engine.lanes.lane import delivered_units, held_by_op, round_robin_states
from zephon.engine.lanes.lane_plan import LanePlan
from zephon.engine.process import cleanup, shm, spawning
from zephon.engine.process.coordinator import coordinator_main
from zephon.engine.process.frames import private_copy, read_frame
from zephon.engine.process.units import units_from_parts
from zephon.errors import EngineError


class ProcessEngine:
    kind = "process"  # what the session reports as running

    def __init__(self, lane_plan: LanePlan, workers: int, options) -> None:
        self.lane_plan = lane_plan
        self.last_states: dict[int, dict | None] = {}
        prefix = f"zephon_{os.getpid()}_{uuid.uuid4().hex[:8]}_"
        self.config = EngineConfig.from_options(options, workers, prefix=prefix,
                                                parent=cleanup.identity(),
                                                environment=spawning.environment())
        if options.resolve("log_level")[1] != "default":  # else the application's setting
            cleanup.setup_logging(self.config.log_level)
        self._client = CoordinatorClient(lane_plan, self.config)

    def __iter__(self) -> Iterator:
        return delivered_units(self._client.items(), self.last_states)

    def collect_metrics(self) -> list[dict]:
        """Operator counters shipped by the coordinator and workers since the last call."""
        out, self._client.metric_deltas = self._client.metric_deltas, []
        return out

    def lane_states(self) -> dict[int, dict | None]:
        return dict(self.last_states)

    def pids(self) -> list[int]:
        """Processes this engine started (coordinator first), for diagnostics and tests."""
        return self._client.pids()

    def processes(self) -> dict[str, list[int]]:
        """The pids of this engine's processes by role (see ``CoordinatorClient.processes``)."""
        return self._client.processes()

    def close(self) -> None:
        self._client.close()


class DirectEngine:
    """The process engine with the training process as its own coordinator.

    Where the serial stage only cuts records into batches (every serial operator's cost is
    ``"slice"``), a coordinator process adds nothing but a copy: each batch was copied from the
    workers' slots into its output ring and read back here, which cost more CPU in this process
    (reading frames) than slicing the batches does. Here the workers' results are mapped
    straight from their slots and sliced into batches in this process, by the same
    ``WorkerScheduler`` and lane runners the coordinator runs, so the stream is the same. The
    serial stage runs when the loop asks for a batch; the workers work ahead up to their window
    meanwhile.
    """

    kind = "process"

    def __init__(self, lane_plan: LanePlan, workers: int, options) -> None:
        from zephon.engine.process.coordinator import WorkerScheduler
        from zephon.ops.base import OpContext, StageInfo

        self.lane_plan = lane_plan
        self.last_states: dict[int, dict | None] = {}
        self.owner = os.getpid()
        self.closed = False
        prefix = f"zephon_{os.getpid()}_{uuid.uuid4().hex[:8]}_"
        self.config = EngineConfig.from_options(options, workers, prefix=prefix,
                                                parent=cleanup.identity())
        if options.resolve("log_level")[1] != "default":  # else the application's setting
            cleanup.setup_logging(self.config.log_level)
        cleanup.register(self)
        try:
            self.scheduler = WorkerScheduler(
                lane_plan, self.config, cloudpickle.dumps(lane_plan.plan.worker_ops),
                self.config.parent, fork_first=False, environment=spawning.environment())
        except BaseException:
            self.close(fast=True)
            raise
        self._finalizer = weakref.finalize(self, _close_direct, self.scheduler.pool, prefix,
                                           self.owner)
        ctx = OpContext(StageInfo(1, "serial", 0), worker_id=0, runner="process")
        for op in lane_plan.plan.serial_ops:
            op.setup(ctx)
        self.runners = [lane_plan.runner(lane, self.scheduler.prepared(lane), ctx)
                        for lane in lane_plan.lanes]

    def __iter__(self) -> Iterator:
        try:
            yield from delivered_units(round_robin_states(self.runners), self.last_states)
        except RemoteError as e:  # a worker's exception, raised where inline would raise it
            error = unpack_exception(e.packed)
        else:
            return
        raise error from error.__cause__  # the worker's traceback (RemoteTraceback)

    def lane_states(self) -> dict[int, dict | None]:
        return dict(self.last_states)

    def held_by_op(self) -> dict[str, int]:
        return held_by_op(self.runners)

    def pids(self) -> list[int]:
        return [w.child.pid for w in self.scheduler.pool.workers]

    def processes(self) -> dict[str, list[int]]:
        """Pids by role, as ``CoordinatorClient.processes`` names them (no coordinator: this
        process is it)."""
        workers = [w.child.pid for w in self.scheduler.pool.workers if w.child.running()]
        launcher = spawning.fork_server_pid()
        return {"coordinator": [], "workers": workers, "fork_server": [],
                "launcher": [launcher] if launcher is not None else []}

    def close(self, fast: bool = False) -> None:
        if self.closed or os.getpid() != self.owner:
            return
        self.closed = True
        cleanup.unregister(self)
        scheduler = getattr(self, "scheduler", None)
        if scheduler is not None:
            self._finalizer.detach()
            _close_direct(scheduler.pool, self.config.prefix, self.owner,
                          0.0 if fast else 2.0)
        else:
            shm.sweep(self.config.prefix)


def _close_direct(pool, prefix: str, owner: int, grace: float = 1.0) -> None:
    if os.getpid() != owner:
        return
    try:
        pool.close(grace)
    finally:
        shm.sweep(prefix)  # what a killed worker left named


def can_start_processes() -> bool:
    """Whether this process may start the coordinator: not daemonic (a DataLoader worker may
    not have children), and with POSIX shared memory."""
    return not multiprocessing.current_process().daemon and shm.available()


class CoordinatorClient:
    """Starts the coordinator process and turns its frames into units."""

    def __init__(self, lane_plan: LanePlan, cfg: EngineConfig) -> None:
        self.prefix = cfg.prefix
        self.owner = os.getpid()  # a forked copy of this process must not stop our coordinator
        self.closed = False
        self.slots = shm.SlotViews()
        self.leases = shm.Leases()
        self.copied: list[int] = []  # slots whose frame was copied out: free at once
        self.metric_deltas: list[dict] = []  # operator counters from coordinator and workers
        self.hold_limit = min(cfg.prefetch // 2, cfg.prefetch - 1)
        # prefetch_batches=0: the one output slot goes back only when the loop asks for the
        # unit after the frame's (the coordinator computes a unit per slot: output_ring.py)
        self.on_demand = cfg.prefetch == 0
        self.deferred: list[int] = []
        # spawning.use_temp_dir; a short name: a fork server's socket path must fit 107 bytes
        self.tempdir = tempfile.mkdtemp(prefix="zephon-")
        cfg = dataclasses.replace(cfg, tempdir=self.tempdir)
        ctx = mp_context(cfg.start_method, "zephon.engine.process.coordinator")
        blobs = (cloudpickle.dumps(lane_plan), cloudpickle.dumps(lane_plan.plan.worker_ops))

        def make():
            here, there = ctx.Pipe()
            proc = ctx.Process(target=coordinator_main, args=(there, *blobs, cfg),
                               name="zephon-coordinator", daemon=False)
            return proc, here, there

        try:
            self.child, self.conn = spawning.start_retrying(make, "zephon coordinator process")
        except BaseException:
            spawning.remove_temp_dir(self.tempdir)
            raise
        cleanup.register(self)
        # an abandoned engine (iterator dropped without close) still releases everything
        self._finalizer = weakref.finalize(self, _close_quietly, self.child, self.conn,
                                           self.prefix, self.tempdir, self.owner)

    def pids(self) -> list[int]:
        try:
            p = psutil.Process(self.child.pid)
            return [p.pid] + [c.pid for c in p.children(recursive=True)]
        except psutil.Error:
            return []

    def processes(self) -> dict[str, list[int]]:
        """Pids by role: ``coordinator``; ``workers``; ``fork_server``, the coordinator's helper
        that forks replacement workers (started with the first replacement); ``launcher``, this
        process's fork server that started the coordinator (shared by its pipelines)."""
        roles: dict[str, list[int]] = {"coordinator": [], "workers": [], "fork_server": [],
                                       "launcher": []}
        try:
            coordinator = psutil.Process(self.child.pid)
            tree = [coordinator, *coordinator.children(recursive=True)]
        except psutil.Error:  # it has ended
            tree = []
        for p in tree:
            try:
                role = "coordinator" if p is tree[0] else _ROLES.get(p.name())
                if role is not None and p.status() != psutil.STATUS_ZOMBIE:
                    roles[role].append(p.pid)
            except psutil.Error:  # ended meanwhile
                pass
        launcher = spawning.fork_server_pid() if self.child.via_server else None
        if launcher is not None:
            roles["launcher"].append(launcher)
        return roles

    def items(self) -> Iterator[tuple[int, object, object]]:
        while True:
            msg = self._recv()
            tag = msg[0]
            if tag == "frame":
                self.metric_deltas.append(msg[4])
                yield from self._units(*msg[1:4])
            elif tag == "ready":
                self.slots.attach_all(msg[1])
            elif tag == "end":
                self.metric_deltas.append(msg[1])
                return
            elif tag == "error":
                raise unpack_exception(msg[1])

    def _units(self, slot: int, length: int, grown: str | None) -> list:
        if grown:
            self.slots.attach(slot, grown)
        root = np.frombuffer(self.slots.map(slot), dtype=np.uint8, count=length)
        self._send_frees()
        if len(self.leases) >= self.hold_limit:
            root = private_copy(root, length)
            (self.deferred if self.on_demand else self.copied).append(slot)
        else:
            self.leases.lend(root, slot)
        units = units_from_parts(read_frame(root))
        del root  # from here on only the units' views keep the slot
        self._send_frees()  # a frame of records holds no views: its slot is free already
        return units

    def _send_frees(self) -> None:
        slots = self.leases.returned() + self.copied
        self.copied = []
        if slots:
            try:
                self.conn.send(("free", slots))
            except OSError:  # the coordinator is gone; _recv reports it
                pass

    def _recv(self):
        self.copied += self.deferred  # the loop asks for more: the coordinator may compute it
        self.deferred = []
        while True:
            self._send_frees()  # a batch dropped meanwhile may be what the coordinator waits for
            if self.conn.poll(0.05):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    pass
            elif self.child.running():
                continue
            self.child.wait(1.0)
            raise EngineError(f"the zephon coordinator process ended unexpectedly (pid "
                              f"{self.child.pid}, {self.child.exit_description()})")

    def close(self, fast: bool = False) -> None:
        if self.closed or os.getpid() != self.owner:
            return
        self.closed = True
        cleanup.unregister(self)
        self._finalizer.detach()
        _close(self.child, self.conn, self.prefix, self.tempdir, grace=0.0 if fast else 5.0)
        self.slots = shm.SlotViews()  # mappings live on in the views the user still holds


_ROLES = {"zephon-worker": "workers", spawning.FORK_SERVER_NAME: "fork_server"}


def _close(child: spawning.Child, conn, prefix: str, tempdir: str, grace: float) -> None:
    try:
        conn.send(("stop",))
    except (OSError, ValueError):
        pass
    try:
        spawning.end_all([child], grace)  # SIGTERM: its handler kills the workers and unlinks
        conn.close()
    finally:
        shm.sweep(prefix)  # what a killed coordinator or worker left named
        spawning.remove_temp_dir(tempdir)


def _close_quietly(child: spawning.Child, conn, prefix: str, tempdir: str, owner: int) -> None:
    if os.getpid() != owner:
        return
    try:
        _close(child, conn, prefix, tempdir, grace=1.0)
    except Exception:  # interpreter shutdown: do what can be done
        pass
