"""Curriculum kernels: the compiled module and its numpy twin agree, and both are correct."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zephon._ext import compiled, fallback
from zephon.work.hashing import mix64

NP = fallback("curriculum")
CY = compiled("curriculum")
BOTH = [pytest.param(NP, id="numpy")] + (
    [pytest.param(CY, id="cython")] if CY is not None else [])
needs_cy = pytest.mark.skipif(CY is None, reason="curriculum extension not built")


def _epoch_args(rng, n_shards, empty_every=0):
    counts = rng.integers(1, 40, n_shards)
    if empty_every:
        counts[::empty_every] = 0
    keep = counts > 0  # the curriculum drops empty shards before calling the kernel
    ids = np.flatnonzero(keep).astype(np.int64) * 7 + 3
    cum = np.concatenate([[0], np.cumsum(counts[keep])]).astype(np.int64)
    return cum, ids


@pytest.mark.parametrize("k", BOTH)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 100, 1000, 4097])
def test_feistel_is_a_bijection(k, n):
    for key in (0, 1, 2**64 - 1, 0xDEADBEEF):
        out = k.feistel_permute(np.arange(n), n, key)
        assert out.dtype == np.int64
        assert np.array_equal(np.sort(out), np.arange(n))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), key=st.integers(0, 2**64 - 1))
def test_feistel_bijection_property(n, key):
    for k in (NP, CY) if CY is not None else (NP,):
        out = k.feistel_permute(np.arange(n), n, key)
        assert np.array_equal(np.sort(out), np.arange(n))


def test_feistel_depends_on_key_and_rejects_out_of_range():
    a = NP.feistel_permute(np.arange(1000), 1000, 1)
    b = NP.feistel_permute(np.arange(1000), 1000, 2)
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, np.arange(1000))
    for k in (NP, CY) if CY is not None else (NP,):
        with pytest.raises(ValueError):
            k.feistel_permute(np.array([5]), 5, 0)


def test_python_mix64_matches_the_kernels():
    vals = np.array([0, 1, -1, 2**62, -(2**40), 123456789], dtype=np.int64)
    for key in (0, 7, 2**64 - 1):
        want = [mix64(key, int(v)) for v in vals]
        assert NP.hash_mix(key, vals).tolist() == want
        if CY is not None:
            assert CY.hash_mix(key, vals).tolist() == want


@needs_cy
def test_compiled_and_numpy_agree_on_permutations():
    rng = np.random.default_rng(0)
    for n in (2, 17, 1 << 12, (1 << 20) + 3, 10**12):
        idx = rng.integers(0, n, 2000) if n > 2000 else np.arange(n)
        for key in rng.integers(0, 2**63, 3):
            assert np.array_equal(CY.feistel_permute(idx, n, int(key)),
                                  NP.feistel_permute(idx, n, int(key)))


@needs_cy
@pytest.mark.parametrize("block", [0, 2, 5, 64, 10**9])
@pytest.mark.parametrize("within", [False, True])
def test_compiled_and_numpy_agree_on_epoch_pointers(block, within):
    rng = np.random.default_rng(1)
    cum, ids = _epoch_args(rng, 30, empty_every=4)
    n = int(cum[-1])
    block = min(block, n)
    for start, count in ((0, n), (7, 50), (n - 3, 3), (5, 0)):
        lut, shift = NP.shard_lookup(cum, 64)
        a = CY.epoch_pointers(start, count, n, block, 11, cum, ids, within, 13, lut, shift)
        b = NP.epoch_pointers(start, count, n, block, 11, cum, ids, within, 13)
        c = CY.epoch_pointers(start, count, n, block, 11, cum, ids, within, 13)
        for x, y, z in zip(a, b, c):
            assert np.array_equal(x, y) and np.array_equal(x, z)


@pytest.mark.parametrize("k", BOTH)
@pytest.mark.parametrize("block", [0, 4, 33])
@pytest.mark.parametrize("within", [False, True])
def test_epoch_is_a_permutation_of_the_dataset(k, block, within):
    cum, ids = _epoch_args(np.random.default_rng(2), 12)
    n = int(cum[-1])
    lut, shift = k.shard_lookup(cum, 8)
    sh, sa = k.epoch_pointers(0, n, n, block, 5, cum, ids, within, 9, lut, shift)
    counts = dict(zip(ids.tolist(), np.diff(cum).tolist()))
    pairs = set(zip(sh.tolist(), sa.tolist()))
    assert len(pairs) == n
    assert pairs == {(s, i) for s, c in counts.items() for i in range(c)}
    if block == 0 and not within:  # natural order: shards in the given order, rows ascending
        assert sh.tolist() == [s for s, c in counts.items() for _ in range(c)]


@pytest.mark.parametrize("k", BOTH)
def test_block_shuffle_stays_inside_blocks(k):
    cum = np.array([0, 100], dtype=np.int64)
    sh, sa = k.epoch_pointers(0, 100, 100, 16, 3, cum, np.array([0]), False, 0)
    for b in range(0, 100, 16):
        assert sorted(sa[b:b + 16].tolist()) == list(range(b, min(b + 16, 100)))
    assert sa.tolist() != list(range(100))


@pytest.mark.parametrize("k", BOTH)
def test_epoch_pointers_validates(k):
    cum = np.array([0, 5, 9], dtype=np.int64)
    with pytest.raises(ValueError):
        k.epoch_pointers(8, 3, 9, 0, 0, cum, np.array([1, 2]), False, 0)
    with pytest.raises(ValueError):
        k.epoch_pointers(0, 3, 10, 0, 0, cum, np.array([1, 2]), False, 0)
    with pytest.raises(ValueError):  # a lookup table built for another dataset
        k.epoch_pointers(0, 3, 9, 0, 0, cum, np.array([1, 2]), False, 0, np.zeros(7), 0)


@pytest.mark.parametrize("k", BOTH)
def test_swrr_counts_ties_and_smoothness(k):
    assert k.swrr_interleave(np.array([1, 1])).tolist() == [0, 1]  # ties: earlier first
    assert k.swrr_interleave(np.array([0, 3, 0])).tolist() == [1, 1, 1]
    assert k.swrr_interleave(np.array([2, 1])).tolist() == [0, 1, 0]
    assert k.swrr_interleave(np.zeros(3, dtype=np.int64)).tolist() == []
    counts = np.array([500, 1200, 7, 0, 300])
    order = k.swrr_interleave(counts)
    assert np.bincount(order, minlength=5).tolist() == counts.tolist()
    # Every prefix honours the composition to within a couple of samples.
    share = counts / counts.sum()
    running = np.cumsum(np.eye(5, dtype=np.int64)[order], axis=0)
    ideal = np.arange(1, len(order) + 1)[:, None] * share[None, :]
    assert np.abs(running - ideal).max() < 2.5
    with pytest.raises(ValueError):
        k.swrr_interleave(np.array([1, -1]))


@needs_cy
def test_compiled_and_numpy_agree_on_interleave():
    rng = np.random.default_rng(3)
    for _ in range(20):
        counts = rng.integers(0, 300, rng.integers(1, 7))
        assert np.array_equal(CY.swrr_interleave(counts), NP.swrr_interleave(counts))
        total = int(counts.sum())
        args = (counts, np.arange(len(counts)) * 10, rng.integers(0, 99, total),
                rng.integers(0, 10**6, total))
        for x, y in zip(CY.chunk_pointers(*args), NP.chunk_pointers(*args)):
            assert np.array_equal(x, y)


@pytest.mark.parametrize("k", BOTH)
def test_chunk_pointers_reads_each_component_in_its_order(k):
    counts = np.array([3, 2])
    ds, sh, sa = k.chunk_pointers(counts, np.array([4, 9]), np.array([0, 0, 0, 1, 1]),
                                  np.array([10, 11, 12, 20, 21]))
    assert ds.tolist() == [4, 9, 4, 9, 4]
    assert sa.tolist() == [10, 20, 11, 21, 12]
    with pytest.raises(ValueError):
        k.chunk_pointers(counts, np.array([4]), np.zeros(5), np.zeros(5))


@pytest.mark.parametrize("k", BOTH)
def test_shard_lookup_finds_the_shard_of_every_bucket(k):
    cum = np.array([0, 0, 5, 5, 6, 100, 130], dtype=np.int64)
    lut, shift = k.shard_lookup(cum, 8)
    for b, j in enumerate(lut.tolist()):
        start = b << shift
        assert cum[j] <= start < cum[j + 1]


@needs_cy
def test_twins_expose_the_same_functions_and_signatures():
    import inspect

    names = {"ROUNDS", "hash_mix", "feistel_permute", "shard_lookup", "epoch_pointers",
             "swrr_interleave", "chunk_pointers"}
    assert names <= set(dir(CY)) and names <= set(dir(NP))
    assert CY.ROUNDS == NP.ROUNDS
    for name in names - {"ROUNDS"}:
        params = list(inspect.signature(getattr(NP, name)).parameters)
        assert list(inspect.signature(getattr(CY, name)).parameters) == params, name
    assert np.array_equal(CY.hash_mix(-1, np.arange(5)), NP.hash_mix(-1, np.arange(5)))


def test_ci_fails_when_the_kernels_fell_back_to_numpy_where_they_could_be_built(monkeypatch):
    """setup.py returns no extensions when it cannot build them, and the numpy twins serve
    silently: ``python -m zephon._ext --require-compiled`` (run by .ci/run) fails then."""
    import zephon._ext as ext
    from zephon._ext.__main__ import main

    monkeypatch.setattr(ext, "build_tools_present", lambda: True)
    real = ext.compiled
    assert main(["--require-compiled"]) == (1 if ext.missing_compiled() else 0)
    monkeypatch.setattr(ext, "compiled", lambda n: None if n == "packing" else real(n))
    assert ext.missing_compiled() == ["packing"]
    with pytest.raises(RuntimeError, match="not compiled .*: packing"):
        ext.require_compiled()
    assert main(["--require-compiled"]) == 1
    monkeypatch.setattr(ext, "build_tools_present", lambda: False)
    ext.require_compiled()  # no tools: the fallback is expected
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "-m zephon._ext --require-compiled" in ci
