"""The columnar block: how records travel through the engine.

A block is struct-of-arrays. Metadata columns are numpy arrays (one row per record); the payload
is a ``pyarrow.Table`` for dict-shaped records, or, as the last resort, a plain list of Python
payloads. Built-in operators work on the columns; per-record Python objects (``SampleRecord``)
exist only when user code asks for them.

Keys absent from a record's source (datasets with different schemas concatenated into one block)
are listed in ``sparse``: a null in such a column means "absent" and is left out of the record's
dict payload, so users see exactly the keys their data had.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from zephon.payload_values import concat_marks, mark_from_payloads, payload_rows
from zephon.ragged_columns import RaggedChunks, list_array, ragged_chunks, ragged_column, take_table

ID_FIELDS = ("dataset_id", "shard_id", "sample_idx")
# payload fields recognised as token ids, in order of preference ("auto" everywhere)
TOKEN_FIELDS = ("input_ids", "tokens", "token_ids", "ids")
META_FIELDS = ("dataset_id", "shard_id", "sample_idx", "lane_id", "chunk_id", "chunk_offset")

# the ragged-column helpers (ragged_columns.py) are named here too: operators and the engine
# import them with Block
__all__ = ["ID_FIELDS", "META_FIELDS", "TOKEN_FIELDS", "Block", "NotColumnar", "RaggedChunks",
           "add_lineage", "carry_hidden", "is_hidden", "list_array", "ragged_chunks",
           "ragged_column", "take_table"]


class NotColumnar(TypeError):
    """Raised when payloads cannot be laid out as Arrow columns (the object fallback is used)."""


def is_hidden(column: str) -> bool:
    """Zephon's own columns riding with the payload (``__recipe``) are hidden from record views;
    dunder names (``__key__``, ``__url__``: WebDataset's, or a user's) are the records' data."""
    return column.startswith("__") and not column.endswith("__")


def _i64(a: Any, n: int | None = None) -> np.ndarray:
    arr = np.asarray(a, dtype=np.int64)
    if n is not None and arr.shape != (n,):
        arr = np.broadcast_to(arr, (n,)).copy()
    return arr


