"""Fetch + batch(32) records/s through Zephon against each format's native loader, same shards.

    python benchmarks/bench_formats.py [--records 20000] [--repeats 3] [--workers 0,2]

Formats: Hugging Face ``save_to_disk`` folders (native: ``datasets``' iterable dataset in a
torch ``DataLoader``, the way ``datasets`` documents multi-worker loading) and WebDataset tar
shards (native: ``webdataset.WebDataset(...).batched(32)`` in a ``WebLoader``). Every system reads
one full pass over the same shards (8 per format, records of ~2 KB text plus an id and a small
JSON member), 0 and 2 workers, after one untimed pass of each (imports, page cache, Zephon's
node cache and member indexes); a pass includes opening the dataset (``Dataset.from_path``,
``load_from_disk``) and starting workers. Systems alternate within each repeat and the table
gives medians and Zephon's ratio to the native loader. Zephon's batches are columnar (Arrow), the native
loaders' lists of dicts: what each hands a training loop that batches. Needs the ``test`` extra
(``datasets``, ``webdataset``, ``torch``).
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


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    n = fn(*args)
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default="0,2")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="zephon-bench-formats-"))
    os.environ.setdefault("ZEPHON_CACHE_DIR", str(root / "cache"))
    try:
        hf, urls = write_hf(root, args.records), write_wds(root, args.records)
        cases = [("hf save_to_disk", "datasets+DataLoader", str(hf), hf_native_pass, str(hf)),
                 ("webdataset", "webdataset+WebLoader", str(root / "wds"), wds_native_pass,
                  urls)]
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
