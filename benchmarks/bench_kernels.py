"""Kernel benchmarks: every kernel beside its numpy twin, packing throughput, padding.

Kernels: index permutation (feistel_permute, epoch_pointers), quotas (QuotaSchedule, pure
Python) and interleave (swrr_interleave, chunk_pointers), ragged gather/concat, the shuffle
buffer, mixture enforcement, each packing algorithm, JSONL line indexing (scan_line_starts,
gather_spans, key_presence) and flat records decoded from their spans (flat_records).
``to_training`` and whole pipelines are in bench_pipeline.py.

    python -m pytest benchmarks/bench_kernels.py --benchmark-only   # pytest-benchmark tables
    python benchmarks/bench_kernels.py                                # quick tokens/s summary

Packing data: pre-tokenized ragged documents with log-normal lengths (mean about 500 tokens,
clipped to max_length 2049), int32 ids. Throughput counts input tokens per second of
``Packer.push`` + ``build_rows`` (+ ``flush``) on one core.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from zephon._ext import compiled, fallback
from zephon._ext.packing_algorithms import ALGORITHMS

MAX_LEN = 2049
NUM_BINS = 64
IMPLS = ["cython", "numpy"]


def corpus(n_docs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(500) - 0.5, 1.0, n_docs), 1, MAX_LEN).astype(np.int64)
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(3, 50_000, int(offsets[-1]), dtype=np.int32)
    return offsets, values


def use(impl: str, name: str):
    mod = compiled(name) if impl == "cython" else fallback(name)
    if mod is None:
        pytest.skip(f"{name} extension not built")
    return mod


def per_s(benchmark, amount) -> int | None:
    """``amount`` per second of the fastest round; None under ``--benchmark-disable``, where
    each benchmark runs once as a plain test."""
    stats = benchmark.stats
    return int(amount / stats.stats.min) if stats is not None else None


def pack_and_build(offsets, values, algorithm: str, impl: str, block: int = 1024) -> dict:
    """Stream the corpus through a Packer and build every row; returns counts."""
    import os

    from zephon.tokens import Packer, build_rows

    os.environ["ZEPHON_DISABLE_EXT"] = "1" if impl == "numpy" else "0"
    try:
        kw = {"num_bins": NUM_BINS} if algorithm in ("first_fit", "best_fit") else {}
        packer = Packer(MAX_LEN, algorithm, **kw)
        lengths = np.diff(offsets)
        ids = np.arange(len(lengths), dtype=np.int64)
        rows = pad = 0
        for a in range(0, len(lengths) + 1, block):
            bins = packer.push(lengths[a:a + block], ids[a:a + block]) if a < len(lengths) \
                else packer.flush()
            packed = build_rows(bins, offsets, values, 0, MAX_LEN)
            rows += len(packed.tokens)
            pad += int(packed.padding_length.sum())
        return {"rows": rows, "padding_fraction": pad / max(rows * MAX_LEN, 1)}
    finally:
        os.environ.pop("ZEPHON_DISABLE_EXT", None)


# ---- pytest-benchmark -----------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["best_fit", "first_fit", "wrap", "best_fit_wrap"])
@pytest.mark.parametrize("impl", IMPLS)
def test_pack_and_build_rows_throughput(benchmark, impl, algorithm):
    use(impl, "packing")
    offsets, values = corpus(20_000 if impl == "cython" else 1_500)
    info = benchmark.pedantic(pack_and_build, (offsets, values, algorithm, impl), rounds=3,
                              iterations=1)
    benchmark.extra_info.update(info)
    benchmark.extra_info["tokens_per_s"] = per_s(benchmark, offsets[-1])


@pytest.mark.parametrize("impl", IMPLS)
def test_pack_rows_kernel(benchmark, impl):
    mod = use(impl, "ragged")
    offsets, values = corpus(20_000)
    lengths = np.diff(offsets)
    rows = len(lengths) // 4
    seg_off = np.arange(0, 4 * rows + 1, 4, dtype=np.int64)
    width = int(np.add.reduceat(lengths[: 4 * rows], seg_off[:-1]).max())
    out = np.empty((rows, width), np.int32)
    pos = np.empty((rows, width), np.int32)
    benchmark(mod.pack_rows, values, offsets[:-1], lengths, seg_off, 0, out, pos)
    benchmark.extra_info["tokens_per_s"] = per_s(benchmark, out.size)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("fn", ["take_ragged", "gather_segments", "concat_ragged"])
def test_ragged_kernels(benchmark, impl, fn):
    mod = use(impl, "ragged")
    offsets, values = corpus(20_000)
    idx = np.random.default_rng(1).permutation(len(offsets) - 1)
    if fn == "take_ragged":
        benchmark(mod.take_ragged, offsets, values, idx)
    elif fn == "concat_ragged":
        half = len(offsets) // 2
        benchmark(mod.concat_ragged, [offsets[:half + 1], offsets[half:]], [values, values])
    else:
        lengths = np.minimum(np.diff(offsets), 512)
        out = np.zeros((len(lengths), 512), np.int32)
        zeros = np.zeros(len(lengths), np.int64)
        benchmark(mod.gather_segments, values, offsets[:-1], lengths,
                  np.arange(len(lengths)), zeros, out)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("algorithm", [0, 1, 2, 3])
def test_pack_core_kernel(benchmark, impl, algorithm):
    mod = use(impl, "packing")
    offsets, _ = corpus(20_000 if impl == "cython" else 1_500)
    lengths = np.diff(offsets)
    ids = np.arange(len(lengths), dtype=np.int64)

    def go():
        core = mod.PackCore(ALGORITHMS[algorithm], MAX_LEN, NUM_BINS if algorithm < 2 else 1, 1, 0, False,
                            algorithm < 2, 1024, 8192)
        core.push(lengths, ids)
        core.flush()

    benchmark(go)
    benchmark.extra_info["tokens_per_s"] = per_s(benchmark, offsets[-1])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("mode", [0, 1])
def test_shuffle_kernel(benchmark, impl, mode):
    mod = use(impl, "shuffle")
    n = 200_000 if impl == "cython" else 20_000
    keys = mod.record_keys(np.zeros(n), np.zeros(n), np.arange(n))

    def go():
        core = mod.ShuffleCore(mode, 8192, 1, 0, 1.5)
        core.push(keys)
        core.flush()

    benchmark(go)
    benchmark.extra_info["records_per_s"] = per_s(benchmark, n)


@pytest.mark.parametrize("impl", IMPLS)
def test_mix_kernel(benchmark, impl):
    mod = use(impl, "shuffle")
    n = 200_000 if impl == "cython" else 20_000
    rng = np.random.default_rng(2)
    comps = rng.choice(3, n, p=[0.5, 0.3, 0.2]).astype(np.int64)
    weights = rng.integers(1, 2000, n).astype(np.int64)
    shares = np.array([1 << 19, 1 << 18, 1 << 18], np.int64)

    def go():
        core = mod.MixCore(shares, 1000, 800, 0)
        core.push(comps, weights, np.arange(n, dtype=np.int64))
        core.flush()

    benchmark(go)
    benchmark.extra_info["records_per_s"] = per_s(benchmark, n)


@pytest.mark.parametrize("impl", IMPLS)
def test_record_keys_kernel(benchmark, impl):
    mod = use(impl, "shuffle")
    n = 1_000_000
    cols = (np.zeros(n, np.int64), np.arange(n) % 7, np.arange(n), np.zeros((n, 2), np.int64))
    benchmark(mod.record_keys, *cols)


# ---- curriculum: index permutation, quotas and interleave ------------------------------------
@pytest.mark.parametrize("impl", IMPLS)
def test_feistel_permute_kernel(benchmark, impl):
    """The O(1)-memory index permutation behind every shuffled order (cycle walking included:
    n is just above a power of two, the worst case)."""
    mod = use(impl, "curriculum")
    n = (1 << 20) + 1
    idx = np.arange(1_000_000 if impl == "cython" else 200_000, dtype=np.int64)
    out = benchmark(mod.feistel_permute, idx, n, 12345)
    assert len(np.unique(out)) == len(idx)
    benchmark.extra_info["indices_per_s"] = per_s(benchmark, len(idx))


@pytest.mark.parametrize("impl", IMPLS)
def test_epoch_pointers_kernel(benchmark, impl):
    """One chunk's worth of a dataset's order: block permutation, shard search, within-shard
    permutation."""
    mod = use(impl, "curriculum")
    sizes = np.full(400, 25_000, dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(sizes)))
    shard_ids = np.random.default_rng(3).permutation(len(sizes)).astype(np.int64)
    lut, shift = mod.shard_lookup(cum, 4096)
    count = 65_536
    benchmark(mod.epoch_pointers, 123_456, count, int(cum[-1]), 8192, 7, cum, shard_ids, True, 9,
              lut, shift)
    benchmark.extra_info["pointers_per_s"] = per_s(benchmark, count)


@pytest.mark.parametrize("impl", IMPLS)
def test_swrr_interleave_kernel(benchmark, impl):
    """Smooth weighted round robin over a chunk's per-dataset quotas (sequential by nature:
    the numpy twin is a Python loop, hence its smaller chunk)."""
    mod = use(impl, "curriculum")
    counts = np.array([4096, 8192, 2048, 2048], dtype=np.int64)
    if impl == "numpy":
        counts //= 8
    benchmark(mod.swrr_interleave, counts)
    benchmark.extra_info["positions_per_s"] = per_s(benchmark, counts.sum())


@pytest.mark.parametrize("impl", IMPLS)
def test_chunk_pointers_kernel(benchmark, impl):
    """Interleave component-major pointers into read order (swrr + gather)."""
    mod = use(impl, "curriculum")
    counts = np.array([4096, 8192, 2048, 2048], dtype=np.int64)
    if impl == "numpy":
        counts //= 8
    total = int(counts.sum())
    rng = np.random.default_rng(4)
    shard_ids = rng.integers(0, 100, total, dtype=np.int64)
    sample_idx = rng.integers(0, 1 << 20, total, dtype=np.int64)
    benchmark(mod.chunk_pointers, counts, np.arange(len(counts), dtype=np.int64), shard_ids,
              sample_idx)
    benchmark.extra_info["pointers_per_s"] = per_s(benchmark, total)


@pytest.mark.parametrize("rule", ["closed_form", "earliest_deadline"])
def test_quota_schedule(benchmark, rule):
    """Per-chunk quotas (pure Python: O(C log C) closed form per chunk, or the memoised
    earliest-deadline walk when a dataset is rarer than one sample per chunk); 1,000 chunks
    at random positions of a long run, from a fresh schedule each round."""
    from fractions import Fraction

    from zephon.work.quotas import QuotaSchedule

    if rule == "closed_form":
        weights = [Fraction(1, 4), Fraction(1, 2), Fraction(1, 8), Fraction(1, 8)]
    else:
        weights = [Fraction(1, 3), Fraction(2, 3) - Fraction(1, 100_000), Fraction(1, 100_000)]
    ks = np.random.default_rng(5).integers(0, 100_000, 1000).tolist()

    def go():
        sched = QuotaSchedule(weights, 16_384)
        return [sched.quotas(k) for k in ks]

    benchmark(go)
    benchmark.extra_info["chunks_per_s"] = per_s(benchmark, len(ks))


# ---- JSONL line indexing ---------------------------------------------------------------------
def _jsonl_bytes(n_lines: int = 20_000) -> np.ndarray:
    rng = np.random.default_rng(6)
    lines = [b'{"text": "' + b"x" * int(k) + b'", "id": ' + str(i).encode() + b"}"
             for i, k in enumerate(rng.lognormal(np.log(1500), 0.8, n_lines).astype(int))]
    return np.frombuffer(b"\n".join(lines) + b"\n", dtype=np.uint8)


@pytest.mark.parametrize("impl", IMPLS)
def test_scan_line_starts_kernel(benchmark, impl):
    """Line starts of a JSONL shard: what building its line index costs per byte."""
    mod = use(impl, "lineindex")
    buf = _jsonl_bytes()
    starts, _, _ = benchmark(mod.scan_line_starts, buf, 0, 0, False)
    assert len(starts) == 20_000
    benchmark.extra_info["MB_per_s"] = per_s(benchmark, len(buf) / 1e6)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("fn", ["gather_spans", "key_presence"])
def test_line_span_kernels(benchmark, impl, fn):
    """Gathering the lines a chunk asks for, and the key check run before parsing them."""
    mod = use(impl, "lineindex")
    buf = _jsonl_bytes()
    starts, _, _ = compiled_or_twin("lineindex").scan_line_starts(buf, 0, 0, False)
    ends = np.append(starts[1:] - 1, len(buf) - 1).astype(np.int64)
    pick = np.sort(np.random.default_rng(7).choice(len(starts), 4096, replace=False))
    s, e = np.ascontiguousarray(starts[pick]), np.ascontiguousarray(ends[pick])
    if fn == "gather_spans":
        benchmark(mod.gather_spans, buf, s, e)
    else:
        benchmark(mod.key_presence, buf, s, e, np.frombuffer(b"text", dtype=np.uint8))
    benchmark.extra_info["lines_per_s"] = per_s(benchmark, len(pick))


def _flat_jsonl(n_lines: int = 8192) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat records of every scalar kind: ids, URLs, floats, literals, and texts of ~1 KB with
    escapes and non-ASCII, as web corpora have them; (buffer, line starts, line ends)."""
    rng = np.random.default_rng(8)
    words = ["data", "loader", "caf\u00e9", "na\u00efve", "line\\nbreak", "\\\"quoted\\\"",
             "token", "\u4e2d\u6587", "mixture"]
    lines = []
    for i in range(n_lines):
        text = " ".join(words[j] for j in rng.integers(0, len(words), int(rng.integers(60, 200))))
        lines.append(f'{{"id": {i}, "url": "https://example.com/{i}", "text": "{text}", '
                     f'"score": {rng.random():.4f}, "ok": {"true" if i % 2 else "false"}, '
                     f'"lang": null}}'.encode())
    buf = b"\n".join(lines) + b"\n"
    ends = np.cumsum([len(x) + 1 for x in lines], dtype=np.int64) - 1
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    return np.frombuffer(buf, dtype=np.uint8), starts, ends


