"""Keywords of Zephon 0.2.0 that change nothing here (``placement=``, ``parallelism=``) are
accepted, and said once: never ignored in silence, never refused."""

from __future__ import annotations

import warnings

import pytest

from zephon import Pipeline, compat_notes
from zephon.compat_notes import CompatibilityNote
from zephon.io import Dataset
from zephon.work import StaticMixtureWorkSource


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(compat_notes, "_SAID", set())


def _pipeline() -> Pipeline:
    ds = Dataset.from_dict("d", {0: [{"text": f"doc {i}"} for i in range(20)]})
    return Pipeline(StaticMixtureWorkSource([ds], {"d": 1.0}, seed=0)).options(num_workers=0)


def _notes(build) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build()
    return [str(w.message) for w in caught if issubclass(w.category, CompatibilityNote)]


def test_defaults_say_nothing(fresh):
    assert _notes(lambda: _pipeline().map_transform(lambda p: p).shuffle(8).batch(4)) == []
    assert _notes(lambda: _pipeline().map_transform(lambda p: p, placement="auto",
                                                    parallelism=None)) == []
    assert _notes(lambda: _pipeline().stateful_transform(
        "s", init_state=dict, push=lambda s, r: (s, r), parallelism=1)) == []


def test_each_keyword_is_said_once_per_process_and_names_the_method(fresh):
    first = _notes(lambda: _pipeline().map_transform(lambda p: p, placement="remote"))
    assert len(first) == 1 and "map_transform(placement=...)" in first[0]
    assert "no effect" in first[0]
    assert _notes(lambda: _pipeline().batch(4, placement="remote")) == []  # said already
    par = _notes(lambda: _pipeline().decode_text(parallelism=8))
    assert len(par) == 1 and "decode_text(parallelism=...)" in par[0]
    assert "num_workers" in par[0]


def test_keywords_through_kwargs_and_aliases(fresh):
    from zephon.ops.base import BaseOp, OpTraits

    class Keep(BaseOp):
        def traits(self) -> OpTraits:
            return OpTraits(preserves_cursor_order=True)

        def process_many(self, elems: list) -> list:
            return elems

    said = _notes(lambda: _pipeline().add_op(Keep(), placement="remote"))
    assert len(said) == 1 and "add_op(placement=...)" in said[0]
    said = _notes(lambda: _pipeline().fetch_parallelism(4))
    assert len(said) == 1 and "fetch(parallelism=...)" in said[0]


def test_the_stream_is_the_same_with_and_without_them(fresh):
    plain = [r.payload["text"] for r in _pipeline().map_transform(lambda p: p).shuffle(8)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompatibilityNote)
        given = [r.payload["text"] for r in _pipeline().map_transform(
            lambda p: p, placement="remote", parallelism=3).shuffle(8, placement="remote")]
    assert given == plain and len(plain) == 20
