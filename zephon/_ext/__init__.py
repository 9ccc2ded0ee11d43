"""Kernel loader: compiled Cython kernels with pure-numpy twins.

``kernel("packing")`` returns the compiled module ``zephon._ext.packing`` when it was built and
not disabled, else the twin ``zephon._ext.packing_np``. Both expose the same functions with the
same results; the tests hold them equal. ``ZEPHON_DISABLE_EXT=1`` forces the twins.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

_cache: dict[tuple[str, bool], ModuleType] = {}


def extensions_disabled() -> bool:
    return os.environ.get("ZEPHON_DISABLE_EXT", "").strip().lower() not in ("", "0", "false", "no")


def compiled(name: str) -> ModuleType | None:
    """The compiled kernel module, or None when it was not built."""
    key = (name, True)
    if key not in _cache:
        try:
            mod = importlib.import_module(f"zephon._ext.{name}")
        except ImportError:
            return None
        _cache[key] = mod
    return _cache[key]


def fallback(name: str) -> ModuleType:
    """The pure-numpy twin of a kernel module."""
    key = (name, False)
    if key not in _cache:
        _cache[key] = importlib.import_module(f"zephon._ext.{name}_np")
    return _cache[key]


def kernel(name: str) -> ModuleType:
    """The module a caller should use: compiled unless disabled or missing."""
    if not extensions_disabled():
        mod = compiled(name)
        if mod is not None:
            return mod
    return fallback(name)


def status() -> dict[str, str]:
    """Which implementation each known kernel resolves to (for explain() and the CLI)."""
    here = os.path.dirname(__file__)
    names = sorted(f[:-4] for f in os.listdir(here) if f.endswith(".pyx"))
    return {n: ("cython" if kernel(n) is compiled(n) and compiled(n) else "numpy") for n in names}


def build_tools_present() -> bool:
    """Whether Cython and a C compiler are here (``setup.py`` builds the kernels with them)."""
    import shutil
    import sysconfig

    try:
        importlib.import_module("Cython")
    except ImportError:
        return False
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None


def missing_compiled() -> list[str]:
    """The kernels (``.pyx`` here) whose compiled module cannot be imported."""
    here = os.path.dirname(__file__)
    names = sorted(f[:-4] for f in os.listdir(here) if f.endswith(".pyx"))
    return [n for n in names if compiled(n) is None]


def require_compiled() -> None:
    """Raise ``RuntimeError`` naming the kernels that silently fell back to numpy although the
    build tools are present (CI runs ``python -m zephon._ext --require-compiled``)."""
    missing = missing_compiled()
    if missing and build_tools_present():
        raise RuntimeError(f"kernels not compiled although Cython and a C compiler are present: "
                           f"{', '.join(missing)} (the numpy fallbacks would serve silently; "
                           "rebuild with `pip install -e .`)")
