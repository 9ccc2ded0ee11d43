"""Engine benchmarks: worker scaling, ring transport, per-batch overhead, fetch + batch.

    python -m pytest benchmarks/bench_engine.py --benchmark-only -p no:cacheprovider
    python benchmarks/bench_engine.py [--json out.json]      # the comparative table

- scaling: a CPU-bound pure-Python ``map_transform``, records/s with 1 and 2 worker
  processes (steady state: timed from the first batch); target >= 1.8x on 2 cores. Next to
  it, the same function split over two bare processes: the scaling the machine offers at that
  moment (on a shared machine other load caps both);
- ring: a producer process writes 4 MiB frames into its slots and the consumer decodes each,
  as views that hand the slot back when dropped (the coordinator's path for worker results),
  or copying it out first (its fallback); GB/s against a plain memcpy of the same number of
  bytes in one process; target >= 50%;
- per-batch overhead: a trivial pipeline (8-byte records, fetch + batch(32)), wall and
  training-process CPU microseconds per batch, per runner;
- fetch + batch over Parquet (120k documents of ~2 KB) with 2 workers, records/s, against
  pyarrow reading the same files whole; target >= 80%. The same pipeline on the threads runner and
  inline follows, for choosing a runner; then the same documents in 5000-row groups (row groups
  of several micro-batches, as many real files have), with 2 workers and inline;
- the machine's ceiling for that read with worker processes: a bare loader (no engine, no
  coordinator) whose 2 processes decode every other row group whole into their own slots, the
  consumer cutting 32-record batches as slices of the mapped frames, or gathering each batch
  (what an interleaved mixture or a within-shard shuffle needs), against pyarrow.

Compared measurements are taken turn about (best of three each), so that drift in the
machine's load weighs on both sides alike.

Comparing two source trees (``PYTHONPATH=old-tree``): start the runs from a directory outside
both. Started from a checkout, the coordinator and the workers (forkserver children) were seen
importing ``zephon`` from that checkout, whatever ``PYTHONPATH`` said, while the training process
ran the other tree: the comparison then measures one tree against a mix.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from zephon import Pipeline
from zephon.block import Block

# -- a trivial work source (module level, so worker processes can import it) --------------------
from zephon.engine.process import shm
from zephon.engine.process.frames import FrameWriter, read_frame


class TinyChunk:
    def __init__(self, a: int, b: int) -> None:
        self.sample_idx = np.arange(a, b, dtype=np.int64)
        self.dataset_id = np.zeros(b - a, dtype=np.int64)
        self.shard_id = np.zeros(b - a, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.sample_idx)


class TinyDataset:
    name = "tiny"

    def read_table(self, shard_id: int, rows) -> pa.Table:
        return pa.table({"x": np.asarray(rows, dtype=np.int64)})


class TinySource:
    def __init__(self, records: int, chunk: int = 16384) -> None:
        self.records, self.chunk = records, chunk
        self.datasets_by_id = {0: TinyDataset()}

    def component_ids(self) -> dict[str, int]:
        return {"tiny": 0}

    def lane_chunk(self, lane_id: int, lanes: int, chunk_id: int):
        a = (chunk_id * lanes + lane_id) * self.chunk
        return TinyChunk(a, min(a + self.chunk, self.records)) if a < self.records else None


def busy(p: dict) -> dict:
    acc = 0
    for i in range(3000):
        acc = (acc * 31 + i) % 1000003
    p["busy"] = acc
    return p


def _drain(pipeline) -> tuple[int, int, float, float]:
    """(batches, records, wall seconds, training-process CPU seconds), from the first batch."""
    it = iter(pipeline)
    first = next(it)
    t0, c0 = time.perf_counter(), time.process_time()
    batches, records = 0, 0
    for b in it:
        batches += 1
        records += len(b)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    del first
    return batches, records, wall, cpu


# -- the measurements ---------------------------------------------------------------------------


def scaling(workers: int, records: int = 12_000) -> float:
    # ~2.5 s on one worker: long enough that start-up and the last micro-batches do not weigh
    p = (Pipeline(TinySource(records, chunk=500)).map_transform(busy).batch(10)
         .options(num_workers=workers, micro_batch_size=50))
    _, n, wall, _ = _drain(p)
    return n / wall


def _busy_many(n: int) -> None:
    for _ in range(n):
        busy({})


def machine_scaling(records: int = 12_000) -> float:
    """The same work split over two bare processes against one: what the machine allows right
    now (on a shared machine, other load caps every scaling figure)."""
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(_busy_many, [0, 0])  # started and warm before timing
        t0 = time.perf_counter()
        pool.map(_busy_many, [records], chunksize=1)
        t1 = time.perf_counter()
        pool.map(_busy_many, [records // 2, records - records // 2], chunksize=1)
        t2 = time.perf_counter()
    return (t1 - t0) / (t2 - t1)


def per_batch(runner: str, workers: int, records: int = 200_000) -> tuple[float, float]:
    """(wall µs per batch, training-process CPU µs per batch)."""
    p = (Pipeline(TinySource(records)).batch(32)
         .options(runner=runner, num_workers=workers, micro_batch_size=4096))
    batches, _, wall, cpu = _drain(p)
    return 1e6 * wall / batches, 1e6 * cpu / batches


def _producer(conn, prefix: str, frame_bytes: int, frames: int, slots: int) -> None:
    pool = shm.SlotPool(prefix, "bench_", slots, frame_bytes + (1 << 20))
    conn.send(pool.names)
    payload = pa.table({"bytes": pa.array([os.urandom(frame_bytes)], pa.binary())})
    block = Block({"sample_idx": np.zeros(1, np.int64)}, payload)
    free = list(range(slots))
    for _ in range(frames):
        while not free:
            free.extend(conn.recv())
        slot = free.pop()
        writer = FrameWriter(pool.view(slot))
        writer.add("block", block)
        conn.send((slot, writer.finish()))
    conn.send(None)
    conn.recv()


def ring(total_bytes: int = 2 << 30, frame_bytes: int = 4 << 20, slots: int = 4,
         copy: bool = False) -> float:
    """GB/s through a slot ring: a producer process writes frames, the consumer reads each as
    views and hands the slot back when they die (the coordinator's path), or with ``copy``
    copies each out first (its fallback when all of a worker's slots are held)."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    prefix = f"zephon_bench_{uuid.uuid4().hex[:8]}_"
    frames = total_bytes // frame_bytes
    proc = ctx.Process(target=_producer, args=(there, prefix, frame_bytes, frames, slots))
    proc.start()
    views, buffers, leases = shm.SlotViews(), shm.PrivateBuffers(keep=slots), shm.Leases()
    views.attach_all(here.recv())
    moved = 0
    t0 = None
    while (msg := here.recv()) is not None:
        slot, n = msg
        if t0 is None:  # exclude the producer's start-up
            t0 = time.perf_counter()
        else:
            moved += n
        if copy:
            root = buffers.copy(views.map(slot), n)
            here.send([slot])
        else:
            root = np.frombuffer(views.map(slot), np.uint8, count=n)
            leases.lend(root, slot)
        ((_, block, _),) = read_frame(root)
        assert block.payload.num_rows == 1
        del root, block
        if not copy:
            here.send(leases.returned())
    rate = moved / (time.perf_counter() - t0) / 1e9
    here.send(None)
    proc.join()
    shm.sweep(prefix)
    return rate


def memcpy(total_bytes: int = 2 << 30, span: int = 256 << 20) -> float:
    """One process copying the same number of bytes between two buffers too large for the CPU
    caches (a 4 MiB buffer copied onto itself over and over would measure the cache)."""
    src = np.frombuffer(os.urandom(span), np.uint8)
    dst = np.ones_like(src)  # touched: no page faults inside the timing
    t0 = time.perf_counter()
    for _ in range(max(1, total_bytes // span)):
        np.copyto(dst, src)
    return max(1, total_bytes // span) * span / (time.perf_counter() - t0) / 1e9


def parquet_corpus(root: Path, docs: int = 120_000) -> Path:
    """8 shards of ~2 KB documents in 1024-row groups. 120k documents: at 2 workers' ~300k
    records/s that is ~0.4 s from first batch to last (40k left ~0.13 s, mostly the time the
    pipeline takes to fill and drain)."""
    from zephon import synthetic

    path = root / "web"
    if not path.exists():
        synthetic.write_dataset(root, "web", docs, n_shards=8, fmt="parquet", seed=3,
                                mean_words=330)
    return path


def regrouped(path: Path, rows: int) -> Path:
    """The corpus at ``path`` rewritten in row groups of ``rows`` (next to it, once): the same
    documents laid out as many real Parquet files are, in row groups of many micro-batches."""
    import pyarrow.parquet as pq

    out = path.parent / f"{path.name}-rg{rows}"
    if not out.exists():
        tmp = path.parent / f".{out.name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        for f in sorted(path.glob("*.parquet")):
            pq.write_table(pq.read_table(f), tmp / f.name, row_group_size=rows)
        tmp.rename(out)
    return out


def fetch_batch(path: Path, workers: int, runner: str = "process") -> float:
    from zephon.io import Dataset
    from zephon.io.formats.parquet_reader import row_group_cache
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    row_group_cache().clear()  # an in-process runner must not find the last run's row groups
    ws = StaticMixtureWorkSource([Dataset.from_path("web", path)], MixtureSpec({"web": 1.0}),
                                 seed=42)
    p = Pipeline(ws).batch(32).options(num_workers=workers)
    if workers:
        p = p.options(runner=runner)
    _, n, wall, _ = _drain(p)
    return n / wall


def raw_parquet(path: Path) -> float:
    """pyarrow reading the files whole (its own threads), on Zephon's allocator: the limit."""
    import pyarrow.parquet as pq

    from zephon.arrow_memory import use_decode_pool

    use_decode_pool()

    files = sorted(path.glob("*.parquet"))
    t0 = time.perf_counter()
    n = sum(pq.read_table(f).num_rows for f in files)
    return n / (time.perf_counter() - t0)


def _row_groups(path: Path) -> list[tuple[str, int]]:
    import pyarrow.parquet as pq

    return [(str(f), g) for f in sorted(path.glob("*.parquet"))
            for g in range(pq.ParquetFile(f).metadata.num_row_groups)]


def _decoder(conn, prefix: str, path: Path, worker: int, workers: int, slots: int,
             slot_bytes: int) -> None:
    """A bare worker: every ``workers``-th row group decoded whole into its own slots."""
    import pyarrow.parquet as pq

    from zephon.arrow_memory import use_decode_pool

    use_decode_pool()
    pool = shm.SlotPool(prefix, f"bare{worker}_", slots, slot_bytes)
    conn.send(pool.names)
    free, files = list(range(slots)), {}
    for f, g in _row_groups(path)[worker::workers]:
        while not free:
            free.extend(conn.recv())
        slot = free.pop()
        pf = files.get(f) or files.setdefault(f, pq.ParquetFile(f))
        table = pf.read_row_group(g, use_threads=False)
        writer = FrameWriter(pool.view(slot))
        if not writer.add("block", Block({"sample_idx": np.zeros(table.num_rows, np.int64)},
                                         table)):
            raise RuntimeError(f"row group {g} of {f} is larger than a slot")
        conn.send((slot, writer.finish()))
    conn.send(None)
    conn.recv()  # the consumer is done with the slots


def bare_loader(path: Path, gather: bool = False, workers: int = 2, slots: int = 4,
                slot_bytes: int = 8 << 20) -> float:
    """Records/s of the bare two-process loader: row group ``i`` comes from process
    ``i % workers``, in order; batches of 32 are slices of the mapped frame, or with ``gather``
    each is a take of 32 rows in a permuted order. Timed from the first frame."""
    ctx = multiprocessing.get_context("spawn")
    prefix = f"zephon_bench_{uuid.uuid4().hex[:8]}_"
    pipes = [ctx.Pipe() for _ in range(workers)]
    procs = [ctx.Process(target=_decoder, args=(there, prefix, path, w, workers, slots,
                                                slot_bytes))
             for w, (_, there) in enumerate(pipes)]
    for proc in procs:
        proc.start()
    try:
        views, leases = [], [shm.Leases() for _ in range(workers)]
        for here, _ in pipes:
            views.append(shm.SlotViews())
            views[-1].attach_all(here.recv())
        records, t0, w, ended = 0, None, 0, 0
        rng = np.random.default_rng(0)
        while ended < workers:
            here = pipes[w][0]
            msg = here.recv()
            if msg is None:
                ended += 1
            else:
                if t0 is None:
                    t0 = time.perf_counter()
                slot, n = msg
                root = np.frombuffer(views[w].map(slot), np.uint8, count=n)
                leases[w].lend(root, slot)
                ((_, block, _),) = read_frame(root)
                table = block.payload
                order = pa.array(rng.permutation(table.num_rows)) if gather else None
                batch = None
                for a in range(0, table.num_rows, 32):
                    batch = table.take(order[a:a + 32]) if gather else table.slice(a, 32)
                    records += batch.num_rows
                del root, block, table, batch, order  # the views die: the slot can go back
                here.send(leases[w].returned())
            w = (w + 1) % workers
        rate = records / (time.perf_counter() - t0)
        for here, _ in pipes:
            here.send(None)
        for proc in procs:
            proc.join()
        return rate
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
        shm.sweep(prefix)


def best(fn, *args, repeat: int = 3):
    return max(fn(*args) for _ in range(repeat))


def interleaved(a, b, rounds: int = 3) -> tuple[float, float]:
    """Best of ``rounds`` for each of two measurements taken turn about, so that a change in
    the machine's load during the run weighs on both sides alike."""
    ra, rb = [], []
    for _ in range(rounds):
        ra.append(a())
        rb.append(b())
    return max(ra), max(rb)


# -- pytest-benchmark ---------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_scaling_cpu_bound_map(benchmark, workers):
    rate = benchmark.pedantic(scaling, args=(workers,), rounds=3, iterations=1)
    benchmark.extra_info["records_per_s"] = rate


@pytest.mark.parametrize("copy", [False, True], ids=["views", "copy-out"])
def test_ring_transport(benchmark, copy):
    rate = benchmark.pedantic(ring, args=(512 << 20,), kwargs={"copy": copy}, rounds=3,
                              iterations=1)
    benchmark.extra_info["GB_per_s"] = rate
    benchmark.extra_info["memcpy_GB_per_s"] = memcpy(1 << 30)


@pytest.mark.parametrize("runner,workers", [("inline", 0), ("threads", 2), ("process", 2)])
def test_per_batch_overhead(benchmark, runner, workers):
    wall, cpu = benchmark.pedantic(per_batch, args=(runner, workers, 50_000), rounds=3,
                                   iterations=1)
    benchmark.extra_info.update(wall_us_per_batch=wall, training_cpu_us_per_batch=cpu)


@pytest.mark.parametrize("group_rows", [1024, 5000], ids=["rg1024", "rg5000"])
def test_fetch_batch_parquet(benchmark, tmp_path_factory, group_rows):
    path = parquet_corpus(tmp_path_factory.mktemp("pq"), docs=10_000)
    if group_rows != 1024:
        path = regrouped(path, group_rows)
    rate = benchmark.pedantic(fetch_batch, args=(path, 2), rounds=3, iterations=1)
    benchmark.extra_info.update(records_per_s=rate, pyarrow_records_per_s=best(raw_parquet, path))


@pytest.mark.parametrize("gather", [False, True], ids=["slices", "gathered"])
def test_bare_two_process_loader(benchmark, tmp_path_factory, gather):
    path = parquet_corpus(tmp_path_factory.mktemp("pq"), docs=10_000)
    rate = benchmark.pedantic(bare_loader, args=(path, gather), rounds=3, iterations=1)
    benchmark.extra_info.update(records_per_s=rate, pyarrow_records_per_s=best(raw_parquet, path))


# -- comparative runner -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--data", help="where the Parquet corpus is generated (default: a temp dir)")
    args = ap.parse_args(argv)
    rows = []

    s1, s2 = interleaved(lambda: scaling(1), lambda: scaling(2))
    rows.append(("scaling: CPU-bound map, records/s", f"1 worker {s1:,.0f}",
                 f"2 workers {s2:,.0f}", s2 / s1, 1.8))
    bare = best(machine_scaling)
    rows.append(("scaling: 2 bare processes (machine)", "", "", bare, None))
    r, m = interleaved(ring, memcpy)
    rc = best(lambda: ring(copy=True))
    rows.append(("ring transport, GB/s (views)", f"ring {r:.2f}", f"memcpy {m:.2f}", r / m, 0.5))
    rows.append(("ring transport, GB/s (copy-out)", f"ring {rc:.2f}", f"memcpy {m:.2f}", rc / m,
                 0.5))
    for runner, w in (("inline", 0), ("threads", 2), ("process", 1), ("process", 2)):
        wall, cpu = min(per_batch(runner, w) for _ in range(3))
        rows.append((f"per-batch overhead, {runner} x{w}", f"wall {wall:.1f} us",
                     f"training CPU {cpu:.1f} us", None, None))
    root = Path(args.data or tempfile.mkdtemp(prefix="zephon-bench-"))
    path = parquet_corpus(root)
    f, raw = interleaved(lambda: fetch_batch(path, 2), lambda: raw_parquet(path))
    rows.append(("fetch+batch Parquet, records/s", f"2 workers {f:,.0f}", f"pyarrow {raw:,.0f}",
                 f / raw, 0.8))
    # the other runners on the same pipeline, for choosing one (no target)
    for label, workers, runner in (("threads x2", 2, "threads"), ("inline", 0, "inline")):
        f, raw = interleaved(lambda w=workers, r=runner: fetch_batch(path, w, r),
                             lambda: raw_parquet(path))
        rows.append((f"  same, runner {label}", f"{f:,.0f}", f"pyarrow {raw:,.0f}", f / raw,
                     None))
    # row groups of 5 micro-batches: each is decoded by its owner only, told a window ahead
    big = regrouped(path, 5000)
    for label, workers, runner in (("2 workers", 2, "process"), ("inline", 0, "inline")):
        f, raw = interleaved(lambda w=workers, r=runner: fetch_batch(big, w, r),
                             lambda: raw_parquet(big))
        rows.append((f"  5000-row groups, {label}", f"{f:,.0f}", f"pyarrow {raw:,.0f}",
                     f / raw, None))
    # what worker processes can reach on this machine without an engine: the ceiling
    for label, gather in (("slices", False), ("gathered", True)):
        f, raw = interleaved(lambda g=gather: bare_loader(path, g), lambda: raw_parquet(path))
        rows.append((f"  bare 2-process loader, {label}", f"{f:,.0f}", f"pyarrow {raw:,.0f}",
                     f / raw, None))

    print(f"{'benchmark':<38} {'zephon':>24} {'baseline':>24} {'ratio':>7} {'target':>7}")
    for name, a, b, ratio, target in rows:
        rt = "" if ratio is None else f"{ratio:.2f}"
        tg = "" if target is None else f">={target}"
        print(f"{name:<38} {a:>24} {b:>24} {rt:>7} {tg:>7}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
