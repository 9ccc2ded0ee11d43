"""Zephon's choice of Arrow allocator (``zephon/arrow_memory.py``), in fresh interpreters: the
choice is process-wide."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHECK = ("import pyarrow as pa; from zephon.arrow_memory import use_decode_pool; "
         "print(use_decode_pool(), pa.default_memory_pool().backend_name)")


def _run(code: str, **env: str) -> str:
    full = {k: v for k, v in os.environ.items()
            if k not in ("ZEPHON_ARROW_POOL", "ARROW_DEFAULT_MEMORY_POOL")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _has(backend: str) -> bool:
    import pyarrow as pa

    try:
        getattr(pa, f"{backend}_memory_pool")()
    except NotImplementedError:
        return False
    return True


def test_auto_prefers_jemalloc_then_system():
    expect = "jemalloc" if _has("jemalloc") else "system"
    assert _run(CHECK) == f"{expect} {expect}"


def test_a_named_pool_is_used():
    assert _run(CHECK, ZEPHON_ARROW_POOL="system") == "system system"


def test_keep_and_the_users_own_choice_are_left_alone():
    assert _run(CHECK, ZEPHON_ARROW_POOL="keep", ARROW_DEFAULT_MEMORY_POOL="system") == \
        "None system"
    assert _run(CHECK, ARROW_DEFAULT_MEMORY_POOL="system") == "None system"


def test_an_unknown_pool_is_a_clear_error():
    code = "from zephon.arrow_memory import use_decode_pool; use_decode_pool()"
    full = dict(os.environ, ZEPHON_ARROW_POOL="tcmalloc")
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "ZEPHON_ARROW_POOL must be one of" in out.stderr


@pytest.mark.skipif(not _has("jemalloc"), reason="this pyarrow has no jemalloc")
def test_workers_and_the_inline_engine_decode_on_the_chosen_pool(tmp_path):
    script = tmp_path / "pools.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
import pyarrow as pa
from engine_fakes import FakeDataset, FakeWorkSource
from zephon import Pipeline


def backend(p):
    p["pool"] = pa.default_memory_pool().backend_name
    return p


if __name__ == "__main__":
    for workers in (0, 2):
        ws = FakeWorkSource([FakeDataset("a", 2, 50)], chunk_size=20)
        p = Pipeline(ws).map_transform(backend).options(num_workers=workers)
        print(workers, sorted({{r.payload["pool"] for r in p}}))
""")
    out = _run(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert out.splitlines() == ["0 ['jemalloc']", "2 ['jemalloc']"]
