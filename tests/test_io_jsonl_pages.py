"""Worker processes do not keep the JSONL pages they have parsed mapped: those pages are the
page cache's, but mapped they count in the process tree's memory (PSS), shard after shard."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from zephon import Pipeline
from zephon.io import Dataset
from zephon.io.formats import jsonl_reader
from zephon.work import StaticMixtureWorkSource

MiB = 1 << 20


def _shard(root, mib: int) -> str:
    os.makedirs(root / "web", exist_ok=True)
    path = root / "web" / "shard-00000.jsonl"
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        written, i = 0, 0
        while written < mib * MiB:
            line = json.dumps({"id": i, "text": "word " * int(rng.integers(100, 600))}) + "\n"
            f.write(line)
            written += len(line)
            i += 1
    return str(path)


def _mapped_kib(pid: int, name: str) -> int:
    """Resident KiB of ``pid``'s mappings of files called ``name``."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and ":" not in head[0]:
                inside = len(head) > 5 and head[-1].endswith(name)
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc")
@pytest.mark.parametrize("release", [False, True])
def test_a_reader_releases_what_it_parsed_when_asked(tmp_path, monkeypatch, release):
    path = _shard(tmp_path, 8)
    monkeypatch.setattr(jsonl_reader, "_release_pages", release)
    ds = Dataset.from_path("web", tmp_path / "web")
    n = ds.total()
    tables = [ds.read_table(int(ds.ids()[0]), np.arange(a, min(a + 256, n)))
              for a in range(0, n, 256)]
    mapped = _mapped_kib(os.getpid(), os.path.basename(path))
    if release:  # what was parsed since the last release (1 MiB) and a block (~0.45 MiB),
        # with what the kernel maps around each fault (CI saw 3.15 MiB): half the shard at most
        assert mapped < 4 * 1024, mapped
    else:
        assert mapped > 6 * 1024, mapped
    # what was read is the same either way: values were copied out before the pages went
    assert sum(t.num_rows for t in tables) == n
    assert tables[-1].column("id").to_pylist()[-1] == n - 1
    assert all(t.column("text").to_pylist()[0].startswith("word ") for t in tables)


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc")
def test_worker_processes_keep_no_parsed_pages_mapped(tmp_path):
    import psutil

    path = _shard(tmp_path, 16)
    ws = StaticMixtureWorkSource([Dataset.from_path("web", tmp_path / "web")], {"web": 1.0},
                                 seed=0)
    p = Pipeline(ws).batch(64).options(num_workers=2, prefetch_batches=1)
    it = iter(p)
    total = ws.datasets[0].total()
    seen = 0
    for b in it:
        seen += len(b)
        if seen > total // 2:
            break
    time.sleep(0.2)
    children = psutil.Process().children(recursive=True)
    mapped = {c.pid: _mapped_kib(c.pid, os.path.basename(path)) for c in children}
    p.close()
    assert len(mapped) >= 3  # the coordinator and two workers at least
    # half the shard has been parsed by the workers (8 MiB): they hold at most ~1 MiB each
    assert max(mapped.values()) < 3 * 1024, mapped
