"""MosaicML Streaming's own MDS writer and reader, for the MDS tests and benchmark.

``import streaming`` also imports its vision datasets, which need ``torchvision``; no
``torchvision`` build matches this project's CPU ``torch==2.13.0`` (the PyPI wheel is a CUDA
build that fails at import: ``operator torchvision::nms does not exist``). The MDS writer and
``StreamingDataset`` live in ``streaming.base`` and never touch torchvision, so the package is
entered without running its ``__init__``: the writer and reader used are Streaming's own code,
unchanged.

``COLUMNS`` and ``record`` are the records the MDS tests and the committed reference fixtures
(tests/data/formats/make_reference_fixtures.py) write.
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


COLUMNS = {"id": "int", "text": "str", "blob": "bytes", "score": "float32", "n": "int64",
           "tokens": "ndarray:int32", "patch": "ndarray:uint8:2,3", "any": "ndarray",
           "meta": "json", "big": "str_int", "ratio": "str_float", "price": "str_decimal",
           "photo": "jpeg", "mask": "png"}
IMAGES = ("photo", "mask")


def record(i: int) -> dict:
    """Record ``i``: every MDS column type, images included (Pillow)."""
    from decimal import Decimal

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(i)
    return {"id": i, "text": f"doc {i} " + "é" * (i % 5), "blob": bytes([i % 256]) * (i % 9),
            "score": np.float32(i / 7), "n": np.int64(-i * 3), "tokens":
            rng.integers(0, 50_000, 1 + i % 13, dtype=np.int32),
            "patch": np.full((2, 3), i % 256, dtype=np.uint8),
            "any": rng.random((1 + i % 3, 4)).astype(np.float64),
            "meta": {"i": i, "tags": ["a", "b"][: i % 3], "w": None if i % 2 else i / 2},
            "big": 10**20 + i if i % 4 == 0 else i, "ratio": i / 3, "price": Decimal(f"{i}.50"),
            "photo": Image.fromarray(rng.integers(0, 255, (4, 5, 3), dtype=np.uint8)),
            "mask": Image.fromarray(np.full((3, 3), i % 256, dtype=np.uint8))}
