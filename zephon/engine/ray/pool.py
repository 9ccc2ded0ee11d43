"""The driver's side of the Ray actors: starts them, feeds them, replaces the ones that die.

Each actor first answers ``where`` (its node, its pid, whether its operators could be set up);
only then does it get work, at most ``inflight`` blocks at a time (backpressure: a slow actor
is not buried in blocks while another one idles, and results wait in the object store for no
longer than that). Blocks go to the ready actor with the fewest in flight.

A task that fails for a reason of Ray's (the actor was killed, its node left the cluster, its
result was lost with the node) ends that actor: it is killed for certain, a replacement with the
same index is started wherever Ray finds room, and every block the old one held is reported lost
(``on_lost``), for the scheduler to issue again. An operator's exception is not a death: it comes
back as a result (``on_failure``). An actor whose operators cannot be set up ends the run at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import ray
import ray.exceptions as rex

from zephon.engine.failures import pack_exception, unpack_exception
from zephon.engine.observe import metrics
from zephon.engine.ray.actor import StageActor
from zephon.engine.ray.config import RayConfig
from zephon.errors import WorkerCrashedError

log = logging.getLogger("zephon.engine")

STALL_WARNING_S = 60.0  # no actor placed for this long: say which resources are missing


@dataclass(eq=False)
class _Actor:
    index: int
    generation: int
    handle: object
    ready_ref: object | None  # the pending ``where`` call; None once answered
    where: dict | None = None
    inflight: dict = field(default_factory=dict)  # ObjectRef -> seq
    busy_ns: int = 0
    cpu_ns: int = 0
    blocks: int = 0
    started: float = field(default_factory=time.monotonic)


class ActorPool:
    def __init__(self, config: RayConfig, ops_blob: bytes, count: int, *, on_result,
                 on_failure, on_lost) -> None:
        self.config = config
        self.count = count
        self.on_result, self.on_failure, self.on_lost = on_result, on_failure, on_lost
        options = dict(config.actor_options, max_restarts=0, max_task_retries=0)
        if config.runtime_env:
            options["runtime_env"] = config.runtime_env
        self.remote_cls = ray.remote(StageActor).options(**options)
        self.ops_ref = ray.put(ops_blob)  # one copy in the object store for every actor
        self.early_deaths = [0] * count
        self.replaced = 0
        self.closed = False
        self.last_progress = time.monotonic()
        self.warned_stall = False
        self.actors = [self._start(i, 0) for i in range(count)]

    def _start(self, index: int, generation: int) -> _Actor:
        handle = self.remote_cls.remote(self.ops_ref, index, self.count,
                                        self.config.threads_per_actor())
        return _Actor(index, generation, handle, handle.where.remote())

    # -- work --------------------------------------------------------------------------------

    def has_free(self) -> bool:
        limit = self.config.inflight
        return any(a.where is not None and len(a.inflight) < limit for a in self.actors)

    def submit(self, seq: int, block) -> None:
        limit = self.config.inflight
        ready = [a for a in self.actors if a.where is not None and len(a.inflight) < limit]
        a = min(ready, key=lambda a: (len(a.inflight), a.index))
        a.inflight[a.handle.run.remote(block)] = seq

    def wait(self, timeout: float) -> bool:
        """Handle whatever has arrived (waiting up to ``timeout`` for the first); True when
        something was handled."""
        owner = {}
        for a in self.actors:
            if a.ready_ref is not None:
                owner[a.ready_ref] = a
            for ref in a.inflight:
                owner[ref] = a
        if not owner:
            return False
        refs = list(owner)
        ready, rest = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready and rest:  # everything else already finished comes along
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        for ref in ready:
            a = owner[ref]
            if self.actors[a.index] is not a:  # died while handling an earlier ref
                continue
            if ref is a.ready_ref:
                self._started(a)
            else:
                self._finished(a, ref)
        if ready:
            self.last_progress = time.monotonic()
        else:
            self._check_stall()
        return bool(ready)

    def _started(self, a: _Actor) -> None:
        try:
            where = ray.get(a.ready_ref)
        except rex.RayError as e:
            self._died(a, e)
            return
        a.ready_ref = None
        if where["setup_error"] is not None:  # the operators cannot be set up: nor elsewhere
            raise unpack_exception(where["setup_error"])
        a.where = where
        self.early_deaths[a.index] = 0
        log.debug("ray actor %d.%d ready on node %s (%s, pid %d)", a.index, a.generation,
                  where["node_id"][:12], where["ip"], where["pid"])

    def _finished(self, a: _Actor, ref) -> None:
        try:
            status, value, delta, busy, cpu = ray.get(ref)
        except rex.RayTaskError as e:  # raised around the operators (e.g. unpickling the task)
            seq = a.inflight.pop(ref)
            self.on_failure(seq, pack_exception(e.as_instanceof_cause()), a.where)
            return
        except rex.RayError as e:  # the actor, its node or the result is gone
            self._died(a, e)
            return
        seq = a.inflight.pop(ref)
        metrics.LOCAL.merge(delta)  # the actor's operator counters and losses
        a.busy_ns += busy
        a.cpu_ns += cpu
        a.blocks += 1
        if status == "done":
            self.on_result(seq, value)
        elif status == "fail":
            self.on_failure(seq, value, a.where)
        else:  # "fatal": set-up failed (``where`` says so first; kept for safety)
            raise unpack_exception(value)

    def _died(self, a: _Actor, error: BaseException) -> None:
        if self.closed or self.actors[a.index] is not a:
            return
        why = _first_line(error)
        try:
            ray.kill(a.handle, no_restart=True)  # it may only look dead: make sure
        except Exception:  # already gone
            pass
        lost = sorted(a.inflight.values())
        if a.where is None:
            self.early_deaths[a.index] += 1
            if self.early_deaths[a.index] > self.config.max_retries:
                raise WorkerCrashedError(
                    f"Ray actor {a.index} died before it was ready {self.early_deaths[a.index]} "
                    f"times in a row (max_worker_retries={self.config.max_retries}): {why}")
        where = a.where or {}
        log.warning("zephon: Ray actor %d (pid %s on %s) died: %s; starting a replacement, "
                    "redoing %d micro-batch(es)", a.index, where.get("pid", "?"),
                    where.get("ip", "an unknown node"), why, len(lost))
        self.actors[a.index] = self._start(a.index, a.generation + 1)
        self.replaced += 1
        if lost:
            self.on_lost(lost, why)

    def _check_stall(self) -> None:
        if self.warned_stall or any(a.where is not None for a in self.actors):
            return
        waited = time.monotonic() - self.last_progress
        if waited < STALL_WARNING_S:
            return
        self.warned_stall = True
        log.warning("zephon: no Ray actor has started in %.0f s; each asks for %s and the "
                    "cluster has %s available (ray_resources, ray_workers)", waited,
                    self.config.actor_options, ray.available_resources())

    # -- reporting and shutdown ----------------------------------------------------------------

    def snapshot(self) -> list[dict]:
        """One entry per actor slot: where the current actor runs and what it has done."""
        out = []
        for a in self.actors:
            w = a.where or {}
            out.append({"index": a.index, "generation": a.generation,
                        "ready": a.where is not None, "node_id": w.get("node_id"),
                        "ip": w.get("ip"), "host": w.get("host"), "pid": w.get("pid"),
                        "inflight": len(a.inflight), "blocks": a.blocks,
                        "busy_s": a.busy_ns / 1e9, "cpu_s": a.cpu_ns / 1e9})
        return out

    def handles(self) -> list:
        return [a.handle for a in self.actors]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for a in self.actors:
            try:
                ray.kill(a.handle, no_restart=True)
            except Exception:  # Ray already shut down, or the actor is gone
                pass


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]