class Block:
    """A run of records of one lane (or of several lanes before the per-lane operators).

    ``meta``: dict of int64 arrays named by ``META_FIELDS`` plus optional extras
    (``padding_length``, ``comp_samples`` / ``comp_tokens`` of shape (n, components)).
    ``lineage``: int32 (n, depth) matrix, -1 padded: the child indices added by each fan-out.
    ``payload``: ``pa.Table`` or ``list``.
    """

    # origin: (parent block, first row) when this block is rows of ``parent`` taken as they
    # are (a batch cut from a pushed block), else None; lets the engine send consecutive
    # batches of one parent as that parent's rows instead of concatenating them again
    __slots__ = ("meta", "lineage", "payload", "sparse", "is_batch", "origin")

    def __init__(
        self,
        meta: dict[str, np.ndarray],
        payload: pa.Table | list | None,
        lineage: np.ndarray | None = None,
        sparse: frozenset[str] = frozenset(),
        is_batch: bool = False,
    ) -> None:
        self.meta = meta
        n = len(meta["sample_idx"])
        self.lineage = lineage if lineage is not None else np.empty((n, 0), dtype=np.int32)
        self.payload = payload
        self.sparse = sparse
        self.is_batch = is_batch
        self.origin: tuple[Block, int] | None = None

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_pointers(
        cls,
        dataset_id: np.ndarray,
        shard_id: np.ndarray,
        sample_idx: np.ndarray,
        *,
        lane_id: int,
        chunk_id: int,
        chunk_offset: np.ndarray,
    ) -> Block:
        n = len(sample_idx)
        meta = {
            "dataset_id": _i64(dataset_id),
            "shard_id": _i64(shard_id),
            "sample_idx": _i64(sample_idx),
            "lane_id": np.full(n, lane_id, dtype=np.int64),
            "chunk_id": np.full(n, chunk_id, dtype=np.int64),
            "chunk_offset": _i64(chunk_offset),
        }
        return cls(meta, None)

    @staticmethod
    def table_from_payloads(payloads: Sequence[Any]) -> tuple[pa.Table, frozenset[str]]:
        """Lay dict payloads out as a table; raise NotColumnar when Arrow cannot hold them."""
        if not payloads:
            return pa.table({}), frozenset()
        if not all(type(p) is dict for p in payloads):
            raise NotColumnar("payloads are not all dicts")
        try:
            struct = pa.array(payloads)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError,
                OverflowError) as e:  # an int past int64: the payloads stay Python's
            raise NotColumnar(str(e)) from e
        if not pa.types.is_struct(struct.type):
            raise NotColumnar(f"payloads became {struct.type}")
        table = pa.Table.from_struct_array(struct)
        keys0 = None
        sparse: set[str] = set()
        for p in payloads:  # cheap: compares key views, no values
            if keys0 is None:
                keys0 = p.keys()
            elif p.keys() != keys0:
                sparse = {name for name in table.column_names if any(name not in q for q in payloads)}
                break
        return table, frozenset(sparse)

    def with_payloads(self, payloads: list) -> Block:
        """Same records (same meta) with new Python payloads, columnar where possible."""
        try:
            table, sparse = self.table_from_payloads(payloads)
            table = mark_from_payloads(table, payloads)  # NumPy values come back as such
            return Block(self.meta, table, self.lineage, sparse, self.is_batch)
        except NotColumnar:
            return Block(self.meta, list(payloads), self.lineage, frozenset(), self.is_batch)

    def with_table(self, table: pa.Table, sparse: frozenset[str] | None = None) -> Block:
        return Block(self.meta, table, self.lineage, self.sparse if sparse is None else sparse,
                     self.is_batch)

    # -- pickling -------------------------------------------------------------------------------

    def __getstate__(self) -> tuple:
        """A pickled block carries its own rows only: not its ``origin`` (the whole block it was
        cut from), and not the full buffers a sliced Arrow payload shares with that block
        (pyarrow pickles a slice with them). A batch crossing a DataLoader worker's queue was
        2.4 MB for 32 rows of 2 KB; it is what its rows weigh."""
        payload = self.payload
        if isinstance(payload, pa.Table) and payload.num_rows and \
                payload.get_total_buffer_size() > 2 * payload.nbytes:
            payload = take_table(payload, np.arange(payload.num_rows, dtype=np.int64))
        return (self.meta, self.lineage, payload, self.sparse, self.is_batch)

    def __setstate__(self, state: tuple) -> None:
        self.meta, self.lineage, self.payload, self.sparse, self.is_batch = state
        self.origin = None

    # -- shape ----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.meta["sample_idx"])

    @property
    def columnar(self) -> bool:
        return isinstance(self.payload, pa.Table)

    def take(self, idx: np.ndarray) -> Block:
        idx = np.asarray(idx, dtype=np.int64)
        meta = {k: v[idx] for k, v in self.meta.items()}
        lineage = self.lineage[idx]
        if self.payload is None:
            payload = None
        elif isinstance(self.payload, pa.Table):
            payload = take_table(self.payload, idx)
        else:
            payload = [self.payload[i] for i in idx.tolist()]
        return Block(meta, payload, lineage, self.sparse, self.is_batch)

    def slice(self, start: int, stop: int) -> Block:
        meta = {k: v[start:stop] for k, v in self.meta.items()}
        if self.payload is None:
            payload = None
        elif isinstance(self.payload, pa.Table):
            payload = self.payload.slice(start, stop - start)
        else:
            payload = self.payload[start:stop]
        return Block(meta, payload, self.lineage[start:stop], self.sparse, self.is_batch)

    def filter(self, keep: np.ndarray) -> Block:
        return self.take(np.flatnonzero(keep))

    @staticmethod
    def concat(blocks: Sequence[Block]) -> Block:
        blocks = [b for b in blocks if len(b)] or list(blocks[:1])
        if len(blocks) == 1:
            return blocks[0]
        keys = set(blocks[0].meta)
        for b in blocks[1:]:
            keys &= set(b.meta)
        meta = {k: np.concatenate([b.meta[k] for b in blocks]) for k in keys}
        depth = max(b.lineage.shape[1] for b in blocks)
        lineage = np.concatenate([_pad_lineage(b.lineage, depth) for b in blocks])
        payloads = [b.payload for b in blocks]
        sparse = frozenset().union(*(b.sparse for b in blocks))
        if all(p is None for p in payloads):
            payload = None
        elif all(isinstance(p, pa.Table) for p in payloads):
            names = [tuple(p.column_names) for p in payloads]
            if any(n != names[0] for n in names):
                all_names = set().union(*(set(n) for n in names))
                sparse |= {c for c in all_names if any(c not in n for n in names)}
            try:
                payload = concat_marks(payloads, pa.concat_tables(payloads,
                                                                  promote_options="permissive"))
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                payload = [r for b in blocks for r in b.payload_list()]
                sparse = frozenset()
        else:
            payload = [r for b in blocks for r in b.payload_list()]
            sparse = frozenset()
        return Block(meta, payload, lineage, frozenset(sparse), blocks[0].is_batch)

    # -- views for user code --------------------------------------------------------------------

    def payload_list(self) -> list:
        """The payloads as fresh Python objects (dicts for dict-shaped data)."""
        if self.payload is None:
            return [None] * len(self)
        if isinstance(self.payload, list):
            return list(self.payload)
        table = self.payload
        # values as spec addendum A.10 gives them for columns a columnar reader marked
        rows = payload_rows(table, [c for c in table.column_names if not is_hidden(c)])
        if self.sparse:
            sparse = self.sparse
            rows = [
                {k: v for k, v in r.items() if v is not None or k not in sparse} for r in rows
            ]
        return rows

    def ids(self) -> list[tuple[int, int, int]]:
        m = self.meta
        return list(zip(m["dataset_id"].tolist(), m["shard_id"].tolist(), m["sample_idx"].tolist()))

    def lineage_tuples(self) -> list[tuple[int, ...]]:
        if self.lineage.shape[1] == 0:
            return [()] * len(self)
        return [tuple(x for x in row if x >= 0) for row in self.lineage.tolist()]

    def column_names(self) -> list[str]:
        if isinstance(self.payload, pa.Table):
            return list(self.payload.column_names)
        return []