@pytest.mark.parametrize("impl", IMPLS)
def test_lineindex_flat_records_kernel(benchmark, impl):
    """Flat records decoded straight out of their line spans (the JSONL reader's fast path)."""
    mod = use(impl, "lineindex_records")
    buf, starts, ends = _flat_jsonl()
    out = benchmark(mod.flat_records, buf, starts, ends)
    assert out is not None and len(out[0]) == 6
    benchmark.extra_info["MB_per_s"] = per_s(benchmark, len(buf) / 1e6)


def compiled_or_twin(name: str):
    from zephon._ext import kernel

    return kernel(name)


def test_padding_fraction_best_fit_vs_first_fit(benchmark):
    offsets, values = corpus(20_000)
    fractions = {a: pack_and_build(offsets, values, a, "cython")["padding_fraction"]
                 for a in ("first_fit", "best_fit", "best_fit_wrap")}
    benchmark.extra_info.update(fractions)
    benchmark.pedantic(lambda: None, rounds=1)
    assert fractions["best_fit"] <= fractions["first_fit"]


# ---- quick summary without pytest-benchmark ----------------------------------------------------
def _best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    print(f"pack + build_rows, max_length={MAX_LEN}, num_bins={NUM_BINS} (ff/bf), one core")
    for impl, n_docs in (("cython", 40_000), ("numpy", 2_000)):
        if impl == "cython" and compiled("packing") is None:
            print("  cython: extension not built")
            continue
        offsets, values = corpus(n_docs)
        for algorithm in ("best_fit", "first_fit", "wrap", "best_fit_wrap"):
            info: dict = {}
            args = (offsets, values, algorithm, impl)
            dt = _best_of(lambda a=args, i=info: i.update(pack_and_build(*a)))
            print(f"  {impl:6s} {algorithm:14s} {offsets[-1] / dt / 1e6:9.1f} M tokens/s   "
                  f"padding {100 * info['padding_fraction']:5.2f}%   ({n_docs} docs)")


if __name__ == "__main__":
    main()
