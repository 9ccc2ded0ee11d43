"""Cold start: what the first batch waits for, made visible, and the part that can overlap.

``metrics_snapshot()["startup"]`` breaks the time from ``iter(pipeline)`` to the first unit
into its parts, each as seconds since the iteration started: priming (token estimation), the
engine's start (for worker processes: the fork server's interpreter and imports, then the
coordinator), the workers' start, their operators' setup (a tokenizer's load) and readiness
(their shared-memory slots reserved), the first worker result (the first fill), and the first
unit handed to the caller. Marks made in the coordinator and the workers travel with their
operator counters (``metrics.mark``); every process reads the same monotonic clock.

The fork server costs most of a process engine's start: a fresh interpreter importing numpy,
Arrow and zephon (0.5-2 s on 2 busy cores), paid before the coordinator can fork from it. The
training process cannot fork the coordinator itself (numpy and Arrow start threads at import,
and forking a threaded process can deadlock), so the server is started as soon as the session
knows it will need one, before priming, and imports while the training process primes.
"""

from __future__ import annotations

import time

# mark name -> (key in the breakdown, 0: the first process to get there, 1: the last)
_MARKS = (("coordinator_ready", "coordinator_ready_s", 0),
          ("worker_start", "workers_started_s", 1),
          ("worker_setup", "workers_setup_s", 1),
          ("worker_ready", "workers_ready_s", 1),
          ("first_result", "first_result_s", 0))


def warm_forkserver(requested_method) -> None:
    """Start the fork server now (it imports in the background) if the engine will use it."""
    from multiprocessing import forkserver

    from zephon.engine.config import mp_context, start_method

    try:
        if start_method(requested_method) != "forkserver":
            return
        mp_context("forkserver", "zephon.engine.process.coordinator")  # its preload, as at start
        forkserver.ensure_running()
    except Exception:  # the engine's own start reports a real problem with a clear error
        pass


def breakdown(times: dict[str, float], marks: dict[str, list[float]]) -> dict[str, float]:
    """Seconds since ``times["start"]`` of each start-up step seen (see the module docstring)."""
    t0 = times["start"]
    out = {"priming_s": times["primed"] - times["primed_from"],
           "engine_start_s": times["engine_started"] - t0}
    for name, key, which in _MARKS:
        if name in marks:
            out[key] = marks[name][which] - t0
    out["first_batch_s"] = time.monotonic() - t0
    return out
