"""A pipeline whose worker processes keep shards in private temporary caches (node cache disabled,
or its directory unwritable), run in a fresh Python process by test_io_private_cache.py with
TMPDIR pointing at a directory of the test's own.

Prints JSON lines: the engine's pids, what it did, and the private caches still in TMPDIR once
the pipeline has ended while this process still lives; then waits for a line on stdin.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
import time

import psutil


def private_dirs() -> list[str]:
    return sorted(n for n in os.listdir(tempfile.gettempdir()) if "zephon-cache" in n)


def boom_at_700(p: dict) -> dict:
    if p["id"] == 700:
        raise ValueError("record 700 is bad")
    return p


def _say(**kw) -> None:
    print(json.dumps(kw), flush=True)


def main(kind: str, data_dir: str) -> None:
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    os.makedirs(data_dir, exist_ok=True)
    for s in range(4):  # compressed: each worker writes a decoded copy of what it reads
        lines = "".join(json.dumps({"id": s * 300 + i, "text": "t" * 40}) + "\n"
                        for i in range(300))
        with open(os.path.join(data_dir, f"part-{s}.jsonl.gz"), "wb") as f:
            f.write(gzip.compress(lines.encode()))
    ds = Dataset.from_path("web", data_dir)
    ws = StaticMixtureWorkSource(datasets=[ds], mixture=MixtureSpec({"web": 1.0}), seed=1)
    p = Pipeline(ws)
    if kind == "exception":
        p = p.map_transform(boom_at_700)
    opts = {} if kind == "unwritable" else {"io_options": {"cache": {"enabled": False}}}
    p = p.batch(10).options(num_workers=2, micro_batch_size=25, **opts)
    it = iter(p)
    next(it)
    engine = p._runtime.engine
    _say(pids=engine.pids())
    if kind == "sigkill-worker":
        deadline = time.monotonic() + 20
        while len(private_dirs()) < 2 and time.monotonic() < deadline:  # both workers' caches
            next(it)
        _say(before_kill=private_dirs())
        victim = psutil.Process(engine.processes()["workers"][0])
        victim.kill()
        victim.wait(5)
    if kind == "signal":  # consume slowly until the test signals this process
        deadline = time.monotonic() + 20
        while len(private_dirs()) < 2 and time.monotonic() < deadline:
            next(it)
        _say(running=len(private_dirs()))
        for _ in it:
            time.sleep(0.5)
    try:
        for _ in it:
            pass
    except Exception as e:
        _say(raised=type(e).__name__)
    try:
        from zephon.io.storage import private_cache

        own = private_cache._mine  # this process's own, if it has one: alive, so kept
    except ImportError:  # a zephon without it (the tests are also run against the old code)
        own = None
    _say(left=[n for n in private_dirs() if own is None or n != own[1].name],
         own=None if own is None else own[1].name)
    sys.stdin.readline()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
