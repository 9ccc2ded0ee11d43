"""shuffle kernel: hashes, ShuffleCore and MixCore agree between Cython and the numpy twin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zephon._ext import compiled, fallback

C = compiled("shuffle")
F = fallback("shuffle")
needs_ext = pytest.mark.skipif(C is None, reason="shuffle extension not built")
u64 = st.integers(0, (1 << 64) - 1)


@pytest.mark.parametrize("mod", [pytest.param(C, id="cython", marks=needs_ext),
                                 pytest.param(F, id="numpy")])
def test_mix64_is_splitmix64(mod):
    # the first outputs of the reference splitmix64 generator seeded with 0
    got = mod.mix64(np.array([0, 0x9E3779B97F4A7C15, 0x3C6EF372FE94F82A], dtype=np.uint64))
    assert got.tolist() == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


@needs_ext
@settings(max_examples=50, deadline=None)
@given(st.lists(u64, max_size=30))
def test_mix64_twins(xs):
    a = np.array(xs, dtype=np.uint64)
    np.testing.assert_array_equal(C.mix64(a), F.mix64(a))


@needs_ext
@settings(max_examples=50, deadline=None)
@given(n=st.integers(0, 20), depth=st.integers(0, 3), seed=st.integers(0, 10**6))
def test_record_keys_twins_and_padding_invariance(n, depth, seed):
    rng = np.random.default_rng(seed)
    ds, sh, sa = rng.integers(-2, 5, n), rng.integers(0, 9, n), rng.integers(0, 1 << 40, n)
    lin = rng.integers(-1, 4, (n, depth))
    np.testing.assert_array_equal(C.record_keys(ds, sh, sa, lin), F.record_keys(ds, sh, sa, lin))
    np.testing.assert_array_equal(C.record_keys(ds, sh, sa), F.record_keys(ds, sh, sa))
    padded = np.concatenate([lin, np.full((n, 2), -1)], axis=1)
    np.testing.assert_array_equal(C.record_keys(ds, sh, sa, padded), C.record_keys(ds, sh, sa, lin))


@needs_ext
@settings(max_examples=120, deadline=None)
@given(mode=st.integers(0, 2), size=st.integers(1, 70), seed=u64, lane=st.integers(0, 9),
       growth=st.floats(1.0, 3.0), blocks=st.lists(st.lists(u64, max_size=40), max_size=6),
       cut=st.integers(0, 6))
def test_shuffle_core_twins(mode, size, seed, lane, growth, blocks, cut):
    c, f = C.ShuffleCore(mode, size, seed, lane, growth), F.ShuffleCore(mode, size, seed, lane, growth)
    for i, keys in enumerate(blocks):
        k = np.array(keys, dtype=np.uint64)
        np.testing.assert_array_equal(c.push(k), f.push(k))
        assert c.export() == f.export()
        if i == cut:
            sc, sf = c.export(), f.export()
            c, f = C.ShuffleCore(mode, size, seed, lane, growth), F.ShuffleCore(mode, size, seed,
                                                                                lane, growth)
            c.load(sf)
            f.load(sc)
    np.testing.assert_array_equal(c.flush(), f.flush())
    assert c.export() == f.export()


@st.composite
def mix_config(draw):
    k = draw(st.integers(1, 4))
    raw = np.array(draw(st.lists(st.integers(0, 5), min_size=k, max_size=k)))
    raw[0] += raw.sum() == 0
    shares = raw * (1 << 20) // raw.sum()
    shares[0] += (1 << 20) - shares.sum()
    max_buf = draw(st.integers(-1, 25))
    return k, shares.astype(np.int64), max_buf, draw(st.integers(0, max(max_buf, 0))), \
        draw(st.integers(0, 1 << 20))


@needs_ext
@settings(max_examples=120, deadline=None)
@given(cfg=mix_config(), data=st.data(), cut=st.integers(0, 5))
def test_mix_core_twins(cfg, data, cut):
    k, shares, max_buf, drain_to, rate = cfg
    c, f = C.MixCore(shares, max_buf, drain_to, rate), F.MixCore(shares, max_buf, drain_to, rate)
    for i in range(data.draw(st.integers(0, 6))):
        n = data.draw(st.integers(0, 30))
        comp = np.array(data.draw(st.lists(st.integers(0, k), min_size=n, max_size=n)), np.int64)
        w = np.array(data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)), np.int64)
        rid = np.arange(i * 100, i * 100 + n, dtype=np.int64)
        np.testing.assert_array_equal(c.push(comp, w, rid), f.push(comp, w, rid))
        assert c.export() == f.export()
        if i == 2:
            new = np.roll(shares, 1)
            c.set_shares(new)
            f.set_shares(new)
        if i == cut:
            sc, sf = c.export(), f.export()
            c, f = C.MixCore(shares, max_buf, drain_to, rate), F.MixCore(shares, max_buf, drain_to,
                                                                          rate)
            c.load(sf)
            f.load(sc)
    (ec, dc), (ef, df) = c.flush(), f.flush()
    np.testing.assert_array_equal(ec, ef)
    np.testing.assert_array_equal(dc, df)
