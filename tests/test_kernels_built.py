"""Where a C compiler is present, every Cython kernel was built: a build that silently fell back
to the numpy twins (setup.py found no Cython, a compile failed) fails here, not in a benchmark."""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

import pytest

from zephon._ext import compiled, status

EXT = Path(__file__).resolve().parent.parent / "zephon" / "_ext"


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) or shutil.which("cc") or shutil.which("gcc")


def test_every_kernel_is_compiled_where_a_compiler_is_present():
    kernels = sorted(p.stem for p in EXT.glob("*.pyx"))
    assert kernels, "no kernel sources found"
    if _compiler() is None:
        pytest.skip("no C compiler on this machine: the numpy twins are the build's")
    missing = [k for k in kernels if compiled(k) is None]
    assert missing == [], (f"kernels not built though a C compiler is present: {missing}; "
                           "reinstall with `pip install -e .` and read its output")
    if not os.environ.get("ZEPHON_DISABLE_EXT"):
        assert set(status().values()) == {"cython"}, status()
