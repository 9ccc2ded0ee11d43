"""Issue 32: gaps a Zephon 0.2.0 user still hits (work sources, mixtures, surface), each tested
from the specification."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from zephon import Pipeline
from zephon.io import Dataset, InMemoryShard
from zephon.ops import spawn_child
from zephon.types import ContributorRef, SampleCursor, SampleMeta, SampleRecord
from zephon.work import StaticMixtureWorkSource


def _source(n: int = 30, words: int = 12, chunk_size: int = 8) -> StaticMixtureWorkSource:
    a = Dataset.from_dict("a", {0: InMemoryShard([{"text": " ".join(f"w{i}x{j}" for j in
                                                                    range(words))}
                                                  for i in range(n)])})
    return StaticMixtureWorkSource([a], {"a": 1.0}, seed=1, chunk_size=chunk_size)


# -- item 8: the reference's surface ------------------------------------------------------------

def test_read_config_types_import_from_work_base():
    from zephon.work.base import MixtureReadConfig, MixtureReadMode
    from zephon.work.read_config import MixtureReadConfig as Config

    assert MixtureReadConfig is Config
    assert MixtureReadMode("weighted_random") is MixtureReadMode.WEIGHTED_RANDOM


def test_pipeline_ws_is_its_work_source():
    ws = _source()
    assert Pipeline(ws).ws is ws


def test_sample_meta_as_cursor_key():
    m = SampleMeta((1, 2, 3), lane_id=0, chunk_id=4, chunk_offset=5, lineage=(0, 1))
    assert m.as_cursor_key() == (4, 5, (0, 1), (1, 2, 3)) == m.cursor.as_key()


def test_explain_names_serial_operators_with_their_parallelism():
    p = Pipeline(_source()).options(num_workers=0).batch(microbatch_size=4)
    assert "'batch@p1'" in p.explain()


def _closers(records) -> dict:
    """base offset -> (index of each record deriving from it, indices of its closing records)"""
    by_base: dict = defaultdict(lambda: ([], []))
    for i, r in enumerate(records):
        refs = r.meta.contributors
        assert len(refs) == 1, r.meta
        ref = refs[0]
        assert ref.cursor == SampleCursor(r.meta.chunk_id, r.meta.chunk_offset, (),
                                          r.meta.sample_id)
        key = (r.meta.lane_id, ref.cursor.base_offset)
        by_base[key][0].append(i)
        if ref.is_last_child:
            by_base[key][1].append(i)
    return by_base


def test_split_pieces_carry_their_contributor_and_the_last_one_closes():
    p = Pipeline(_source()).options(num_workers=0).tokenize(
        tokenizer_id="__fallback__", field="text", max_length=16, split_long_samples=True)
    records = list(p)
    by_base = _closers(records)
    assert len(by_base) == 30
    for members, closing in by_base.values():
        assert len(members) > 1 and closing == [members[-1]]


def _halves(records):
    out = []
    for r in records:
        text = r.payload["text"]
        for i, part in enumerate((text[: len(text) // 2], text[len(text) // 2:])):
            out.append(SampleRecord(spawn_child(r.meta, i, is_last_child=i == 1), {"text": part}))
    return out


def test_split_after_a_fan_out_keeps_one_closing_contributor_per_base_offset():
    p = (Pipeline(_source()).options(num_workers=0)
         .add_op("halves", process_many=_halves, preserves_cursor_order=True)
         .tokenize(tokenizer_id="__fallback__", field="text", max_length=16,
                   split_long_samples=True))
    records = list(p)
    by_base = _closers(records)
    assert len(by_base) == 30
    for members, closing in by_base.values():
        assert len(members) > 2 and closing == [members[-1]]
        assert records[closing[0]].meta.lineage[0] == 1  # the piece of the second half
    assert isinstance(records[0].meta.contributors[0], ContributorRef)
    assert np.all([len(r.meta.lineage) == 2 for r in records])
