"""Starting zephon's processes without running the user's main module again.

``multiprocessing`` (spawn and forkserver alike) tells every child to import the parent's
``__main__`` before it runs its target, so that functions pickled by reference to ``__main__``
can be found. A training script without ``if __name__ == "__main__":`` then builds and iterates
its pipeline a second time inside our coordinator, which starts processes while bootstrapping
and dies. Zephon does not need the user's main module in its processes: operators, work sources
and user functions travel as cloudpickle blobs, which carry ``__main__`` functions and classes
by value. So our children are started without that instruction, and a pipeline that truly
refers to ``__main__`` by name (something cloudpickle could not carry by value) fails with a
message that says so (``user_blob_loads``).

The training process's environment at the time a pipeline starts is handed to the children
too (``environment`` / ``adopt_environment``): a fork server keeps the environment of its own
start, so credentials exported between two pipelines would otherwise never reach the workers.
"""

from __future__ import annotations

import ctypes
import multiprocessing.process
import os
import shutil
import signal
import threading
import time
from multiprocessing import forkserver, spawn

import cloudpickle
import psutil

from zephon.engine.process import cleanup
from zephon.errors import EngineError

# what ``spawn.get_preparation_data`` adds so that the child imports the parent's main module
_MAIN_KEYS = ("init_main_from_name", "init_main_from_path", "main_path")
_lock = threading.Lock()  # the patch below is process-wide: one start at a time


def user_blob_loads(blob: bytes, what: str):
    """``cloudpickle.loads`` of user objects shipped to a child, with a clear error when they
    refer to the parent's main module by name."""
    try:
        return cloudpickle.loads(blob)
    except (AttributeError, ImportError) as e:
        if "__main__" not in str(e) and "__mp_main__" not in str(e):
            raise
        raise EngineError(
            f"zephon could not rebuild the {what} in its worker processes: {e}. Something it "
            "refers to lives in your main script and cannot travel by value; zephon's "
            "processes do not import your main script. Move it into an importable module, "
            "or run the pipeline in this process with options(num_workers=0) or "
            "options(runner='threads')") from e


def environment() -> dict[str, str]:
    """The environment a pipeline's processes should run with: this process's, now."""
    return dict(os.environ)


def adopt_environment(env: dict[str, str] | None) -> None:
    """Make this (child) process's environment the training process's, before it starts its
    own children or opens any storage."""
    if env is None:
        return
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    os.environ.update(env)


# -- fork servers ------------------------------------------------------------------------------
#
# With the forkserver start method a child is forked by a helper process (one per process that
# starts children: the training process's starts coordinators, the coordinator's starts
# replacement workers). Two things go wrong when that helper dies (SIGKILL, OOM killer):
# ``multiprocessing`` only notices at its next start, and not reliably (a helper that is dying
# but not yet reaped looks alive: ``ConnectionRefusedError``; one that dies mid-request:
# ``EOFError``); and every child it forked reports its exit through it, so their sentinels fire
# and ``is_alive()`` says "exit code 255" while they run on. ``start`` replaces a dead helper
# and ``Child`` asks the OS, by pid and start time, whether a child still runs.

FORK_SERVER_NAME = "zephon-forksrv"  # what ps/top show for the coordinator's helper
_PR_SET_NAME, _PR_SET_CHILD_SUBREAPER = 15, 36


class ForkServerLost(EngineError):
    """The fork server died while starting a process; it has been reset, and a new start (with
    new pipes: the lost request may have forked a child that holds the old ones) launches a
    fresh one."""


def start(proc) -> None:
    """``proc.start()``, with the child told not to import the parent's ``__main__``; raises
    ``ForkServerLost`` (after resetting the fork server) when the fork server is dead."""
    with _lock:
        original = spawn.get_preparation_data

        def without_main(name):
            data = original(name)
            for key in _MAIN_KEYS:
                data.pop(key, None)
            return data

        spawn.get_preparation_data = without_main
        try:
            proc.start()
        except (ConnectionError, EOFError, FileNotFoundError) as e:  # only what a dead server does
            if getattr(proc, "_start_method", None) != "forkserver":
                raise
            pid = _reset_fork_server()
            raise ForkServerLost(f"the fork server (pid {pid}) that starts {proc.name} died "
                                 f"({type(e).__name__}: {e})") from e
        finally:
            spawn.get_preparation_data = original


def start_retrying(make, what: str, attempts: int = 3):
    """Start the process ``make()`` builds, as ``(proc, here, there)`` with ``there`` the child's
    end of its pipe; a lost fork server is replaced and the start tried again with new pipes.
    Returns ``(Child, here)``; raises ``EngineError`` naming what died when nothing helps."""
    lost: ForkServerLost | None = None
    for _ in range(attempts):
        proc, here, there = make()
        try:
            start(proc)
            return Child(proc), here
        except ForkServerLost as e:
            here.close()
            lost = e
        finally:
            there.close()
    raise EngineError(f"zephon could not start the {what}: its fork server died {attempts} "
                      f"times in a row (the last: {lost})") from lost


