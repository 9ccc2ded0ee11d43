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


def test_zephons_processes_leave_pandas_unimported(tmp_path):
    """pyarrow imports pandas at its first conversion of values (~30 MiB and a few hundred ms
    per process); the coordinator and workers keep it out unless the pipeline brings it."""
    script = tmp_path / "pandas_free.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
from engine_fakes import FakeDataset, FakeWorkSource
from zephon import Pipeline


def seen(p):
    p["pandas"] = "pandas" in sys.modules
    return p


if __name__ == "__main__":
    ws = FakeWorkSource([FakeDataset("a", 2, 200)], chunk_size=20)
    p = Pipeline(ws).map_transform(seen).shuffle(buffer_size=16, seed=1).batch(8)
    p = p.options(num_workers=2, micro_batch_size=10)
    print(sorted({{r.payload["pandas"] for b in p for r in b.records}}))
""")
    out = _run(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert out.splitlines()[-1] == "[False]"


def test_a_pipeline_that_brings_pandas_keeps_pyarrows_pandas_handling(tmp_path):
    script = tmp_path / "with_pandas.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
import pandas as pd
import pyarrow as pa
from engine_fakes import FakeDataset, FakeWorkSource
from zephon import Pipeline


def nulls(p):
    p["nulls"] = pa.array(pd.Series([1.0, None])).null_count  # NaN is null for pandas input
    return p


if __name__ == "__main__":
    ws = FakeWorkSource([FakeDataset("a", 1, 40)], chunk_size=20)
    p = Pipeline(ws).map_transform(nulls).options(num_workers=1, micro_batch_size=10)
    print(sorted({{r.payload["nulls"] for r in p}}))
""")
    out = _run(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert out.splitlines()[-1] == "[1]"


def test_pandas_stays_usable_after_the_first_look_without_it():
    code = ("import sys, pyarrow as pa; from zephon.arrow_memory import arrow_without_pandas; "
            "print(arrow_without_pandas(), 'pandas' in sys.modules); pa.array([1, 2]); "
            "print('pandas' in sys.modules, type(pa.table({'a': [1]}).to_pandas()).__name__)")
    assert _run(code).splitlines() == ["True False", "False DataFrame"]
