"""Reading raw rows without a pipeline: ``DatasetInspector`` and ``python -m zephon inspect``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from zephon.io.dataset import Dataset
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
    parser.add_argument("--format", dest="fmt", default=None, choices=["jsonl", "parquet"])
    parser.add_argument("--rows", type=int, default=3, help="rows to print (default 3)")
    parser.add_argument("--shard", type=int, default=None, help="shard id (default: first)")
    parser.add_argument("--width", type=int, default=200, help="characters per printed row")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        ds = Dataset.from_path("inspect", args.url, fmt=args.fmt)
    except (OSError, ValueError) as e:
        print(f"inspect failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    raw = ds.raw_bytes()
    print(f"dataset   {args.url}")
    print(f"format    {ds.fmt}")
    print(f"shards    {ds.shard_count()}")
    print(f"rows      {ds.total()} (largest shard {ds.max_count()})")
    if raw is not None:
        print(f"bytes     {int(raw.sum())} ({_human(float(raw.sum()))})")
    sid = int(ds.ids()[0]) if args.shard is None else args.shard
    n = max(0, min(args.rows, ds.count(sid)))
    with DatasetInspector(ds) as insp:
        try:
            rows = insp.read_many(sid, range(n))
        except (OSError, ValueError) as e:
            print(f"inspect failed: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    print(f"shard {sid}: {ds.shard_name(sid)} ({ds.count(sid)} rows)")
    for i, row in enumerate(rows):
        text = json.dumps(row, ensure_ascii=False, default=repr)
        if len(text) > args.width:
            text = text[: args.width - 3] + "..."
        print(f"  [{i}] {text}")
    return 0