def _reset_fork_server() -> int | None:
    """Forget this process's fork server (killed first: one that refuses requests is of no
    use, and the children it forked do not need it), so the next start launches a new one.
    ``multiprocessing`` has no public way to do this: its fields are the same from 3.8 on."""
    server = forkserver._forkserver
    with server._lock:
        pid = server._forkserver_pid
        if pid is None:
            return None
        for call in (lambda: os.kill(pid, signal.SIGKILL), lambda: os.waitpid(pid, 0),
                     lambda: os.close(server._forkserver_alive_fd)):
            try:
                call()
            except OSError:  # already dead, already reaped, already closed
                pass
        address = server._forkserver_address
        server._forkserver_pid = server._forkserver_alive_fd = None
        server._forkserver_address = None
        if isinstance(address, str) and not address.startswith("\0"):
            try:
                os.unlink(address)
            except OSError:
                pass
    return pid


def use_temp_dir(path: str | None) -> None:
    """Make ``path`` this process's ``multiprocessing`` temp dir, where its fork server's socket
    goes. ``multiprocessing`` makes its own ``pymp-*`` and removes it at a normal exit only; a
    coordinator that is killed, or leaves through ``os._exit``, would leave it behind. So the
    training process makes this one and removes it when it closes the engine (the coordinator
    does, if the training process is gone)."""
    if path is not None:
        multiprocessing.process.current_process()._config["tempdir"] = path


def remove_temp_dir(path: str | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def fork_server_pid() -> int | None:
    """This process's fork server, if it started one and it runs."""
    pid = forkserver._forkserver._forkserver_pid
    return pid if pid is not None and psutil.pid_exists(pid) else None


def preload(*modules: str) -> list[str]:
    """What a fork server of ours imports before it forks: ``modules``, after naming it."""
    return ["zephon.engine.process.fork_server_name", *modules]


def name_process(name: str) -> None:
    """The name ``ps``/``top``/psutil show for this process (Linux, 15 bytes); else nothing."""
    _prctl(_PR_SET_NAME, name.encode()[:15])


def adopt_orphans() -> None:
    """Become the parent of descendants whose own parent dies (Linux): workers forked by a fork
    server that is killed stay in this process's tree, and their exit status is ours to read."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _prctl(option: int, arg) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: names and adoption are conveniences
        pass


def describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Child:
    """A process this one started, with liveness and exit status that hold when its fork server
    dies (see above)."""

    def __init__(self, proc) -> None:
        self.proc = proc
        self.pid: int = proc.pid
        self.sentinel = proc.sentinel
        self.ident = _identity(self.pid)
        server = fork_server_pid() if getattr(proc, "_start_method", None) == "forkserver" else None
        self.server = _identity(server) if server is not None else None
        self.status: int | None = None  # exit code read by waitpid, when we adopted it

    @property
    def via_server(self) -> bool:
        return self.server is not None

    def server_lost(self) -> bool:
        """The fork server that reports this child's exit is gone: its sentinel means nothing."""
        return self.server is not None and not cleanup.alive(self.server)

    def running(self) -> bool:
        if not self.proc.is_alive():  # also False (exit code 255) when its fork server died
            self._reap()
            return self.ident is not None and cleanup.alive(self.ident)
        return True

    def _reap(self) -> None:
        """An adopted child (``adopt_orphans``) that ended: read its status, free its pid."""
        if self.server is None or self.status is not None:
            return
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # not ours: its fork server reaped it, or init did
            return
        if pid:
            self.status = os.waitstatus_to_exitcode(status)

    def exit_description(self) -> str:
        self._reap()
        if self.status is not None:
            return describe_exit(self.status)
        if self.server_lost():
            return "ended; its exit status is unknown: the fork server that started it died"
        return describe_exit(self.proc.exitcode)

    def signal(self, signum: int) -> None:
        if self.ident is not None and cleanup.alive(self.ident):  # never a recycled pid
            try:
                os.kill(self.pid, signum)
            except OSError:
                pass

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for it to end; True if it has."""
        deadline = time.monotonic() + timeout
        self.proc.join(timeout)  # returns at once if the fork server died
        while self.running():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True


def end_all(children: list[Child], grace: float) -> None:
    """Give ``children`` ``grace`` seconds to leave, then SIGTERM (their handlers release what
    they hold), then SIGKILL."""
    deadline = time.monotonic() + grace
    for c in children:
        c.wait(max(0.0, deadline - time.monotonic()))
    for signum, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        left = [c for c in children if c.running()]
        for c in left:
            c.signal(signum)
        deadline = time.monotonic() + wait
        for c in left:
            c.wait(max(0.0, deadline - time.monotonic()))


def _identity(pid: int | None) -> tuple[int, float] | None:
    try:
        return cleanup.identity(pid) if pid is not None else None
    except psutil.Error:  # it already ended
        return None
