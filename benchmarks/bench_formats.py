"""Fetch + batch(32) records/s through Zephon against each format's native loader, same shards.

    python benchmarks/bench_formats.py [--records 20000] [--repeats 3] [--workers 0,2]
        [--formats hf,webdataset,mds,litdata,vortex,lance]

Formats: Hugging Face ``save_to_disk`` folders (native: ``datasets``' iterable dataset in a
torch ``DataLoader``, the way ``datasets`` documents multi-worker loading), WebDataset tar
shards (native: ``webdataset.WebDataset(...).batched(32)`` in a ``WebLoader``), MDS (native:
Streaming's ``StreamingDataset`` in a ``DataLoader``), litData chunks (native: litData's
``StreamingDataset`` in its ``StreamingDataLoader``), Vortex files (native: each file's scan in
batches of 32 rows, Arrow) and Lance (native: the dataset's scanner in batches of 32, Arrow);
the last two have no loader of their own, so with workers their files / fragments are split
over the workers of a torch ``DataLoader``. Every system reads
one full pass over the same shards (8 per format, records of ~2 KB text plus an id and a small
JSON member), 0 and 2 workers, after one untimed pass of each (imports, page cache, Zephon's
node cache and member indexes); a pass includes opening the dataset (``Dataset.from_path``,
``load_from_disk``) and starting workers. Systems alternate within each repeat and the table
gives medians and Zephon's ratio to the native loader. Zephon's batches are columnar (Arrow), the native
loaders' lists of dicts (Vortex's and Lance's scans: Arrow batches too): what each hands a
training loop that batches. Needs the ``test`` extra (``datasets``, ``webdataset``, ``torch``,
``pylance``, ``vortex-data``) and ``mosaicml-streaming`` / ``litdata`` (see pyproject.toml).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from torch.utils.data import IterableDataset

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


def zephon_pass(path: str, workers: int) -> int:
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import StaticMixtureWorkSource

    ds = Dataset.from_path("bench", path)
    ws = StaticMixtureWorkSource([ds], {"bench": 1.0}, seed=42)
    p = Pipeline(ws).batch(microbatch_size=32, drop_last=False).options(num_workers=workers)
    total, seen = ds.total(), 0
    try:
        for b in p:
            seen += len(b)
            if seen >= total:
                break
    finally:
        p.close()
    return seen


def hf_native_pass(path: str, workers: int) -> int:
    import datasets
    from torch.utils.data import DataLoader

    ds = datasets.load_from_disk(path).to_iterable_dataset(num_shards=SHARDS)
    loader = DataLoader(ds, batch_size=32, num_workers=workers, collate_fn=list)
    return sum(len(b) for b in loader)


def wds_native_pass(urls: list[str], workers: int) -> int:
    import webdataset as wds

    pipe = wds.WebDataset(urls, shardshuffle=False, empty_check=False).batched(
        32, collation_fn=list, partial=True)
    loader = wds.WebLoader(pipe, batch_size=None, num_workers=workers)
    return sum(len(b) for b in loader)


def mds_native_pass(path: str, workers: int) -> int:
    from tests_support.mds_streaming import streaming_base
    from torch.utils.data import DataLoader

    sb = streaming_base()
    ds = sb.StreamingDataset(local=path, batch_size=32, shuffle=False)
    try:
        # fork: a spawned worker would import all of ``streaming`` (its vision datasets need
        # torchvision, tests_support/mds_streaming.py); litData sets spawn process-wide
        loader = DataLoader(ds, batch_size=32, num_workers=workers, collate_fn=list,
                            multiprocessing_context="fork" if workers else None)
        return sum(len(b) for b in loader)
    finally:
        del ds
        sb.util.clean_stale_shared_memory()


def litdata_native_pass(path: str, workers: int) -> int:
    import litdata

    ds = litdata.StreamingDataset(path)
    loader = litdata.StreamingDataLoader(ds, batch_size=32, num_workers=workers,
                                         collate_fn=list)
    return sum(len(b) for b in loader)


class _Split(IterableDataset):
    """Files (or Lance fragments) split over a torch DataLoader's workers, each scanned by the
    format's own reader in batches of 32 rows."""

    def __init__(self, kind: str, path: str) -> None:
        self.kind, self.path = kind, path

    def __iter__(self):
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        k, n = (info.id, info.num_workers) if info else (0, 1)
        if self.kind == "vortex":
            import vortex as vx

            for f in sorted(Path(self.path).glob("*.vortex"))[k::n]:
                yield from vx.open(str(f)).to_arrow(batch_size=32)
        else:
            import lance

            ds = lance.dataset(self.path)
            yield from ds.scanner(fragments=ds.get_fragments()[k::n], batch_size=32).to_batches()


def split_native_pass(kind: str, path: str, workers: int) -> int:
    if not workers:
        return sum(b.num_rows for b in _Split(kind, path))
    from torch.utils.data import DataLoader

    loader = DataLoader(_Split(kind, path), batch_size=None, num_workers=workers,
                        collate_fn=_rows)
    return sum(loader)


def _rows(batch) -> int:
    return batch.num_rows


def vortex_native_pass(path: str, workers: int) -> int:
    return split_native_pass("vortex", path, workers)


def lance_native_pass(path: str, workers: int) -> int:
    return split_native_pass("lance", path, workers)


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    n = fn(*args)
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--formats", default="hf,webdataset,mds,litdata,vortex,lance")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="zephon-bench-formats-"))
    os.environ.setdefault("ZEPHON_CACHE_DIR", str(root / "cache"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # workers see it
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [sys.path[0],
                                                             os.environ.get("PYTHONPATH")]))
    wanted = args.formats.split(",")
    try:
        cases = []
        if "hf" in wanted:
            hf = write_hf(root, args.records)
            cases.append(("hf save_to_disk", "datasets+DataLoader", str(hf), hf_native_pass,
                          str(hf)))
        if "webdataset" in wanted:
            urls = write_wds(root, args.records)
            cases.append(("webdataset", "webdataset+WebLoader", str(root / "wds"),
                          wds_native_pass, urls))
        natives = {"mds": (write_mds, mds_native_pass, "StreamingDataset+DataLoader"),
                   "litdata": (write_litdata, litdata_native_pass,
                               "litdata StreamingDataLoader"),
                   "vortex": (write_vortex, vortex_native_pass, "vortex scan (Arrow)"),
                   "lance": (write_lance, lance_native_pass, "lance scanner (Arrow)")}
        for name in [f for f in wanted if f in natives]:
            write, native, native_name = natives[name]
            path = str(write(root, args.records))
            cases.append((name, native_name, path, native, path))
        print(f"{args.records} records of ~2 KB, {SHARDS} shards, medians of {args.repeats}; "
              "records/s")
        print(f"{'format':<16}{'workers':>8}{'zephon':>12}{'native':>12}{'ratio':>8}  native")
        for name, native_name, zpath, native, nsrc in cases:
            for w in [int(x) for x in args.workers.split(",")]:
                zephon_pass(zpath, w), native(nsrc, w)  # warm: imports, page cache, node cache
                ours, theirs = [], []
                for _ in range(args.repeats):  # alternating, so drift hits both alike
                    ours.append(timed(zephon_pass, zpath, w))
                    theirs.append(timed(native, nsrc, w))
                z, n = statistics.median(ours), statistics.median(theirs)
                print(f"{name:<16}{w:>8}{z:>12,.0f}{n:>12,.0f}{z / n:>8.2f}  {native_name}",
                      flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
