"""Reading raw rows without a pipeline: ``DatasetInspector`` and ``python -m zephon inspect``.

``inspect`` shows every format of the root (shards and rows of each, a few rows of the first
shard of each) and the files it does not read: those that look like data and the rest
(formats/classify.py)."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from zephon.io.catalog.discovery import root_files
from zephon.io.dataset import Dataset
from zephon.io.formats.classify import classify, supported
from zephon.io.options import StoreOptions

__all__ = ["DatasetInspector", "inspect_main"]


class DatasetInspector:
    """Raw payloads of a dataset, one process, not thread-safe; same readers and cache as
    fetch, without metadata, ordering, batching or workers. A context manager.

    Args:
        dataset: The dataset to read.
        io_options: Storage options (``StoreOptions`` or a dict) to read it with.
    """

    def __init__(self, dataset: Dataset, *, io_options: StoreOptions | dict | None = None) -> None:
        self._dataset = dataset.with_store_options(io_options) if io_options is not None \
            else dataset.with_store_options(dataset._store_options)
        self._closed = False

    @property
    def dataset(self) -> Dataset:
        """The dataset read (with ``io_options`` applied)."""
        return self._dataset

    def formats(self) -> dict[str, int]:
        """Shards per format, e.g. ``{"jsonl": 3, "parquet": 2}``."""
        return self._dataset.formats()

    def shard_format(self, shard_id: int) -> str:
        """The format one shard is read in (``"jsonl"``, ``"parquet"``, ..., ``"memory"``).

        Args:
            shard_id: The shard's id; an unknown one raises ``KeyError``.

        Returns:
            The format's registered name.
        """
        return self._dataset.shard_format(shard_id)

    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("DatasetInspector is closed")

    def read(self, shard_id: int, sample_index: int) -> Any:
        """One raw payload.

        Args:
            shard_id: The shard's id.
            sample_index: The row within the shard.

        Returns:
            The payload.
        """
        self._check()
        return self._dataset.read_payloads(shard_id, [int(sample_index)])[0]

    def read_many(self, shard_id: int, sample_indices: Sequence[int]) -> list[Any]:
        """Payloads in the order asked for; an empty list does no I/O.

        Args:
            shard_id: The shard's id.
            sample_indices: Rows within the shard.

        Returns:
            The payloads.
        """
        self._check()
        idx = [int(i) for i in sample_indices]
        if not idx:
            return []
        return self._dataset.read_payloads(shard_id, idx)

    def close(self) -> None:
        """Close the dataset's open readers; the inspector cannot be used afterwards."""
        if not self._closed:
            self._closed = True
            self._dataset.close()

    def __enter__(self) -> DatasetInspector:
        self._check()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _json_default(value: Any) -> Any:
    """Parquet payloads hold NumPy arrays and scalars (spec addendum A.10): print their values."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    return repr(value)


def inspect_main(argv: list[str] | None = None) -> int:
    """``python -m zephon inspect URL [--format F] [--rows N] [--shard ID]``: shards, rows,
    bytes and a few rows of a dataset.

    Args:
        argv: The arguments after ``inspect`` (default ``sys.argv[1:]``).

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(prog="python -m zephon inspect",
                                     description="shard count, rows, bytes and a few rows")
    parser.add_argument("url", help="dataset directory or URL")
    parser.add_argument("--format", dest="fmt", default=None, choices=list(supported()))
    parser.add_argument("--rows", type=int, default=3, help="rows to print (default 3)")
    parser.add_argument("--shard", type=int, default=None,
                        help="shard id (default: the first of each format)")
    parser.add_argument("--width", type=int, default=200, help="characters per printed row")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        with warnings.catch_warnings():  # the files a warning would name are listed below
            warnings.simplefilter("ignore", UserWarning)
            ds = Dataset.from_path("inspect", args.url, fmt=args.fmt)
        listing = root_files(ds._location, ds.name)
    except (OSError, ValueError) as e:
        print(f"inspect failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    raw = ds.raw_bytes()
    ids = ds.ids()
    kinds = [ds.shard_format(int(s)) for s in ids.tolist()]
    print(f"dataset   {args.url}")
    print(f"format    {ds.fmt}")
    for fmt in ds.formats():
        mine = np.asarray([k == fmt for k in kinds], dtype=bool)
        print(f"  {fmt + ' ':<8}{int(mine.sum())} shard(s), {int(ds.counts()[mine].sum())} rows")
    print(f"shards    {ds.shard_count()}")
    print(f"rows      {ds.total()} (largest shard {ds.max_count()})")
    if raw is not None:
        print(f"bytes     {int(raw.sum())} ({_human(float(raw.sum()))})")
    read = set(ds._catalog.names) if ds._catalog is not None else set()
    found = classify([f.name for f in listing if f.name not in read])
    unread = found.data_unread + [n for names in found.shards.values() for n in names]
    for label, names in (("unread", sorted(unread)), ("other", found.other)):
        if names:
            more = f" and {len(names) - 10} more" if len(names) > 10 else ""
            what = "look like data, not read" if label == "unread" else "not data, not read"
            print(f"{label:<10}{len(names)} file(s) ({what}): {', '.join(names[:10])}{more}")
    if args.shard is not None:
        shown = [args.shard]
    else:  # the first shard of each format
        shown = [int(ids[kinds.index(f)]) for f in ds.formats()]
    with DatasetInspector(ds) as insp:
        for sid in shown:
            n = max(0, min(args.rows, ds.count(sid)))
            try:
                rows = insp.read_many(sid, range(n))
            except (OSError, ValueError, KeyError) as e:
                print(f"inspect failed: {type(e).__name__}: {e}", file=sys.stderr)
                return 1
            print(f"shard {sid}: {ds.shard_name(sid)} ({ds.shard_format(sid)}, "
                  f"{ds.count(sid)} rows)")
            for i, row in enumerate(rows):
                text = json.dumps(row, ensure_ascii=False, default=_json_default)
                if len(text) > args.width:
                    text = text[: args.width - 3] + "..."
                print(f"  [{i}] {text}")
    return 0
