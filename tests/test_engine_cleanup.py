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
import time
from pathlib import Path

import psutil
import pytest
from conftest import wait_released

TESTS = Path(__file__).resolve().parent


class Scenario:
    def __init__(self, kind: str) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS)]))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"import engine_fakes; engine_fakes.scenario({kind!r})"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=TESTS, env=env)
        info = json.loads(self.line())
        self.prefix, self.pids = info["prefix"], info["pids"]
        # coordinator + 2 workers; with an early exception the coordinator may already have
        # stopped its workers before the first batch reaches us, so only it is certain
        assert len(self.pids) >= (1 if kind == "exception" else 3)
        assert self.prefix.startswith("zephon_")

    def line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"scenario died: {self.proc.wait()} {self.proc.stderr.read()}")
        return line.strip()

    def finish(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.wait(20) == 0, self.proc.stderr.read()


@pytest.mark.parametrize("kind", ["normal", "exception", "abandon"])
def test_clean_while_the_training_process_lives(kind):
    s = Scenario(kind)
    lines = [s.line(), s.line()] if kind == "exception" else [s.line()]
    assert lines[-1] == "finished"
    if kind == "exception":
        assert lines[0] == "raised UserFunctionError"
    wait_released(s.prefix, s.pids, timeout=5.0)
    s.finish()


def test_ctrl_c_ends_everything_promptly():
    s = Scenario("sigint")
    assert s.line() == "running"
    family = [c.pid for c in psutil.Process(s.proc.pid).children(recursive=True)]
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGINT)
    code = s.proc.wait(10)
    assert time.monotonic() - t0 < 5
    assert code != 0 and "KeyboardInterrupt" in s.proc.stderr.read()
    wait_released(s.prefix, family + s.pids, timeout=10.0)


def test_killed_training_process_takes_everything_down():
    s = Scenario("sigkill")
    assert s.line() == "running"
    family = [c.pid for c in psutil.Process(s.proc.pid).children(recursive=True)]
    s.proc.send_signal(signal.SIGKILL)
    assert s.proc.wait(10) == -signal.SIGKILL
    wait_released(s.prefix, family + s.pids, timeout=10.0)
