"""ragged kernels: the Cython build and the numpy twin agree, and both match a slow reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zephon._ext import compiled, fallback

IMPLS = [pytest.param("cython", id="cython"), pytest.param("numpy", id="numpy")]
DTYPES = [np.int32, np.int64, np.uint8, np.int8, np.int16, np.float32, np.float64, np.bool_]


def impl(name: str):
    if name == "cython":
        mod = compiled("ragged")
        if mod is None:
            pytest.skip("ragged extension not built")
        return mod
    return fallback("ragged")


def _ragged(draw, max_rows=8, max_len=9):
    lengths = draw(st.lists(st.integers(0, max_len), max_size=max_rows))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.arange(int(offsets[-1]), dtype=np.int32) * 7 + 3
    return offsets, values


@st.composite
def packed_layout(draw):
    """Rows of consecutive segments that fit in L, over a random values array."""
    nv = draw(st.integers(0, 60))
    L = draw(st.integers(1, 12))
    rows = draw(st.lists(st.lists(st.integers(0, 4), max_size=4), max_size=5))
    src, lens, segoff = [], [], [0]
    for row in rows:
        used = 0
        for ln in row:
            ln = min(ln, L - used, nv)
            start = draw(st.integers(0, nv - ln)) if nv - ln >= 0 else 0
            src.append(start)
            lens.append(ln)
            used += ln
        segoff.append(len(src))
    return nv, L, np.array(src, np.int64), np.array(lens, np.int64), np.array(segoff, np.int64)


def slow_pack_rows(values, src, lens, segoff, pad, L):
    R = len(segoff) - 1
    tok = np.full((R, L), pad, dtype=values.dtype)
    pos = np.zeros((R, L), np.int32)
    seg = np.zeros((R, L), np.int32)
    padding = []
    for r in range(R):
        col, k = 0, 0
        for s in range(segoff[r], segoff[r + 1]):
            for j in range(lens[s]):
                tok[r, col] = values[src[s] + j]
                pos[r, col] = j
                seg[r, col] = k
                col += 1
            k += lens[s] > 0
        padding.append(L - col)
        for j in range(col, L):
            pos[r, j] = j - col
            seg[r, j] = k
    return tok, pos, seg, np.array(padding, np.int64)


@pytest.mark.parametrize("name", IMPLS)
@settings(max_examples=60, deadline=None)
@given(layout=packed_layout(), pad=st.integers(0, 5))
def test_pack_rows_matches_reference(name, layout, pad):
    nv, L, src, lens, segoff = layout
    values = (np.arange(nv, dtype=np.int32) * 13 + 1) % 97
    R = len(segoff) - 1
    tok = np.empty((R, L), np.int32)
    pos = np.empty((R, L), np.int32)
    seg = np.empty((R, L), np.int32)
    padding = impl(name).pack_rows(values, src, lens, segoff, pad, tok, pos, seg)
    ref = slow_pack_rows(values, src, lens, segoff, pad, L)
    for got, want in zip((tok, pos, seg, padding), ref):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pack_rows_twins_agree_on_every_dtype(dtype):
    c = compiled("ragged")
    if c is None:
        pytest.skip("ragged extension not built")
    rng = np.random.default_rng(1)
    values = rng.integers(0, 2, 200).astype(dtype)
    lens = rng.integers(0, 6, 40)
    src = rng.integers(0, 190, 40)
    segoff = np.array([0, 5, 5, 12, 20, 31, 40])
    outs = []
    for mod in (c, fallback("ragged")):
        out = np.empty((6, 30), dtype)
        pos = np.empty((6, 30), np.int32)
        pad = mod.pack_rows(values, src, lens, segoff, 1, out, pos)
        outs.append((out, pos, pad))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", IMPLS)
def test_pack_rows_rejects_overflow_and_out_of_range(name):
    mod = impl(name)
    values = np.arange(10, dtype=np.int32)
    out = np.empty((1, 4), np.int32)
    with pytest.raises(ValueError, match="row length"):
        mod.pack_rows(values, [0, 0], [3, 2], [0, 2], 0, out)
    with pytest.raises(ValueError, match="out of range"):
        mod.pack_rows(values, [8], [3], [0, 1], 0, out)


@pytest.mark.parametrize("name", IMPLS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_gather_segments_matches_reference(name, data):
    nv = data.draw(st.integers(1, 40))
    R, L = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 10))
    n = data.draw(st.integers(0, 6))
    lens = [data.draw(st.integers(0, min(L, nv))) for _ in range(n)]
    src = [data.draw(st.integers(0, nv - ln)) for ln in lens]
    rows = [data.draw(st.integers(0, R - 1)) for _ in range(n)]
    cols = [data.draw(st.integers(0, L - ln)) for ln in lens]
    values = np.arange(nv, dtype=np.int64) + 100
    out = np.full((R, L), -1, np.int64)
    impl(name).gather_segments(values, src, lens, rows, cols, out)
    ref = np.full((R, L), -1, np.int64)
    for s, ln, r, c in zip(src, lens, rows, cols):
        ref[r, c:c + ln] = values[s:s + ln]
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("name", IMPLS)
def test_gather_segments_bounds(name):
    out = np.zeros((2, 3), np.int32)
    with pytest.raises(ValueError, match="out of range"):
        impl(name).gather_segments(np.arange(5, dtype=np.int32), [0], [2], [0], [2], out)
    with pytest.raises(ValueError, match="out of range"):
        impl(name).gather_segments(np.arange(5, dtype=np.int32), [0], [1], [2], [0], out)


@pytest.mark.parametrize("name", IMPLS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_take_and_concat_ragged(name, data):
    mod = impl(name)
    offsets, values = _ragged(data.draw)
    n = len(offsets) - 1
    idx = data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=10)) if n else []
    off2, val2 = mod.take_ragged(offsets, values, idx)
    rows = [values[offsets[i]:offsets[i + 1]] for i in idx]
    np.testing.assert_array_equal(np.diff(off2), [len(r) for r in rows])
    np.testing.assert_array_equal(val2, np.concatenate(rows) if rows else np.empty(0, np.int32))
    # concat of the whole array with a slice of itself (offsets not starting at 0)
    k = data.draw(st.integers(0, n))
    off3, val3 = mod.concat_ragged([offsets, offsets[k:]], [values, values])
    expect = [values[offsets[i]:offsets[i + 1]] for i in list(range(n)) + list(range(k, n))]
    np.testing.assert_array_equal(np.diff(off3), [len(r) for r in expect])
    np.testing.assert_array_equal(val3, np.concatenate(expect) if expect else [])


def test_gather_ragged_twins_agree_and_keep_bool():
    c = compiled("ragged")
    if c is None:
        pytest.skip("ragged extension not built")
    rng = np.random.default_rng(3)
    for dtype in DTYPES:
        values = rng.integers(0, 2, 100).astype(dtype)
        lens = rng.integers(0, 5, 30)
        src = rng.integers(0, 95, 30)
        a = c.gather_ragged(values, src, lens)
        b = fallback("ragged").gather_ragged(values, src, lens)
        assert a[1].dtype == b[1].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    with pytest.raises(ValueError):
        c.take_ragged([0, 2], np.arange(2), [1])


@st.composite
def chunked_segments(draw):
    """A few source arrays (some empty) and segments that each lie inside one of them."""
    sizes = draw(st.lists(st.integers(0, 15), min_size=1, max_size=4))
    chunks = [(np.arange(n, dtype=np.int32) * 11 + 100 * c) for c, n in enumerate(sizes)]
    n = draw(st.integers(0, 8))
    chunk, src, lens = [], [], []
    for _ in range(n):
        c = draw(st.integers(0, len(sizes) - 1))
        ln = draw(st.integers(0, sizes[c]))
        chunk.append(c)
        src.append(draw(st.integers(0, sizes[c] - ln)))
        lens.append(ln)
    return chunks, np.array(chunk, np.int64), np.array(src, np.int64), np.array(lens, np.int64)


def _joined(chunks, chunk, src):
    starts = np.concatenate(([0], np.cumsum([len(c) for c in chunks])[:-1])).astype(np.int64)
    return np.concatenate(chunks), src + starts[chunk] if len(src) else src


@pytest.mark.parametrize("name", IMPLS)
@settings(max_examples=40, deadline=None)
@given(case=chunked_segments())
def test_chunked_sources_read_like_the_joined_array(name, case):
    """gather_ragged / pack_rows with chunk= give what the joined array gives."""
    mod = impl(name)
    chunks, chunk, src, lens = case
    joined, jsrc = _joined(chunks, chunk, src)
    off, val = mod.gather_ragged(chunks, src, lens, chunk=chunk)
    want_off, want_val = mod.gather_ragged(joined, jsrc, lens)
    np.testing.assert_array_equal(off, want_off)
    np.testing.assert_array_equal(val, want_val)
    L = max(int(lens.sum()), 1)
    segoff = np.array([0, len(src) // 2, len(src)], np.int64)
    got = [np.empty((2, L), np.int32) for _ in range(3)]
    want = [np.empty((2, L), np.int32) for _ in range(3)]
    pad = mod.pack_rows(chunks, src, lens, segoff, 7, *got, chunk=chunk)
    want_pad = mod.pack_rows(joined, jsrc, lens, segoff, 7, *want)
    np.testing.assert_array_equal(pad, want_pad)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", IMPLS)
def test_chunked_segment_may_not_leave_its_chunk(name):
    """A segment reaching past the end of its own chunk fails even where the joined array
    would have values there."""
    mod = impl(name)
    chunks = [np.arange(4, dtype=np.int32), np.arange(10, dtype=np.int32)]
    with pytest.raises(ValueError, match="out of range"):
        mod.gather_ragged(chunks, [2], [3], chunk=[0])
    with pytest.raises(ValueError, match="out of range"):
        mod.pack_rows(chunks, [2], [3], [0, 1], 0, np.empty((1, 5), np.int32), chunk=[0])
    with pytest.raises(ValueError, match="chunk"):
        mod.gather_ragged(chunks, [0], [1], chunk=[2])


def test_chunked_twins_agree_on_every_dtype():
    c = compiled("ragged")
    if c is None:
        pytest.skip("ragged extension not built")
    rng = np.random.default_rng(5)
    for dtype in DTYPES:
        chunks = [rng.integers(0, 2, n).astype(dtype) for n in (40, 0, 25)]
        chunk = rng.choice([0, 2], 20)
        lens = np.minimum(rng.integers(0, 5, 20), [len(chunks[k]) for k in chunk])
        src = np.array([rng.integers(0, len(chunks[k]) - ln + 1) for k, ln in zip(chunk, lens)])
        a = c.gather_ragged(chunks, src, lens, chunk=chunk)
        b = fallback("ragged").gather_ragged(chunks, src, lens, chunk=chunk)
        assert a[1].dtype == b[1].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a[1], b[1])
        segoff = np.array([0, 6, 6, 13, 20])
        outs = []
        for mod in (c, fallback("ragged")):
            out = np.empty((4, 25), dtype)
            pos = np.empty((4, 25), np.int32)
            outs.append((mod.pack_rows(chunks, src, lens, segoff, 1, out, pos, chunk=chunk),
                         out, pos))
        for x, y in zip(*outs):
            np.testing.assert_array_equal(x, y)
