"""MosaicML Streaming's own MDS writer and reader, for the MDS tests and benchmark.

``import streaming`` also imports its vision datasets, which need ``torchvision``; no
``torchvision`` build matches this project's CPU ``torch==2.13.0`` (the PyPI wheel is a CUDA
build that fails at import: ``operator torchvision::nms does not exist``). The MDS writer and
``StreamingDataset`` live in ``streaming.base`` and never touch torchvision, so the package is
entered without running its ``__init__``: the writer and reader used are Streaming's own code,
unchanged.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def streaming_base():
    """``streaming.base`` (``MDSWriter``, ``StreamingDataset``), or None without the package."""
    spec = importlib.util.find_spec("streaming")
    if spec is None or not spec.submodule_search_locations:
        return None
    if "streaming" not in sys.modules:
        pkg = types.ModuleType("streaming")
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__spec__ = spec
        sys.modules["streaming"] = pkg
    import streaming.base

    return streaming.base
