"""Every way out leaves nothing behind: no segment in /dev/shm, no process running.

Each scenario runs a pipeline in a fresh Python process (``engine_fakes.scenario``) that prints
its shared-memory prefix and the pids of the coordinator and workers; the test then checks
/dev/shm and those pids — while the training process is still alive where it survives, so that
its own exit cannot hide a leak.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import wait_released

TESTS = Path(__file__).resolve().parent


# where the serial stage runs: a coordinator process, or the training process itself
COORDINATORS = pytest.mark.parametrize("coordinator", ["process", "training"])
# generous: these bound a hang, they are not the verdict (a loaded machine is slow to reap)
RELEASED_WITHIN = 60.0


class Scenario:
    def __init__(self, kind: str, coordinator: str) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS)]))
        self.proc = subprocess.Popen(
            [sys.executable, "-c",
             f"import engine_fakes; engine_fakes.scenario({kind!r}, {coordinator!r})"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=TESTS, env=env, start_new_session=True)
        try:
            info = json.loads(self.line())
            self.prefix, self.pids = info["prefix"], info["pids"]
            # coordinator (if a process) + 2 workers; with an early exception the coordinator
            # may already have stopped its workers before the first batch reaches us
            if kind != "exception":
                assert len(self.pids) == (3 if coordinator == "process" else 2)
            assert self.prefix.startswith("zephon_")
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        """What a failed test started does not outlive it (its whole session)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"scenario died: {self.proc.wait()} {self.proc.stderr.read()}")
        return line.strip()

    def finish(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.wait(RELEASED_WITHIN) == 0, self.proc.stderr.read()


@COORDINATORS
@pytest.mark.parametrize("kind", ["normal", "exception", "abandon"])
def test_clean_while_the_training_process_lives(kind, coordinator):
    s = Scenario(kind, coordinator)
    try:
        lines = [s.line(), s.line()] if kind == "exception" else [s.line()]
        assert lines[-1] == "finished"
        if kind == "exception":
            assert lines[0] == "raised UserFunctionError"
        wait_released(s.prefix, s.pids, timeout=RELEASED_WITHIN)
        s.finish()
    finally:
        s.kill()


@COORDINATORS
def test_ctrl_c_ends_everything_promptly(coordinator):
    """Ctrl-C interrupts the loop where it is: the run does not go on to its end first (it
    would print "finished"), and everything it started is released."""
    s = Scenario("sigint", coordinator)
    try:
        assert s.line() == "running"
        family = [c.pid for c in psutil.Process(s.proc.pid).children(recursive=True)]
        s.proc.send_signal(signal.SIGINT)
        out, err = s.proc.communicate(timeout=RELEASED_WITHIN)
        assert s.proc.returncode != 0 and "KeyboardInterrupt" in err
        assert "finished" not in out
        wait_released(s.prefix, family + s.pids, timeout=RELEASED_WITHIN)
    finally:
        s.kill()


@COORDINATORS
def test_killed_training_process_takes_everything_down(coordinator):
    s = Scenario("sigkill", coordinator)
    try:
        assert s.line() == "running"
        family = [c.pid for c in psutil.Process(s.proc.pid).children(recursive=True)]
        s.proc.send_signal(signal.SIGKILL)
        assert s.proc.wait(RELEASED_WITHIN) == -signal.SIGKILL
        wait_released(s.prefix, family + s.pids, timeout=RELEASED_WITHIN)
    finally:
        s.kill()
