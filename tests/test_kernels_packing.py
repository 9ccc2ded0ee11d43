"""packing kernel: the Cython PackCore and its list-based twin agree push by push."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zephon._ext import compiled, fallback
from zephon._ext.packing_algorithms import ALGORITHMS

pytestmark = pytest.mark.skipif(compiled("packing") is None, reason="packing extension not built")


@st.composite
def core_config(draw):
    algo = draw(st.integers(0, 3))
    L = draw(st.integers(1, 40))
    # max_segs (the fifth) caps segments per bin in every algorithm (0: no cap)
    return (ALGORITHMS[algo], L, draw(st.integers(1, 5)) if algo < 2 else 1,
            draw(st.integers(1, min(L, 6))), draw(st.integers(0, 4)),
            draw(st.booleans()), draw(st.booleans()), draw(st.integers(0, 8)),
            draw(st.integers(1, 30)))


def _same(a: tuple, b: tuple) -> None:
    assert len(a) == len(b) == 6
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@settings(max_examples=150, deadline=None)
@given(cfg=core_config(), pushes=st.lists(st.lists(st.integers(0, 90), max_size=12), max_size=6),
       cut=st.integers(0, 6))
def test_twins_agree_including_export_and_load(cfg, pushes, cut):
    c, f = compiled("packing").PackCore(*cfg), fallback("packing").PackCore(*cfg)
    rid = 0
    for i, lengths in enumerate(pushes):
        ids = np.arange(rid, rid + len(lengths), dtype=np.int64)
        rid += len(lengths)
        lens = np.array(lengths, dtype=np.int64)
        _same(c.push(lens, ids), f.push(lens, ids))
        assert c.export() == f.export()
        assert c.pending_tokens == f.pending_tokens
        if i == cut:  # cross-load: each core continues from the other's exported state
            sc, sf = c.export(), f.export()
            c, f = compiled("packing").PackCore(*cfg), fallback("packing").PackCore(*cfg)
            c.load(sf)
            f.load(sc)
    _same(c.flush(), f.flush())
    assert c.export() == f.export() == {"bins": [], "pool": [], "arrivals": 0}


def test_large_random_stream_agrees():
    rng = np.random.default_rng(7)
    lengths = np.minimum(rng.lognormal(5, 1, 3000).astype(np.int64), 3000)
    ids = np.arange(len(lengths), dtype=np.int64)
    for algo, cap in [(a, c) for a in range(4) for c in (0, 3)]:
        cfg = (ALGORITHMS[algo], 512, 8 if algo < 2 else 1, 4, cap, algo == 1, algo < 2, 64, 200)
        c, f = compiled("packing").PackCore(*cfg), fallback("packing").PackCore(*cfg)
        for chunk in np.array_split(np.arange(len(lengths)), 7):
            _same(c.push(lengths[chunk], ids[chunk]), f.push(lengths[chunk], ids[chunk]))
        _same(c.flush(), f.flush())


@pytest.mark.parametrize("mod", ["cython", "numpy"])
def test_rejects_negative_lengths_and_bad_config(mod):
    m = compiled("packing") if mod == "cython" else fallback("packing")
    core = m.PackCore("first_fit", 10, 2, 1, 0, False, True, 0, 1)
    with pytest.raises(ValueError, match="negative"):
        core.push(np.array([3, -1], np.int64), np.array([0, 1], np.int64))
    with pytest.raises(ValueError, match="equal lengths"):
        core.push(np.array([3], np.int64), np.array([0, 1], np.int64))
    with pytest.raises(ValueError):
        m.PackCore("next_fit", 10, 2, 1, 0, False, True, 0, 1)
