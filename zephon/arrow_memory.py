"""Which allocator Arrow uses in the processes where Zephon decodes records.

pyarrow's default pool is mimalloc. Decoding Parquet row groups and JSON blocks allocates a
few MiB of fresh buffers per block and grows them by reallocation; under mimalloc we measured
most of a worker's time in faulting in new pages and copying grown buffers: fetch + batch over
Parquet (160k documents of ~2 KB) took 2.3x the CPU of the same run on jemalloc, inline and in
worker processes alike (the system allocator was in between). So Zephon switches Arrow's
default pool when a pipeline starts, in its coordinator and workers and in the training
process, unless told otherwise:

- ``ZEPHON_ARROW_POOL=auto`` (default): jemalloc, else the system allocator; left alone when
  the user chose a pool with Arrow's own ``ARROW_DEFAULT_MEMORY_POOL``;
- ``jemalloc`` / ``system`` / ``mimalloc``: that pool;
- ``keep``: never touch Arrow's default.

Buffers allocated before the switch keep the pool they came from, so switching is safe at any
point; it only changes where later allocations go.
"""

from __future__ import annotations

import os

_POOLS = ("jemalloc", "system", "mimalloc")
_chosen: str | None = None  # what this process switched to, once


def choice() -> str:
    """The pool ``ZEPHON_ARROW_POOL`` asks for (validated), ``auto`` when unset."""
    value = os.environ.get("ZEPHON_ARROW_POOL", "auto").strip().lower() or "auto"
    if value not in ("auto", "keep", *_POOLS):
        raise ValueError(f"ZEPHON_ARROW_POOL must be one of auto, keep, {', '.join(_POOLS)}; "
                         f"got {value!r}")
    return value


def _pool(name: str):
    import pyarrow as pa

    make = {"jemalloc": pa.jemalloc_memory_pool, "system": pa.system_memory_pool,
            "mimalloc": pa.mimalloc_memory_pool}[name]
    return make()


def use_decode_pool() -> str | None:
    """Switch Arrow's default pool as ``ZEPHON_ARROW_POOL`` says; returns the backend now in
    use, or None when left alone. Cheap to call again: the switch happens once per process."""
    global _chosen
    value = choice()
    if value == "keep" or (value == "auto" and os.environ.get("ARROW_DEFAULT_MEMORY_POOL")):
        return None
    if _chosen is not None:
        return _chosen
    import pyarrow as pa

    for name in (_POOLS[:2] if value == "auto" else (value,)):
        try:
            pool = _pool(name)
        except NotImplementedError:  # not built into this wheel (Arrow's error subclasses it)
            if value != "auto":
                raise ValueError(f"ZEPHON_ARROW_POOL={value}: this pyarrow build has no "
                                 f"{value} allocator") from None
            continue
        pa.set_memory_pool(pool)
        _chosen = pool.backend_name
        return _chosen
    return None


class _PandasHidden:
    """A meta-path finder that refuses pandas (``arrow_without_pandas``)."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is hidden from pyarrow's first look (zephon)")
        return None


def arrow_without_pandas() -> bool:
    """Keep pyarrow from importing pandas in one of zephon's own processes; True if done.

    pyarrow imports pandas, when it is installed, on its first conversion of Python or numpy
    values (``pa.array``, ``pa.scalar``, ``chunked_array``, ``compute`` calls with numpy
    arguments: it checks for pandas objects), and the engine makes such calls in every
    process. That import cost each coordinator and worker about 30 MiB (a fifth of a W2
    worker's PSS) and a few hundred milliseconds of its start. pyarrow looks once and
    remembers: if that first look fails, it treats values as non-pandas from then on, while
    its explicit pandas entry points (``to_pandas``, ``from_pandas``) still import pandas when
    called. So the first look is made here with pandas hidden. Skipped when pandas is already
    imported (a user function unpickled in this process refers to it), so a pipeline that
    brings pandas keeps pyarrow's pandas handling; never done in the training process, which
    is the user's."""
    import sys

    if "pandas" in sys.modules:
        return False
    import pyarrow as pa

    sys.meta_path.insert(0, _PandasHidden)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(_PandasHidden)
    return "pandas" not in sys.modules
