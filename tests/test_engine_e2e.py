"""End to end: real datasets (Parquet and JSONL) and the static mixture through every runner."""

from __future__ import annotations

import pytest

from zephon import Pipeline
from zephon.io import Dataset
from zephon.work import MixtureSpec, StaticMixtureWorkSource


def _build(corpus, fmt_dir, **opts) -> Pipeline:
    ds = [Dataset.from_path("code", corpus / "code"), Dataset.from_path("web", fmt_dir / "web")]
    ws = StaticMixtureWorkSource(ds, MixtureSpec({"code": 0.25, "web": 0.75}), chunk_size=200,
                                 seed=42)
    return (Pipeline(ws).map_transform(lambda p: {**p, "chars": len(p["text"])})
            .batch(8).options(micro_batch_size=64, canonical_replicas=2, **opts))


@pytest.mark.parametrize("opts", [dict(num_workers=2), dict(num_workers=2, runner="threads")],
                         ids=["process", "threads"])
def test_static_mixture_over_parquet_and_jsonl(parquet_corpus_dir, corpus_dir, opts):
    def stream(**o):
        return [(b.ids, b.lane_ids, b.block.payload.to_pylist())
                for b in _build(parquet_corpus_dir, corpus_dir, **o)]

    want = stream(num_workers=0)
    assert len(want) > 200
    assert stream(**opts) == want