class RowsOf(Block):
    """Rows ``start:stop`` of ``parent`` as a block that is sliced only when first looked at.

    Batches are cut from a pushed block many at a time, and on their way to the training
    process most are never looked at one by one: consecutive batches of one parent travel as
    that parent's rows (``origin``), and the training loop often reads a batch's tensors only.
    Slicing each one eagerly (its meta columns, lineage and Arrow payload) was most of the
    serial stage's cost per batch. ``len()`` and ``origin`` need no slicing.
    """

    __slots__ = ("_stop", "_ready")

    def __init__(self, parent: Block, start: int, stop: int, is_batch: bool = False) -> None:
        # the base's slots stay unset until ``_fill``; the properties below read through it
        object.__setattr__(self, "_ready", False)
        _SPARSE.__set__(self, parent.sparse)
        _IS_BATCH.__set__(self, is_batch)
        _ORIGIN.__set__(self, (parent, start))
        self._stop = stop

    def _fill(self) -> None:
        parent, start = _ORIGIN.__get__(self)
        part = parent.slice(start, self._stop)
        _META.__set__(self, part.meta)
        _LINEAGE.__set__(self, part.lineage)
        _PAYLOAD.__set__(self, part.payload)
        self._ready = True

    def _get(slot):  # noqa: N805 - builds the properties below
        def get(self):
            if not self._ready:
                self._fill()
            return slot.__get__(self)

        def set_(self, value):
            if not self._ready:
                self._fill()
            slot.__set__(self, value)
        return property(get, set_)

    meta = _get(Block.__dict__["meta"])
    lineage = _get(Block.__dict__["lineage"])
    payload = _get(Block.__dict__["payload"])
    del _get

    def __len__(self) -> int:
        return self._stop - _ORIGIN.__get__(self)[1]

    def __reduce__(self):  # pickles as the plain block it stands for
        return (_plain_block, (Block.__getstate__(self),))


