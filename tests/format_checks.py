"""Checks every shard format's tests apply: a shuffled pipeline over the dataset yields each
record the format's own reader gives exactly once, the same stream with 0 and 2 workers, and a
resume from a checkpoint anywhere continues it exactly."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from zephon import Pipeline
from zephon.io import Dataset
from zephon.work import StaticMixtureWorkSource


def pipeline(ds: Dataset, workers: int = 0, micro: int = 7) -> Pipeline:
    ws = StaticMixtureWorkSource([ds], {ds.name: 1.0}, seed=11, chunk_size=9,
                                 shuffle_within_shard=True)
    return (Pipeline(ws).shuffle(buffer_size=8, seed=2).batch(microbatch_size=3, drop_last=False)
            .options(num_workers=workers, micro_batch_size=micro))


def one_epoch(ds: Dataset, workers: int = 0) -> list[list[dict]]:
    """Batches (lists of payloads) of the first pass over ``ds``."""
    total, out, seen = ds.total(), [], 0
    for batch in pipeline(ds, workers):
        out.append([r.payload for r in batch.records])
        seen += len(out[-1])
        if seen >= total:
            break
    return out


def _canon(value: Any) -> Any:
    """A value with its Python type kept in the comparison (bytes stay bytes, an int is not a
    float), arrays as (dtype, list)."""
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    if isinstance(value, np.ndarray):
        return ("ndarray", str(value.dtype), value.tolist())
    return (type(value).__name__, value)


def assert_same_records(got: list[dict], expected: list[dict], key: str) -> None:
    """Every record of ``expected`` (the format's own reader) once in ``got``, equal in every
    field and every value's type."""
    assert len(got) == len(expected)
    by_key = {r[key]: r for r in expected}
    assert len(by_key) == len(expected)
    for rec in got:
        assert _canon(rec) == _canon(by_key[rec[key]]), rec[key]
    assert sorted(r[key] for r in got) == sorted(by_key)


def assert_stream_exact(ds: Dataset, key: str, cuts: tuple[int, ...] = (1, 4)) -> None:
    """0 and 2 workers give the same stream; resuming at ``cuts`` continues it exactly."""
    def keys(batches) -> list:
        return [[r[key] for r in b] for b in batches]

    inline = keys(one_epoch(ds, 0))
    assert keys(one_epoch(ds, 2)) == inline
    n = len(inline)
    for cut in cuts:
        p = pipeline(ds)
        it = iter(p)
        head = [[r.payload[key] for r in next(it).records] for _ in range(cut)]
        state = json.loads(json.dumps(p.checkpoint()))
        p.close()
        q = pipeline(ds, micro=5).restore(state)
        tail = [[r.payload[key] for r in b.records] for _, b in zip(range(n - cut), q)]
        assert head + tail == inline, f"resume at batch {cut} diverged"


def flat(batches: list[list[dict]]) -> list[dict]:
    return [r for b in batches for r in b]


