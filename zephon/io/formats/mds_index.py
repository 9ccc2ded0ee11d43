"""MDS ``index.json``: shard entries, column encodings, compressions (the reader is mds.py).

Each shard entry of the index holds the shard's columns, sample count, files and compression.
Discovery reads them once and keeps each shard's entry in the catalog (``ShardEntry.facts``),
so a reader in any process has it without reading the index again.
"""

from __future__ import annotations

import bz2
import gzip
import io
from typing import Any

import numpy as np

from zephon.io.errors import DataError
from zephon.io.formats.base import RootView, ShardEntry, ShardRef
from zephon.io.formats.jsonl_lines import decoded_reader

__all__ = ["BYTES_LIKE", "Column", "LISTS", "SCALARS", "SHAPE_DTYPES", "check_columns",
           "decoder", "entry_files", "shard_entries"]

SCALARS = {n: np.dtype(n) for n in ("uint8", "uint16", "uint32", "uint64", "int8", "int16",
                                     "int32", "int64", "float16", "float32", "float64")}
# ndarray value dtype codes and shape dtype codes (Streaming's NDArray encoding)
SHAPE_DTYPES = ("<u1", "<u2", "<u4", "<u8")
BYTES_LIKE = ("bytes", "jpeg", "png")
LISTS = ("list[jpeg]", "list[png]", "jpeg_array")
_PYTHON = ("str_decimal", "json", "pkl")  # decoded value by value
_REFUSED = {"pil": "raw PIL pixels", "list[pil]": "raw PIL pixels"}


class Column:
    """One column's encoding, parsed once per shard."""

    def __init__(self, name: str, encoding: str, size: int | None) -> None:
        self.name, self.encoding, self.size = name, encoding, size
        base, _, config = encoding.partition(":")
        self.base = base
        self.nd_dtype: str | None = None
        self.nd_shape: tuple[int, ...] | None = None
        if base == "ndarray":
            parts = config.split(":") if config else []
            self.nd_dtype = parts[0] if parts and parts[0] else None
            self.nd_shape = tuple(int(x) for x in parts[1].split(",")) if len(parts) > 1 else None
        elif base not in SCALARS and base not in BYTES_LIKE + LISTS + _PYTHON + (
                "str", "int", "str_int", "str_float") or config:
            raise ValueError(f"column {name!r} has an unknown MDS encoding {encoding!r}")


def check_columns(entry: dict, where: str, allow_pickle: bool) -> list[Column]:
    names, encodings = entry.get("column_names"), entry.get("column_encodings")
    sizes = entry.get("column_sizes")
    if not (isinstance(names, list) and isinstance(encodings, list) and isinstance(sizes, list)
            and len(names) == len(encodings) == len(sizes)):
        raise ValueError(f"{where}: column_names, column_encodings and column_sizes must be "
                         "lists of one length")
    cols = []
    for name, enc, size in zip(names, encodings, sizes):
        if not isinstance(enc, str) or not isinstance(name, str):
            raise ValueError(f"{where}: column {name!r} has no encoding name")
        if enc in _REFUSED:
            raise ValueError(f"{where}: column {name!r} is MDS {enc!r} ({_REFUSED[enc]}), which "
                             "zephon does not decode; write it as 'jpeg', 'png' or 'ndarray'")
        if enc == "pkl" and not allow_pickle:
            raise ValueError(
                f"{where}: column {name!r} is MDS 'pkl': decoding it runs pickle.loads on bytes "
                "from the shard, which can execute any code on this machine. Refused. If you "
                "wrote these shards yourself and trust every copy of them, read them with "
                "fmt='mds-pickle'")
        try:
            cols.append(Column(name, enc, size))
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    return cols


def entry_files(entry: dict) -> tuple[str | None, str | None]:
    raw, zipped = entry.get("raw_data"), entry.get("zip_data")
    return (raw.get("basename") if isinstance(raw, dict) else None,
            zipped.get("basename") if isinstance(zipped, dict) else None)


def decoder(compression: str, ref: ShardRef) -> Any:
    algo = compression.split(":")[0]
    if algo == "zstd":
        return lambda src: decoded_reader(src, "x.zst")
    if algo == "gz":
        return lambda src: gzip.GzipFile(fileobj=src, mode="rb")
    if algo == "bz2":
        return lambda src: bz2.BZ2File(src, "rb")
    if algo in ("br", "snappy"):
        def whole(src: Any) -> io.BytesIO:  # both libraries decode whole buffers
            data = src.read()
            if algo == "br":
                import brotli

                return io.BytesIO(brotli.decompress(data))
            import snappy

            return io.BytesIO(snappy.decompress(data))
        return whole
    raise DataError(f"unknown MDS compression {compression!r}", dataset=ref.dataset,
                    shard=ref.display)


def shard_entries(root: RootView, doc: dict, allow_pickle: bool) -> list[ShardEntry]:
    """The shards an MDS index lists, in its order, each with rows, size and version."""
    where = f"dataset {root.dataset!r} at {root.location.display()} (MDS index.json)"
    listed = {f.name: f for f in root.location.list_files()}
    out = []
    for i, e in enumerate(doc["shards"]):
        if e.get("version") != 2:
            raise ValueError(f"{where}: shard #{i} has MDS version {e.get('version')!r}; "
                             "zephon reads version 2")
        check_columns(e, f"{where}, shard #{i}", allow_pickle)
        raw, zipped = entry_files(e)
        samples = e.get("samples")
        if not isinstance(samples, int) or samples < 0:
            raise ValueError(f"{where}: shard #{i} has no sample count")
        # an uncompressed copy on this machine is read in place; remote, the smaller file
        local = root.location.is_local
        name = raw if raw in listed and (local or not e.get("compression")) else \
            zipped if e.get("compression") and zipped in listed else raw
        info = listed.get(name)
        if info is None:
            raise ValueError(f"{where}: the index lists {raw or zipped!r}, which does not "
                             "exist")
        raw_bytes = e["raw_data"].get("bytes") if isinstance(e.get("raw_data"), dict) \
            else None
        facts = {k: e.get(k) for k in ("column_names", "column_encodings", "column_sizes",
                                         "compression", "samples")}
        facts["raw_name"] = raw
        out.append(ShardEntry(name, samples, info.size, info.version,
                              raw_bytes if isinstance(raw_bytes, int) else None, facts))
    return out
