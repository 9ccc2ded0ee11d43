"""MDS (MosaicML Streaming) as a registry entry: shards listed by the writer's ``index.json``.

A dataset root holds ``index.json`` (``{"version": 2, "shards": [{"format": "mds",
"column_names", "column_encodings", "column_sizes", "samples", "raw_data", "zip_data",
"compression"}, ...]}``) and the shards it names. Row counts and column layouts come from the
index alone. A shard is ``[n: u32][offsets: u32 * (n + 1)][samples]``, each sample the sizes of
its variable-size columns (u32 each) and then the columns' bytes. A compressed shard (``zstd``,
``gz``, ``bz2``, ``br``, ``snappy``) is decompressed once into the node cache; an uncompressed
copy next to it (Streaming leaves one) is read in place instead.

Reads gather each column of the requested rows straight from the memory-mapped shard
(binary_columns.py), so records come back as Arrow columns with Streaming's value types:
``str`` -> str, ``bytes`` -> bytes, ``int`` -> int, ``int8``..``float64`` -> NumPy scalars,
``ndarray[:dtype[:shape]]`` -> read-only NumPy arrays of that dtype and shape, ``str_int`` ->
int, ``str_float`` -> float, ``str_decimal`` -> Decimal, ``json`` -> its Python value. Images
(``jpeg``, ``png``, and ``list[jpeg]``, ``list[png]``, ``jpeg_array`` as lists) are handed
over as their encoded bytes, where Streaming opens them as PIL images: decode them in a
``map_transform`` (``PIL.Image.open(io.BytesIO(b))``) if you need pixels; bytes travel
between processes without a PIL copy. ``pil`` (raw pixels with a PIL header) is refused.

``pkl`` columns are refused: decoding one runs ``pickle.loads`` on bytes from the shard, and a
pickle can execute any code on the machine that loads it, so a shard from anyone but yourself
could take over the training job. Only for shards you wrote yourself, read them with
``fmt="mds-pickle"`` (this format with pickle allowed).
"""

from __future__ import annotations

import json
import pickle
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephon.block import NotColumnar
from zephon.io.errors import DataError
from zephon.io.formats.base import (
    Capabilities,
    Resources,
    RootView,
    ShardEntry,
    ShardRef,
)
from zephon.io.formats.binary_columns import (
    SpanError,
    binary_column,
    fixed_width,
    map_file,
    ndarray_column,
    numeric_column,
    string_column,
)
from zephon.io.formats.mapped_records import MappedRecordsFormat
from zephon.io.formats.mds_index import (
    BYTES_LIKE,
    LISTS,
    SCALARS,
    SHAPE_DTYPES,
    Column,
    check_columns,
    decoder,
    shard_entries,
)
from zephon.io.formats.mds_values import ND_DTYPES
from zephon.io.storage.local_copy import decoded_local_copy, whole_local_copy
from zephon.payload_values import column_values, mark

__all__ = ["MDS", "MDS_PICKLE", "MdsFormat", "MdsShardReader"]