_META, _LINEAGE, _PAYLOAD = (Block.__dict__[k] for k in ("meta", "lineage", "payload"))
_SPARSE, _IS_BATCH, _ORIGIN = (Block.__dict__[k] for k in ("sparse", "is_batch", "origin"))


def _plain_block(state: tuple) -> Block:
    b = Block.__new__(Block)
    b.__setstate__(state)
    return b


def record_location(block: Block, i: int, datasets: list | None) -> tuple[str, str, int]:
    """(dataset name, shard name, 1-based row) of record ``i``, for an error message; the ids
    where ``datasets`` cannot name them."""
    m = block.meta
    d, s, row = int(m["dataset_id"][i]), int(m["shard_id"][i]), int(m["sample_idx"][i])
    name, shard = str(d), str(s)
    if datasets is not None and 0 <= d < len(datasets):
        ds = datasets[d]
        name = getattr(ds, "name", name)
        try:
            shard = ds.shard_name(s)
        except (AttributeError, KeyError):
            pass
    return name, shard, row + 1


def carry_hidden(src: Block, out: Block) -> Block:
    """Give ``out`` the hidden ``__`` columns of ``src`` (same rows, same order).

    Hidden columns (e.g. the recipe of a packed row) describe where a record came from; an
    operator that rewrites the visible payload must not lose them.
    """
    if not (src.columnar and out.columnar) or len(src) != len(out):
        return out
    hidden = [c for c in src.payload.column_names
              if is_hidden(c) and c not in out.payload.column_names]
    if not hidden:
        return out
    table = out.payload
    for c in hidden:
        table = table.append_column(c, src.payload.column(c))
    return out.with_table(table)


def with_columns(src: Block, cols: dict[str, pa.Array], keep_payload: bool) -> Block:
    """``src``'s rows with ``cols`` (one value per row each), as an operator that adds fields
    (tokenize, tokenize_chat) emits them: beside the payload's other fields when
    ``keep_payload`` (a column of the same name replaced; dict payloads updated), else alone
    with ``src``'s hidden columns."""
    if keep_payload and src.columnar:
        table = src.payload
        for name, col in cols.items():
            if name in table.column_names:
                table = table.set_column(table.column_names.index(name), name, col)
            else:
                table = table.append_column(name, col)
        return Block(src.meta, table, src.lineage, src.sparse)
    if keep_payload:
        payloads = src.payload_list()
        rows = {name: col.to_pylist() for name, col in cols.items()}
        for i, p in enumerate(payloads):
            if isinstance(p, dict):
                p.update({name: r[i] for name, r in rows.items()})
        return src.with_payloads(payloads)
    return carry_hidden(src, Block(src.meta, pa.table(cols), src.lineage))


def _pad_lineage(lineage: np.ndarray, depth: int) -> np.ndarray:
    if lineage.shape[1] == depth:
        return lineage
    out = np.full((lineage.shape[0], depth), -1, dtype=np.int32)
    out[:, : lineage.shape[1]] = lineage
    return out


def add_lineage(lineage: np.ndarray, child_idx: np.ndarray) -> np.ndarray:
    """Append one fan-out level (the child index of each output record)."""
    out = np.empty((lineage.shape[0], lineage.shape[1] + 1), dtype=np.int32)
    out[:, :-1] = lineage
    out[:, -1] = child_idx
    return out
