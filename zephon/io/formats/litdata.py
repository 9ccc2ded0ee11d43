"""litData (Lightning ``optimize()``) as a registry entry: chunks listed by ``index.json``.

The root's ``index.json`` (``{"chunks": [{"filename", "chunk_size", "chunk_bytes"}, ...],
"config": {"data_format", "data_spec", "compression", ...}}``) gives every chunk's rows and
the records' PyTree: its leaves' serializers (``data_format``) and shape (``data_spec``).
Compressed chunks are turned into the plain layout once, into the node cache
(litdata_chunks.py); plain chunks are read in place.

Records are what litData's ``StreamingDataset`` gives: the PyTree rebuilt (dicts, lists,
tuples), ``int``/``float``/``str``/``bool``/``bytes`` leaves as Python values, ``numpy`` and
``no_header_numpy`` leaves as NumPy arrays of their dtype and shape (read-only here; litData
hands out copies), ``tensor`` leaves as ``torch.Tensor``, ``json`` leaves (lists and dicts) as
Python values, chunks stored as Arrow footers as their rows. A record that is one dict of
scalar, string and array leaves (the usual case) is read column-wise from the mapped chunk,
as Arrow columns; other PyTrees are rebuilt record by record. Leaves of media serializers
(``video``, ``audio``, ``image``, ``pil``, ``jpeg``...) and ``pickle`` are refused at
discovery: pickle runs code from the chunk (``fmt="litdata-pickle"`` reads it, for chunks you
wrote yourself), and media decoders belong in a ``map_transform``.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pyarrow as pa

from zephon.block import NotColumnar, take_table
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
from zephon.io.formats.litdata_chunks import (
    NUMPY_DTYPES,
    TORCH_DTYPES,
    decoder,
    flat_keys,
    footer_span,
    nested_loads,
    numpy_leaf,
    parse_spec,
    unflatten,
)
from zephon.io.formats.mapped_records import MappedRecordsFormat
from zephon.io.storage.local_copy import decoded_local_copy, whole_local_copy
from zephon.payload_values import column_values, mark

__all__ = ["LITDATA", "LITDATA_PICKLE", "LitDataFormat", "LitDataShardReader"]

_FIXED = {"int": np.int64, "float": np.float64}
_READ = ("str", "text", "bytes", "bool", "int", "float", "numpy", "no_header_numpy", "tensor",
         "no_header_tensor", "json", "pickle")


def _check_config(config: Any, where: str, allow_pickle: bool) -> tuple[list[str], Any]:
    if not isinstance(config, dict):
        raise ValueError(f"{where}: index.json has no config")
    loader = config.get("item_loader") or "PyTreeLoader"
    if loader != "PyTreeLoader":
        raise ValueError(f"{where}: chunks written with litData's {loader}; zephon reads "
                         "PyTreeLoader chunks")
    if config.get("encryption"):
        raise ValueError(f"{where}: encrypted chunks are not read by zephon")
    formats = config.get("data_format") or []
    for f in formats:
        base = str(f).split(":")[0]
        if base not in _READ:
            raise ValueError(f"{where}: leaves serialized as {f!r} are not decoded by zephon "
                             "(decode media in a map_transform from 'bytes' leaves)")
        if base == "pickle" and not allow_pickle:
            raise ValueError(f"{where}: leaves serialized with 'pickle' run pickle.loads on "
                             "bytes from the chunk, which can execute any code on this "
                             "machine. Refused. If you wrote these chunks yourself and trust "
                             "every copy of them, read them with fmt='litdata-pickle'")
    try:
        spec = parse_spec(config["data_spec"]) if config.get("data_spec") else None
    except (ValueError, KeyError) as e:
        raise ValueError(f"{where}: {e}") from None
    return [str(f) for f in formats], spec


class LitDataShardReader:
    """One chunk, in its plain layout, memory-mapped; any rows, any order."""

    def __init__(self, ref: ShardRef, res: Resources, allow_pickle: bool) -> None:
        self.ref = ref
        facts = ref.facts
        self._formats, self._spec = _check_config(facts, ref.label, allow_pickle)
        self._keys = flat_keys(self._spec)
        if facts.get("compression"):
            path = decoded_local_copy(ref, res, decoder(facts.get("compression_level")),
                                      ref.name.rsplit("/", 1)[-1] + ".plain")
        else:
            path = whole_local_copy(ref, res)
        self._buf = map_file(path)
        self._footer: pa.Table | None = None
        self.rows = self._check_header()

    def _error(self, message: str, row: int | None = None) -> DataError:
        return DataError(message, dataset=self.ref.dataset, shard=self.ref.display,
                         row=None if row is None else row + 1)

    def _check_header(self) -> int:
        buf = self._buf
        if len(buf) < 8:
            raise self._error(f"{len(buf)} bytes: no chunk header (truncated?)")
        n = int(buf[:4].view("<u4")[0])
        if self.ref.rows is not None and n != self.ref.rows:
            raise self._error(f"holds {n} items but index.json says {self.ref.rows}")
        end = 4 + 4 * (n + 1)
        offsets = buf[4:end].view("<u4").astype(np.int64) if len(buf) >= end else None
        span = footer_span(buf)
        if offsets is not None and n and offsets[0] == offsets[-1] and span is not None:
            self._footer = self._read_footer(span, n)  # rows stored as Arrow only
            return n
        limit = span[0] if span is not None else len(buf)
        nleaf = 4 * len(self._formats)
        bad = None if offsets is None else (np.diff(offsets) < nleaf) | (offsets[1:] > limit)
        if offsets is None or offsets[0] != end or bad.any():
            row = 0 if offsets is None or offsets[0] != end else int(np.flatnonzero(bad)[0])
            raise self._error(f"item offsets run backwards or past the end of the chunk "
                              f"({len(buf)} bytes; truncated or corrupt?)", row)
        self._offsets = offsets
        return n

    def _read_footer(self, span: tuple[int, int], n: int) -> pa.Table:
        start, length = span
        try:
            source = pa.py_buffer(self._buf[start:start + length])
            table = pa.ipc.open_file(source).read_all()
        except (pa.ArrowInvalid, OSError) as e:
            raise self._error(f"the Arrow rows at the end of the chunk cannot be read: {e}") \
                from e
        if table.num_rows != n:
            raise self._error(f"the chunk's Arrow rows are {table.num_rows}, its header says {n}")
        return table

    def _check_rows(self, rows: np.ndarray) -> None:
        if len(rows) and (rows.min() < 0 or rows.max() >= self.rows):
            bad = int(rows[(rows < 0) | (rows >= self.rows)][0])
            raise IndexError(f"{self.ref.label}: row index {bad} out of range for a chunk of "
                             f"{self.rows} items")

    def _leaves(self, rows: np.ndarray) -> list[tuple[Any, bool]]:
        """Each leaf of ``rows``: (Arrow array, marked) or (list of Python values, False)."""
        buf, k = self._buf, len(self._formats)
        starts, ends = self._offsets[rows], self._offsets[rows + 1]
        sizes = fixed_width(buf, starts, 4 * k).view("<u4").astype(np.int64) if k else \
            np.zeros((len(rows), 0), dtype=np.int64)
        pos = (starts + 4 * k)[:, None] + np.concatenate([np.zeros((len(rows), 1), np.int64),
                                               np.cumsum(sizes, axis=1)], axis=1)
        if (pos[:, -1] != ends).any():
            bad = int(np.flatnonzero(pos[:, -1] != ends)[0])
            raise self._error(f"the leaf sizes add up to {int(pos[bad, -1] - starts[bad])} "
                              f"bytes, the item has {int(ends[bad] - starts[bad])} (corrupt "
                              "chunk?)", int(rows[bad]))
        out = []
        for j, fmt in enumerate(self._formats):
            try:
                out.append(self._leaf(fmt, pos[:, j], pos[:, j + 1]))
            except SpanError as e:
                raise self._error(f"leaf {j} ({fmt}): {e}", int(rows[e.row])) from None
            except (ValueError, UnicodeDecodeError, pickle.UnpicklingError, EOFError) as e:
                raise self._error(f"leaf {j} ({fmt}) cannot be decoded: {e}") from e
        return out

    def _leaf(self, fmt: str, start: np.ndarray, end: np.ndarray) -> tuple[Any, bool]:
        buf = self._buf
        base, _, arg = fmt.partition(":")
        if base in ("str", "text"):
            return string_column(buf, start, end), False
        if base == "bytes":
            return binary_column(buf, start, end), False
        if base in _FIXED:
            return numeric_column(buf, start, _FIXED[base]), False
        if base == "bool":
            return pa.array(fixed_width(buf, start, 1)[:, 0] != 0), False
        if base == "no_header_numpy":
            return ndarray_column(buf, start, end, NUMPY_DTYPES[int(arg)], ()), True
        if base == "numpy":
            found = self._numpy_column(start, end)
            if found is not None:
                return found, True
        if base == "json":
            found = self._number_lists(start, end)
            if found is not None:
                return found, False
        values = binary_column(buf, start, end).to_pylist()
        if base == "numpy":  # dtypes, ranks or inner dimensions differ from item to item
            return [numpy_leaf(v) for v in values], False
        if base in ("tensor", "no_header_tensor"):
            return _tensors(values, base, arg), False
        if base == "json":
            return [nested_loads(v) for v in values], False
        return [pickle.loads(v) for v in values], False  # allowed explicitly

    def _numpy_column(self, start: np.ndarray, end: np.ndarray) -> pa.Array | None:
        """``numpy`` leaves ([dtype: u32][ndim: u32][shape: u32 * ndim][values]) of one dtype,
        rank and inner shape as one column; None when they differ."""
        if not len(start):
            return None
        head = fixed_width(self._buf, start, 8).view("<u4")
        if (head != head[0]).any() or head[0, 0] >= len(NUMPY_DTYPES) or head[0, 1] == 0:
            return None
        dtype, ndim = NUMPY_DTYPES[int(head[0, 0])], int(head[0, 1])
        shapes = fixed_width(self._buf, start + 8, 4 * ndim).view("<u4").astype(np.int64)
        if (shapes[:, 1:] != shapes[0, 1:]).any() or dtype == np.dtype(bool):
            return None
        body = start + 8 + 4 * ndim
        if (end - body != shapes.prod(axis=1) * dtype.itemsize).any():
            bad = int(np.flatnonzero(end - body != shapes.prod(axis=1) * dtype.itemsize)[0])
            raise SpanError(f"an array of shape {tuple(shapes[bad])} in "
                            f"{int(end[bad] - body[bad])} bytes", bad)
        return ndarray_column(self._buf, body, end, dtype, tuple(int(x) for x in shapes[0, 1:]))

    def _number_lists(self, start: np.ndarray, end: np.ndarray) -> pa.Array | None:
        """``json`` leaves that are all lists of int64 (tag 2) or of float64 (tag 3), empty
        lists (tag 1, no items) among them, as one list column (Python lists, as litData
        gives); None for anything else."""
        if not len(start):
            return None
        head = fixed_width(self._buf, start, 5)
        tags, counts = head[:, 0], head[:, 1:].copy().view("<u4")[:, 0]
        kinds = set(np.unique(tags[(tags != 1) | (counts != 0)]).tolist())
        if not kinds <= {2} and not kinds <= {3}:
            return None
        dtype = np.dtype("<f8" if kinds == {3} else "<i8")
        if (end - start - 5 != counts.astype(np.int64) * 8).any():
            return None
        return ndarray_column(self._buf, start + 5, end, dtype, ())

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        rows = np.ascontiguousarray(rows, dtype=np.int64).ravel()
        self._check_rows(rows)
        if self._footer is not None:
            table = take_table(self._footer, rows)
            return table if columns is None else table.select(columns)
        if self._keys is None:
            raise NotColumnar(f"{self.ref.label}: records are PyTrees other than one dict")
        leaves = self._leaves(rows)
        if any(not isinstance(v, pa.Array) for v, _ in leaves):
            raise NotColumnar(f"{self.ref.label}: leaves Arrow cannot keep exactly")
        table = pa.Table.from_arrays([v for v, _ in leaves], names=self._keys)
        table = mark(table, [k for k, (_, m) in zip(self._keys, leaves) if m])
        return table if columns is None else table.select(columns)

    def read_payloads(self, rows: np.ndarray) -> list:
        rows = np.ascontiguousarray(rows, dtype=np.int64).ravel()
        self._check_rows(rows)
        if self._footer is not None:
            return take_table(self._footer, rows).to_pylist()
        values = [v if isinstance(v, list) else column_values(v, marked)
                  for v, marked in self._leaves(rows)]
        if self._keys is not None:
            return [dict(zip(self._keys, row)) for row in zip(*values)]
        return [unflatten(self._spec, list(row)) for row in zip(*values)]

    def record_bytes(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        self._check_rows(rows)
        if self._footer is not None:
            return np.zeros(len(rows), dtype=np.int64)
        return self._offsets[rows + 1] - self._offsets[rows]

    def close(self) -> None:
        self._buf = None
        self._footer = None


def _tensors(values: list[bytes], base: str, arg: str) -> list:
    import torch

    def one(data: bytes) -> Any:
        if base == "no_header_tensor":
            dtype, shape, body = TORCH_DTYPES[int(arg)], None, data
        else:
            dtype = TORCH_DTYPES[int.from_bytes(data[:4], "big")]
            rank = int.from_bytes(data[4:8], "big")
            shape = tuple(int(x) for x in np.frombuffer(data, ">u4", rank, 8))
            body = data[8 + 4 * rank:]
        t = torch.frombuffer(bytearray(body), dtype=getattr(torch, dtype)) if body else \
            torch.empty(0, dtype=getattr(torch, dtype))
        return t.reshape(shape) if shape is not None else t
    return [one(v) for v in values]


class LitDataFormat(MappedRecordsFormat):
    """litData's ``optimize()`` chunks. ``allow_pickle`` (the ``litdata-pickle`` entry) reads
    ``pickle`` leaves; ``litdata`` refuses them."""

    suffixes = ()  # chunks are found through index.json only (it holds their PyTree)
    capabilities = Capabilities(record_sizes=True)
    extra = "litdata"
    name = "litdata"
    reader = LitDataShardReader

    def claims_index(self, doc: dict[str, Any]) -> bool:
        return isinstance(doc.get("config"), dict) and isinstance(doc.get("chunks"), list)

    def own_index(self, root: RootView) -> list[ShardEntry] | None:
        doc = root.index
        if doc is None or not self.claims_index(doc):
            return None
        where = f"dataset {root.dataset!r} at {root.location.display()} (litData index.json)"
        config = doc["config"]
        _check_config(config, where, self.allow_pickle)
        facts = {k: config.get(k) for k in ("data_format", "data_spec", "compression",
                                            "compression_level", "item_loader", "encryption")}
        suffix = f".{config['compression']}" if config.get("compression") else None
        names = set(root.names()) if suffix else set()
        out = []
        for i, c in enumerate(doc["chunks"]):
            name, rows = (c.get("filename"), c.get("chunk_size")) if isinstance(c, dict) \
                else (None, None)
            if not isinstance(name, str) or not isinstance(rows, int) or rows < 0:
                raise ValueError(f"{where}: chunk #{i} lacks a filename or a chunk_size")
            plain = name.replace(suffix, "") if suffix else name
            if plain != name and name not in names and plain in names:
                # litData's own reader decompresses a local chunk.zstd.bin into chunk.bin
                # and deletes the former: what it left is read as it is
                out.append(ShardEntry(plain, rows, facts={**facts, "compression": None}))
            else:
                out.append(ShardEntry(name, rows, facts=facts))
        return out


LITDATA = LitDataFormat()
LITDATA_PICKLE = LitDataFormat("litdata-pickle", allow_pickle=True)
