"""Records for litData's ``optimize()`` in the tests and benchmark (its workers are spawned
processes: the functions they call must be importable)."""

from __future__ import annotations

import numpy as np


def record(i: int) -> dict:
    """A dict of the usual leaves: ints, floats, text, bytes, 1-D and 2-D arrays, a list of
    ints."""
    rng = np.random.default_rng(i)
    return {"id": i, "text": f"doc {i} " + "é" * (i % 5), "score": i / 7,
            "ok": bool(i % 2), "blob": bytes([i % 256]) * (i % 9),
            "tokens": rng.integers(0, 50_000, 1 + i % 13, dtype=np.int32),
            "patch": rng.random((1 + i % 3, 4)).astype(np.float32),
            "steps": list(range(i % 4))}


def nested(i: int) -> tuple:
    """A PyTree other than one dict: a tuple holding a tensor and a dict."""
    import torch

    return (i, {"t": torch.arange(i % 5 + 1, dtype=torch.int64) * i, "name": f"n{i}",
                "tags": ["a", f"t{i}"]}, [float(i), float(-i)])


def text(i: int) -> dict:
    """Flat records of strings and ints: today's litData stores them as Arrow rows."""
    return {"id": i, "text": f"t{i} " * (i % 7)}


def tokens(i: int) -> dict:
    """A pretraining record: token ids."""
    rng = np.random.default_rng(i)
    return {"id": i, "input_ids": rng.integers(0, 50_000, 512, dtype=np.int32)}


def with_object(i: int) -> dict:
    """A leaf only pickle can store (a set)."""
    return {"id": i, "obj": {i}}


def bench_text(i: int) -> dict:
    """benchmarks/bench_formats.py's record: an id, ~2 KB of text, a small JSON string."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
             "kappa"]
    text = " ".join(words[(i * 7 + k * 3) % len(words)] for k in range(330))
    return {"id": i, "text": text, "meta": f'{{"i": {i}}}'}


# (records, optimize keywords) of the litData tests and reference fixtures: uncompressed, zstd
# frames (today's default), whole-file zstd (older litData), Arrow rows, and a PyTree that is
# not one dict
KINDS = {
    "plain": (record, {}),
    "zstd-frames": (record, {"compression": "zstd"}),
    "zstd-file": (record, {"compression": "zstd", "compression_level": "chunk"}),
    "arrow-rows": (text, {"compression": "zstd"}),
    "pytree": (nested, {}),
}