class MdsShardReader:
    """One MDS shard, decoded if compressed, memory-mapped; any rows, any order."""

    def __init__(self, ref: ShardRef, res: Resources, allow_pickle: bool) -> None:
        self.ref = ref
        entry = ref.facts  # the shard's entry in index.json (mds_index.py)
        self._cols = check_columns(entry, ref.label, allow_pickle)
        self._nvar = sum(1 for c in self._cols if c.size is None)
        raw_name = entry["raw_name"]
        compression = entry.get("compression")
        if compression and ref.name != raw_name:
            path = decoded_local_copy(ref, res, decoder(compression, ref), raw_name)
        else:
            path = whole_local_copy(ref, res)
        self._buf = map_file(path)
        self.rows = self._check_header(int(entry.get("samples", -1)))

    def _error(self, message: str, row: int | None = None) -> DataError:
        return DataError(message, dataset=self.ref.dataset, shard=self.ref.display,
                         row=None if row is None else row + 1)

    def _check_header(self, samples: int) -> int:
        buf = self._buf
        if len(buf) < 4:
            raise self._error(f"{len(buf)} bytes: no MDS header (truncated?)")
        n = int(buf[:4].view("<u4")[0])
        if n != samples or (self.ref.rows is not None and n != self.ref.rows):
            raise self._error(f"holds {n} samples but index.json says {samples}")
        end = 4 + 4 * (n + 1)
        if len(buf) < end:
            raise self._error(f"{len(buf)} bytes cannot hold the offsets of {n} samples "
                              "(truncated?)")
        offsets = buf[4:end].view("<u4").astype(np.int64)
        bad = (np.diff(offsets) < 4 * self._nvar) | (offsets[1:] > len(buf))
        # the writer's column config (JSON) lies between the offsets and the first sample
        if not end <= offsets[0] <= len(buf) or bad.any():
            row = 0 if not end <= offsets[0] <= len(buf) else int(np.flatnonzero(bad)[0])
            raise self._error(f"sample offsets run backwards or past the end of the shard "
                              f"({len(buf)} bytes; truncated or corrupt?)", row)
        self._offsets = offsets
        return n

    def _check_rows(self, rows: np.ndarray) -> None:
        if len(rows) and (rows.min() < 0 or rows.max() >= self.rows):
            bad = int(rows[(rows < 0) | (rows >= self.rows)][0])
            raise IndexError(f"{self.ref.label}: row index {bad} out of range for a shard of "
                             f"{self.rows} samples")

    def _spans(self, rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(start, end) byte spans of each column for ``rows``."""
        starts, ends = self._offsets[rows], self._offsets[rows + 1]
        sizes = fixed_width(self._buf, starts, 4 * self._nvar).view("<u4").astype(np.int64) \
            if self._nvar else np.zeros((len(rows), 0), dtype=np.int64)
        pos = starts + 4 * self._nvar
        out, k = [], 0
        for c in self._cols:
            if c.size is None:
                width = sizes[:, k]
                k += 1
            else:
                width = np.full(len(rows), int(c.size), dtype=np.int64)
            out.append((pos, pos + width))
            pos = pos + width
        if (pos != ends).any():
            bad = int(np.flatnonzero(pos != ends)[0])
            raise self._error(f"the column sizes add up to {int(pos[bad] - starts[bad])} bytes, "
                              f"the sample has {int(ends[bad] - starts[bad])} (corrupt shard?)",
                              int(rows[bad]))
        return out

    def _column(self, c: Column, start: np.ndarray, end: np.ndarray) -> Any:
        """The column as an Arrow array (``marked``: A.10 NumPy values), or a list of Python
        values where Arrow cannot hold Streaming's values exactly."""
        buf, base = self._buf, c.base
        if base == "str":
            return string_column(buf, start, end), False
        if base in BYTES_LIKE:
            return binary_column(buf, start, end), False
        if base == "int":
            return numeric_column(buf, start, np.int64), False
        if base in SCALARS:
            return numeric_column(buf, start, SCALARS[base]), True
        if base == "ndarray":
            return self._ndarray(c, start, end)
        if base in ("str_int", "str_float"):
            text = string_column(buf, start, end)
            try:
                return pc.cast(text, pa.int64() if base == "str_int" else pa.float64()), False
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # past int64, odd spelling
                return [int(v) if base == "str_int" else float(v)
                        for v in text.to_pylist()], False
        if base in LISTS:
            return self._image_lists(c, start, end), False
        values = binary_column(buf, start, end).to_pylist()
        if base == "str_decimal":
            return [Decimal(v.decode()) for v in values], False
        if base == "json":
            return [json.loads(v) for v in values], False
        return [pickle.loads(v) for v in values], False  # pkl, allowed explicitly

    def _ndarray(self, c: Column, start: np.ndarray, end: np.ndarray) -> Any:
        buf = self._buf
        dtype = c.nd_dtype
        if dtype is None:  # one dtype byte per value
            codes = fixed_width(buf, start, 1)[:, 0]
            if len(codes) and (codes != codes[0]).any():
                return self._ndarray_values(c, start, end), False
            dtype = ND_DTYPES.get(int(codes[0])) if len(codes) else "uint8"
            if dtype is None:
                raise SpanError(f"unknown ndarray dtype code {int(codes[0])}", 0)
            start = start + 1
        if c.nd_shape is not None:
            return ndarray_column(buf, start, end, np.dtype(dtype), c.nd_shape[1:]), True
        heads = fixed_width(buf, start, 1)[:, 0]
        if len(heads) and (heads != heads[0]).any():
            return self._ndarray_values(c, start - (c.nd_dtype is None), end), False
        ndim, code = (int(heads[0]) >> 2, int(heads[0]) & 3) if len(heads) else (1, 0)
        sdt = np.dtype(SHAPE_DTYPES[code])
        shapes = fixed_width(buf, start + 1, ndim * sdt.itemsize).view(sdt).astype(np.int64) \
            if ndim else np.zeros((len(start), 0), dtype=np.int64)
        if ndim == 0 or (len(shapes) and (shapes[:, 1:] != shapes[0, 1:]).any()):
            return self._ndarray_values(c, start - (c.nd_dtype is None), end), False
        body = start + 1 + ndim * sdt.itemsize
        inner = tuple(int(x) for x in shapes[0, 1:]) if len(shapes) else ()
        want = shapes.prod(axis=1) * np.dtype(dtype).itemsize
        if (end - body != want).any():
            bad = int(np.flatnonzero(end - body != want)[0])
            raise SpanError(f"ndarray of shape {tuple(shapes[bad])} needs {int(want[bad])} "
                            f"bytes, has {int(end[bad] - body[bad])}", bad)
        return ndarray_column(buf, body, end, np.dtype(dtype), inner), True

    def _ndarray_values(self, c: Column, start: np.ndarray, end: np.ndarray) -> list:
        """Arrays whose dtypes or inner dimensions differ from row to row: one each."""
        from zephon.io.formats.mds_values import decode_ndarray

        raw = binary_column(self._buf, start, end)
        return [decode_ndarray(v, c.nd_dtype, c.nd_shape) for v in raw.to_pylist()]

    def _image_lists(self, c: Column, start: np.ndarray, end: np.ndarray) -> list:
        from zephon.io.formats.mds_values import split_image_list

        raw = binary_column(self._buf, start, end)
        return [split_image_list(v, c.base) for v in raw.to_pylist()]

    def _read(self, rows: np.ndarray, names: list[str] | None) -> list[tuple[str, Any, bool]]:
        rows = np.ascontiguousarray(rows, dtype=np.int64).ravel()
        self._check_rows(rows)
        spans = self._spans(rows)
        out = []
        for c, (start, end) in zip(self._cols, spans):
            if names is not None and c.name not in names:
                continue
            try:
                values, marked = self._column(c, start, end)
            except SpanError as e:
                raise self._error(f"column {c.name!r} ({c.encoding}): {e}",
                                  int(rows[e.row])) from None
            except (ValueError, UnicodeDecodeError, pickle.UnpicklingError, EOFError) as e:
                raise self._error(f"column {c.name!r} ({c.encoding}) cannot be decoded: {e}",
                                  None) from e
            out.append((c.name, values, marked))
        return out

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        if columns is not None:
            missing = [c for c in columns if c not in {col.name for col in self._cols}]
            if missing:
                raise ValueError(f"{self.ref.label}: no column(s) {missing}; the shard has "
                                 f"{[c.name for c in self._cols]}")
        cols = self._read(rows, columns)
        if any(not isinstance(v, pa.Array) for _, v, _ in cols):
            raise NotColumnar(f"{self.ref.label}: columns "
                              f"{[n for n, v, _ in cols if not isinstance(v, pa.Array)]} hold "
                              "values Arrow cannot keep exactly")
        table = pa.Table.from_arrays([v for _, v, _ in cols], names=[n for n, _, _ in cols])
        return mark(table, [n for n, _, m in cols if m])

    def read_payloads(self, rows: np.ndarray) -> list[dict]:
        cols = self._read(rows, None)
        values = [v if isinstance(v, list) else column_values(v, marked) for _, v, marked in cols]
        names = [n for n, _, _ in cols]
        return [dict(zip(names, row)) for row in zip(*values)] if cols else \
            [{} for _ in range(len(np.asarray(rows).ravel()))]

    def record_bytes(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        self._check_rows(rows)
        return self._offsets[rows + 1] - self._offsets[rows]

    def close(self) -> None:
        self._buf = None


class MdsFormat(MappedRecordsFormat):
    """MosaicML Streaming's MDS. ``allow_pickle`` (the ``mds-pickle`` entry) reads ``pkl``
    columns; ``mds`` refuses them (see the module docstring)."""

    suffixes = ()  # shards are found through index.json only (it holds their columns)
    capabilities = Capabilities(record_sizes=True)
    extra = "mds"
    name = "mds"
    reader = MdsShardReader

    def claims_index(self, doc: dict[str, Any]) -> bool:
        shards = doc.get("shards")
        return isinstance(shards, list) and bool(shards) and all(
            isinstance(s, dict) and s.get("format") == "mds" for s in shards)

    def own_index(self, root: RootView) -> list[ShardEntry] | None:
        doc = root.index
        if doc is None or not self.claims_index(doc):
            return None
        return shard_entries(root, doc, self.allow_pickle)


MDS = MdsFormat()
MDS_PICKLE = MdsFormat("mds-pickle", allow_pickle=True)
