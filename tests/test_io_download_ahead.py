"""The download-ahead thread (zephon/io/ahead/download_ahead.py): one job per key at a time, errors
dropped, and a process that ends never waits for it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from zephon.io.ahead import download_ahead

REPO = Path(__file__).resolve().parents[1]


def test_a_key_runs_once_at_a_time_and_errors_are_dropped():
    gate = threading.Event()
    ran: list[str] = []

    def slow() -> None:
        gate.wait(10)
        ran.append("slow")

    def broken() -> None:
        raise OSError("network down")

    assert download_ahead.submit(("t", 1), slow)
    assert not download_ahead.submit(("t", 1), slow)  # queued or running: not twice
    assert download_ahead.submit(("t", 2), broken)
    gate.set()
    download_ahead.drain()
    assert ran == ["slow"]
    assert download_ahead.submit(("t", 1), lambda: ran.append("again"))  # done: may run again
    download_ahead.drain()
    assert ran == ["slow", "again"]


def test_a_process_that_ends_does_not_wait_for_a_download():
    code = textwrap.dedent("""
        import time
        from zephon.io.ahead import download_ahead
        download_ahead.submit(("stuck",), lambda: time.sleep(60))
        time.sleep(0.2)  # the thread has started the job
        print("leaving", flush=True)
    """)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=50, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "leaving"
    assert time.monotonic() - t0 < 20  # far less than the job's 60 s
