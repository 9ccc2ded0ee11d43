"""Fetch + batch(32) records/s through Zephon against each format's native loader, same shards.

    python benchmarks/bench_formats.py [--records 20000] [--repeats 3] [--workers 0,2]
        [--seconds 2] [--formats hf,webdataset,mds,litdata,vortex,lance] [--json out.json]

Formats: Hugging Face ``save_to_disk`` folders (native: ``datasets``' iterable dataset in a
torch ``DataLoader``, the way ``datasets`` documents multi-worker loading), WebDataset tar
shards (native: ``webdataset.WebDataset(...).batched(32)`` in a ``WebLoader``), MDS (native:
Streaming's ``StreamingDataset`` in a ``DataLoader``), litData chunks (native: litData's
``StreamingDataset`` in its ``StreamingDataLoader``), Vortex files (native: each file's scan,
``to_arrow(batch_size=32)``) and Lance (native: the dataset's scanner, ``to_batches`` with
``batch_size=32``); the last two have no loader of their own, so with workers their files /
fragments are split over the workers of a torch ``DataLoader`` (each worker opens its files
once and scans them pass after pass) and the Arrow batches are handed to the main process;
Lance's workers start by forkserver, as Lance asks (forked ones hang at times here).

Measured as the main benchmark measures (``zephon/bench/meter.py``, README "How it
measures"): every system streams pass after pass over the same shards (8 per format, records
of ~2 KB text plus an id and a small JSON member) - Zephon with ``exhausted_policy="repeat"``,
the native loaders with their own repeat (``datasets``' ``repeat(None)``, WebDataset's
``repeat()``, a file/fragment loop for Vortex and Lance) or, for MDS and litData, which have
none, by iterating their loader again with persistent workers. *first batch* is the time from
opening the dataset (``Dataset.from_path``, ``load_from_disk``, ...) and starting workers to
the first batch; *steady* is the records/s over a window after it of ``--seconds`` (twice that
with workers); *pass* is the records/s of the first whole pass (``--records``) counted from
opening the dataset, start-up included (a run goes on until it has both). Each cell starts with one short untimed run of each
system (imports, page cache, Zephon's node cache and member indexes); then the systems
alternate run by run and the table gives medians and Zephon's ratio to the native loader.
Zephon's batches are columnar (Arrow), the native loaders' lists of dicts (Vortex's and
Lance's scans: Arrow batches too): what each hands a training loop that batches. Needs the
``test`` extra (``datasets``, ``webdataset``, ``torch``, ``pylance``, ``vortex-data``) and
``mosaicml-streaming`` / ``litdata`` (see pyproject.toml).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from torch.utils.data import IterableDataset

from zephon.bench.meter import Meter, rate

SHARDS = 8
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def _text(i: int) -> str:
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(330)]  # ~2 KB
    return " ".join(words)


def write_hf(root: Path, n: int) -> Path:
    import datasets

    ds = datasets.Dataset.from_dict({"id": list(range(n)), "text": [_text(i) for i in range(n)],
                                     "meta": [f'{{"i": {i}}}' for i in range(n)]})
    out = root / "hf"
    ds.save_to_disk(str(out), num_shards=SHARDS)
    return out


def write_wds(root: Path, n: int) -> list[str]:
    import webdataset as wds

    out = root / "wds"
    out.mkdir()
    per = -(-n // SHARDS)
    urls = []
    for s in range(SHARDS):
        path = out / f"shard-{s:04d}.tar"
        with wds.TarWriter(str(path)) as w:
            for i in range(s * per, min(n, (s + 1) * per)):
                w.write({"__key__": f"{i:08d}", "txt": _text(i).encode(),
                         "json": f'{{"i": {i}}}'.encode()})
        urls.append(str(path))
    return urls


def _columns(n: int):
    return list(range(n)), [_text(i) for i in range(n)], [f'{{"i": {i}}}' for i in range(n)]


def write_mds(root: Path, n: int) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tests_support.mds_streaming import streaming_base

    out = root / "mds"
    ids, texts, metas = _columns(n)
    with streaming_base().MDSWriter(out=str(out), size_limit=-(-n * 2200 // SHARDS),
                                    columns={"id": "int", "text": "str", "meta": "str"}) as w:
        for i in ids:
            w.write({"id": i, "text": texts[i], "meta": metas[i]})
    return out


def write_litdata(root: Path, n: int) -> Path:
    import litdata

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tests_support.litdata_records import bench_text

    out = root / "litdata"
    litdata.optimize(fn=bench_text, inputs=list(range(n)), output_dir=str(out), num_workers=1,
                     chunk_bytes=-(-n * 2200 // SHARDS))
    return out


def _table(start: int, stop: int):
    import pyarrow as pa

    ids, texts, metas = _columns(stop)
    return pa.table({"id": ids[start:stop], "text": texts[start:stop], "meta": metas[start:stop]})


def write_vortex(root: Path, n: int) -> Path:
    import vortex as vx

    out = root / "vortex"
    out.mkdir()
    per = -(-n // SHARDS)
    for s in range(SHARDS):
        vx.io.write(_table(s * per, min(n, (s + 1) * per)), str(out / f"part-{s:03d}.vortex"))
    return out


def write_lance(root: Path, n: int) -> Path:
    import lance

    out = root / "ds.lance"
    lance.write_dataset(_table(0, n), str(out), max_rows_per_file=-(-n // SHARDS))
    return out


def zephon_stream(path: str, workers: int) -> Iterator[int]:
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import StaticMixtureWorkSource

    ds = Dataset.from_path("bench", path)
    ws = StaticMixtureWorkSource([ds], {"bench": 1.0}, seed=42, exhausted_policy="repeat")
    p = Pipeline(ws).batch(microbatch_size=32, drop_last=False).options(num_workers=workers)
    try:
        for b in p:
            yield len(b)
    finally:
        p.close()


def _epochs(loader) -> Iterator:
    """Pass after pass of a loader whose dataset cannot repeat itself (workers persist)."""
    while True:
        n = 0
        for b in loader:
            n += 1
            yield b
        if not n:
            return


def hf_native_stream(path: str, workers: int) -> Iterator[int]:
    import datasets
    from torch.utils.data import DataLoader

    ds = datasets.load_from_disk(path).to_iterable_dataset(num_shards=SHARDS).repeat(None)
    loader = DataLoader(ds, batch_size=32, num_workers=workers, collate_fn=list)
    for b in loader:
        yield len(b)


def wds_native_stream(urls: list[str], workers: int) -> Iterator[int]:
    import webdataset as wds

    pipe = wds.WebDataset(urls, shardshuffle=False, empty_check=False).repeat().batched(
        32, collation_fn=list, partial=True)
    for b in wds.WebLoader(pipe, batch_size=None, num_workers=workers):
        yield len(b)


def mds_native_stream(path: str, workers: int) -> Iterator[int]:
    from tests_support.mds_streaming import streaming_base
    from torch.utils.data import DataLoader

    sb = streaming_base()
    ds = sb.StreamingDataset(local=path, batch_size=32, shuffle=False)
    try:
        # fork: a spawned worker would import all of ``streaming`` (its vision datasets need
        # torchvision, tests_support/mds_streaming.py); litData sets spawn process-wide
        loader = DataLoader(ds, batch_size=32, num_workers=workers, collate_fn=list,
                            persistent_workers=workers > 0,
                            multiprocessing_context="fork" if workers else None)
        for b in _epochs(loader):
            yield len(b)
    finally:
        del ds
        sb.util.clean_stale_shared_memory()


def litdata_native_stream(path: str, workers: int) -> Iterator[int]:
    import litdata

    ds = litdata.StreamingDataset(path)
    loader = litdata.StreamingDataLoader(ds, batch_size=32, num_workers=workers,
                                         collate_fn=list, persistent_workers=workers > 0)
    for b in _epochs(loader):
        yield len(b)


class _Split(IterableDataset):
    """Files (or Lance fragments) split over a torch DataLoader's workers; each worker opens its
    files once and scans them with the format's own reader in batches of 32 rows, pass after
    pass."""

    def __init__(self, kind: str, path: str) -> None:
        self.kind, self.path = kind, path

    def __iter__(self):
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        k, n = (info.id, info.num_workers) if info else (0, 1)
        if self.kind == "vortex":
            import vortex as vx

            files = [vx.open(str(f)) for f in sorted(Path(self.path).glob("*.vortex"))[k::n]]
            while True:
                for f in files:
                    yield from f.to_arrow(batch_size=32)
        else:
            import lance

            ds = lance.dataset(self.path)
            fragments = ds.get_fragments()[k::n]
            while True:
                yield from ds.scanner(fragments=fragments, batch_size=32).to_batches()


def split_native_stream(kind: str, path: str, workers: int) -> Iterator[int]:
    if not workers:
        for b in _Split(kind, path):
            yield b.num_rows
        return
    from torch.utils.data import DataLoader

    # batch_size=None: each Arrow batch goes to the main process as the worker made it. Lance
    # is not fork-safe (its warning says to use spawn or forkserver): a worker forked from a
    # process that has read Lance on other threads can hang in its first scan
    ctx = "forkserver" if kind == "lance" else None
    for b in DataLoader(_Split(kind, path), batch_size=None, num_workers=workers,
                        multiprocessing_context=ctx):
        yield b.num_rows


def vortex_native_stream(path: str, workers: int) -> Iterator[int]:
    return split_native_stream("vortex", path, workers)


def lance_native_stream(path: str, workers: int) -> Iterator[int]:
    return split_native_stream("lance", path, workers)


def measured(stream: Callable[..., Iterator[int]], source: Any, workers: int,
             seconds: float, records: int) -> dict:
    """One run: ``stream`` opens its dataset and loader, then delivers batches (their sizes)
    until the meter has ``seconds`` of steady state and one whole pass (``records``) is in;
    ``pass_s`` is the time from opening to the end of that pass, start-up included."""
    meter = Meter("records", seconds)
    metered, seen, pass_s = True, 0, None
    it = stream(source, workers)
    try:
        for n in it:
            seen += n
            if pass_s is None and seen >= records:
                pass_s = time.perf_counter() - meter.t0
            metered = metered and not meter.add(n)  # the meter's window ends where it says
            if not metered and pass_s is not None:
                break
    finally:
        it.close()  # closes the pipeline / lets the loader's workers go
        del it
        gc.collect()
    return meter.result(pass_s=pass_s, pass_records=seen if pass_s is None else records)


def _median(runs: list[dict], figure: Callable[[dict], float]) -> float:
    return statistics.median(figure(r) for r in runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--seconds", type=float, default=2.0,
                    help="steady state measured per run (twice that with workers)")
    ap.add_argument("--formats", default="hf,webdataset,mds,litdata,vortex,lance")
    ap.add_argument("--json", help="also write every run's figures here")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="zephon-bench-formats-"))
    os.environ.setdefault("ZEPHON_CACHE_DIR", str(root / "cache"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # workers see it
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [sys.path[0],
                                                             os.environ.get("PYTHONPATH")]))
    wanted = args.formats.split(",")
    runs: list[dict] = []
    try:
        cases = []
        if "hf" in wanted:
            hf = write_hf(root, args.records)
            cases.append(("hf save_to_disk", "datasets+DataLoader", str(hf), hf_native_stream,
                          str(hf)))
        if "webdataset" in wanted:
            urls = write_wds(root, args.records)
            cases.append(("webdataset", "webdataset+WebLoader", str(root / "wds"),
                          wds_native_stream, urls))
        natives = {"mds": (write_mds, mds_native_stream, "StreamingDataset+DataLoader"),
                   "litdata": (write_litdata, litdata_native_stream,
                               "litdata StreamingDataLoader"),
                   "vortex": (write_vortex, vortex_native_stream, "vortex scan (Arrow)"),
                   "lance": (write_lance, lance_native_stream, "lance scanner (Arrow)")}
        for name in [f for f in wanted if f in natives]:
            write, native, native_name = natives[name]
            path = str(write(root, args.records))
            cases.append((name, native_name, path, native, path))
        print(f"{args.records} records of ~2 KB, {SHARDS} shards, medians of {args.repeats} "
              f"runs; steady: records/s over {args.seconds:g} s after the first batch "
              f"({2 * args.seconds:g} s with workers); pass: records/s of the first whole pass "
              "from opening the dataset, start-up included; 1st: seconds to the first batch")
        print(f"{'format':<12}{'workers':>8}{'steady Z':>10}{'native':>10}{'ratio':>7}"
              f"{'pass Z':>10}{'native':>10}{'ratio':>7}{'1st Z':>8}{'native':>8}  native")
        for name, native_name, zpath, native, nsrc in cases:
            for w in [int(x) for x in args.workers.split(",")]:
                seconds = args.seconds * (2 if w else 1)
                systems = {"zephon": (zephon_stream, zpath), "native": (native, nsrc)}
                for fn, src in systems.values():  # warm: imports, page cache, node cache
                    measured(fn, src, w, 0.2, 0)
                got: dict[str, list[dict]] = {s: [] for s in systems}
                for i in range(args.repeats):  # alternating, so drift hits both alike
                    for system, (fn, src) in systems.items():
                        run = measured(fn, src, w, seconds, args.records)
                        got[system].append(run)
                        runs.append({"format": name, "workers": w, "system": system,
                                     "repeat": i, "rate": rate(run, "records"), **run})
                z, n = (_median(got[s], lambda r: rate(r, "records")) for s in systems)
                pz, pn = (_median(got[s], lambda r: r["pass_records"] / r["pass_s"])
                          for s in systems)
                fz, fn_ = (_median(got[s], lambda r: r["first_batch_s"]) for s in systems)
                print(f"{name:<12}{w:>8}{z:>10,.0f}{n:>10,.0f}{z / n:>7.2f}{pz:>10,.0f}"
                      f"{pn:>10,.0f}{pz / pn:>7.2f}{fz:>8.3f}{fn_:>8.3f}  {native_name}",
                      flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if args.json:
            Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
