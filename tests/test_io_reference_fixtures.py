"""MDS and litData files written by Streaming's and litData's own writers (committed under
tests/data/formats/, made by its make_reference_fixtures.py), read by Zephon and compared, value
and type, with what those libraries' own readers gave for them.

test_io_mds.py and test_io_litdata.py write fresh files with the libraries and compare live;
they skip where the libraries are not installed, which is CI (their pins clash with this
project's). These run everywhere: torch for litData's tensor leaves and Pillow for MDS images
come with the test extra.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from format_checks import assert_stream_exact, flat, one_epoch
from tests_support.reference_canon import canon, canon_key, decoded_images, key_of

from zephon.io import Dataset

FIXTURES = Path(__file__).resolve().parent / "data" / "formats"
KINDS = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.pkl").exists())


def test_every_fixture_is_here():
    assert KINDS == ["litdata-arrow-rows", "litdata-plain", "litdata-pytree",
                     "litdata-zstd-file", "litdata-zstd-frames", "mds-plain", "mds-zstd"]


@pytest.fixture(scope="module", params=KINDS)
def fixture(request, tmp_path_factory):
    """A copy of the fixture's files (not its expected.pkl), and the expected records."""
    if request.param.startswith("litdata"):
        pytest.importorskip("torch")
    else:
        pytest.importorskip("PIL.Image")
    root = tmp_path_factory.mktemp(request.param)
    for f in (FIXTURES / request.param).iterdir():
        if f.name != "expected.pkl":
            shutil.copy(f, root / f.name)
    with open(FIXTURES / request.param / "expected.pkl", "rb") as f:
        expected = pickle.load(f)  # written by make_reference_fixtures.py: plain values
    return root, expected, request.param.split("-")[0]


def _same(got: list, expected: list) -> None:
    got = sorted((canon(decoded_images(r)) for r in got), key=canon_key)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g == e


def test_records_are_the_writers_libraries_own(fixture):
    root, expected, fmt = fixture
    ds = Dataset.from_path("r", root)
    assert ds.fmt == fmt and ds.total() == len(expected) == 40
    _same(flat(one_epoch(ds)), expected)  # through a pipeline
    _same([r for s in ds.ids().tolist() for r in ds.read_payloads(s, np.arange(ds.count(s)))],
          expected)


@pytest.mark.slow
def test_streams_are_exact(fixture):
    root, expected, _ = fixture
    ds = Dataset.from_path("r", root)
    first = ds.read_payloads(int(ds.ids()[0]), [0])[0]
    assert_stream_exact(ds, 0 if isinstance(first, tuple) else "id", cuts=(2,))
    assert key_of(first) == 0
