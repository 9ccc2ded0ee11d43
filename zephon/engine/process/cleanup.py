"""Releasing what an engine holds, on every way out of every process.

Training process: live engines are registered here. ``atexit`` closes them (our handler is
registered after multiprocessing's, so it runs first: otherwise multiprocessing would wait for
the non-daemonic coordinator forever); a ``weakref.finalize`` on each engine closes it when an
abandoned iterator is collected; SIGTERM, when nobody else handles it, closes them before the
process dies. Ctrl-C needs nothing special: ``KeyboardInterrupt`` unwinds through the engine's
``finally``. SIGKILL cannot be caught, which is why the children also watch their parent.

Coordinator and workers (``init_child``): SIGINT is ignored, because a terminal Ctrl-C reaches
the whole process group and the training process alone decides what happens next (it closes the
engine, which stops them in order). SIGTERM and the death of the parent (a watcher thread checks
the parent's pid and start time, so neither a reused pid nor a file descriptor inherited by some
other child can fool it) run the process's exit hook and end it with ``os._exit``.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing.util  # noqa: F401  registers multiprocessing's atexit hook before ours
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable

import psutil

log = logging.getLogger("zephon.engine")

_live: weakref.WeakSet = weakref.WeakSet()  # objects with close(fast: bool)


def register(engine) -> None:
    _live.add(engine)
    _install_sigterm()


def unregister(engine) -> None:
    _live.discard(engine)


def close_all(fast: bool = False) -> None:
    for engine in list(_live):
        try:
            engine.close(fast=fast)
        except Exception:  # one broken engine must not keep the others' memory alive
            log.exception("zephon: closing an engine failed")


atexit.register(close_all)


def _install_sigterm() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # a framework's handler is in charge; our children see us die and clean up
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame) -> None:
    close_all(fast=True)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # die of SIGTERM as if we had never been here


# -- identity of a process -----------------------------------------------------------------


def identity(pid: int | None = None) -> tuple[int, float]:
    """(pid, start time): what ``alive`` compares, so a reused pid is not mistaken for ours."""
    pid = os.getpid() if pid is None else pid
    return pid, psutil.Process(pid).create_time()


def alive(ident: tuple[int, float]) -> bool:
    try:
        p = psutil.Process(ident[0])
        return p.create_time() == ident[1] and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def watch(ident: tuple[int, float], on_death: Callable[[], None], interval: float = 0.2) -> None:
    def run() -> None:
        while alive(ident):
            time.sleep(interval)
        on_death()

    threading.Thread(target=run, name="zephon-parent-watch", daemon=True).start()


# -- child processes -----------------------------------------------------------------------


def init_child(role: str, on_exit: Callable[[], None], log_level: str) -> Callable[[], None]:
    """Signals and logging for a coordinator or worker process; returns the exit function to
    hand to ``watch`` (started by the caller once it may have threads)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    done = threading.Lock()

    def leave() -> None:
        if done.acquire(blocking=False):  # the watcher and a signal may race to get here
            try:
                on_exit()
            finally:
                os._exit(0)

    signal.signal(signal.SIGTERM, lambda signum, frame: leave())
    setup_logging(log_level, role)
    return leave


def single_threaded() -> bool:
    """True when this process has exactly one OS thread (so ``fork`` is safe)."""
    if threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # cannot tell: assume the worst
        return False


def setup_logging(level: str, role: str | None = None) -> None:
    logger = logging.getLogger("zephon")
    logger.setLevel(str(level).upper())
    if role is not None:
        logger.handlers.clear()  # a forked child inherits its parent's, with the wrong role
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(
            f"%(asctime)s zephon[{role} %(process)d] %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
