"""Running a user's script as a stranger would: a fresh interpreter with this checkout on its
path and the default runner (the test run's ``ZEPHON_NUM_WORKERS`` / ``ZEPHON_RUNNER`` left out)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

CHECKOUT = str(Path(__file__).resolve().parents[2])


class ScriptRun(NamedTuple):
    pid: int  # names the script's shared memory (``zephon_<pid>_...``)
    returncode: int
    stdout: str
    stderr: str


def run_script(script: Path, cwd: Path, timeout: float = 240, **env: str) -> ScriptRun:
    """``python script`` run in ``cwd`` with ``env`` added; a script still running at
    ``timeout`` is killed (and reported as failed)."""
    full = {k: v for k, v in os.environ.items()
            if k not in ("ZEPHON_NUM_WORKERS", "ZEPHON_RUNNER", "PYTHONPATH")}
    full.update(env, PYTHONPATH=CHECKOUT)
    proc = subprocess.Popen([sys.executable, str(script)], cwd=cwd, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return ScriptRun(proc.pid, proc.returncode, out, err)
