"""User-facing record types: thin views over columnar blocks.

``SampleRecord`` / ``SampleMeta`` are built only when user code asks for them (``batch.records``,
a ``map_transform`` callback, ``add_op``); built-in operators never create them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Union

import numpy as np
import pyarrow as pa

from zephon.block import Block
from zephon.columns import column

SampleId = tuple[int, int, int]
CLOSES = "closes"
"""Optional block meta column (int8): 1 where a fan-out's child closes its base offset (the
last child of its parent), 0 for the children before it."""
LineagePath = tuple[int, ...]
SampleCursorKey = tuple[int, int, LineagePath, SampleId]
DatasetId = int
ShardId = int
SampleIdx = int
LaneId = int
ChunkId = int
SamplePayload = Any
SamplePayloadDict = dict[str, Any]


@dataclass(frozen=True, order=True)
class SampleCursor:
    """Identity of a record within a lane; ordered by (chunk_id, chunk_offset, lineage, id)."""

    chunk_id: int
    chunk_offset: int
    lineage: LineagePath = ()
    sample_id: SampleId = (0, 0, 0)

    def as_key(self) -> SampleCursorKey:
        return (self.chunk_id, self.chunk_offset, self.lineage, self.sample_id)

    def child(self, i: int) -> SampleCursor:
        return replace(self, lineage=self.lineage + (int(i),))

    @property
    def base_offset(self) -> tuple[int, int]:
        return (self.chunk_id, self.chunk_offset)


@dataclass(frozen=True)
class ContributorRef:
    """Which base offset a record derives from, and whether this record closes it."""

    cursor: SampleCursor
    is_last_child: bool = True


@dataclass(frozen=True)
class SampleMeta:
    sample_id: SampleId
    lane_id: int = 0
    chunk_id: int = 0
    chunk_offset: int = 0
    component_sample_counts: dict[int, int] | None = None
    component_token_counts: dict[int, int] | None = None
    lineage: LineagePath = ()
    tags: dict[str, Any] = field(default_factory=dict)

    @property
    def cursor(self) -> SampleCursor:
        return SampleCursor(self.chunk_id, self.chunk_offset, self.lineage, self.sample_id)

    @property
    def contributors(self) -> tuple[ContributorRef, ...]:
        return tuple(self.tags.get("_contributors", ()))

    @property
    def tombstone(self) -> bool:
        return bool(self.tags.get("_tombstone", False))

    @property
    def is_flush_sentinel(self) -> bool:
        return bool(self.tags.get("_flush_sentinel", False))

    @property
    def is_sentinel(self) -> bool:
        return self.is_flush_sentinel

    @property
    def padding_length(self) -> int | None:
        info = self.tags.get("_packing_metadata")
        return None if info is None else int(info.get("padding_length", 0))

    def as_cursor_key(self) -> SampleCursorKey:
        """The record's persisted cursor key ``(chunk_id, chunk_offset, lineage, sample_id)``."""
        return self.cursor.as_key()

    def child(self, i: int) -> SampleMeta:
        return replace(self, lineage=self.lineage + (int(i),))

    def with_lineage(self, lineage: LineagePath) -> SampleMeta:
        return replace(self, lineage=tuple(lineage))

    def with_contributors(self, refs: tuple[ContributorRef, ...]) -> SampleMeta:
        return replace(self, tags={**self.tags, "_contributors": tuple(refs)})

    def with_tombstone(self) -> SampleMeta:
        return replace(self, tags={**self.tags, "_tombstone": True})

    def contribution_refs(self) -> tuple[ContributorRef, ...]:
        return self.contributors or (ContributorRef(self.cursor, True),)


@dataclass
class SampleRecord:
    meta: SampleMeta
    payload: Any

    def __repr__(self) -> str:
        return f"SampleRecord(id={self.meta.sample_id}, lane={self.meta.lane_id}, payload={self.payload!r:.80})"


_META_KEYS = ("sample_id", "lane_id", "chunk_id", "chunk_offset", "component_sample_counts",
              "component_token_counts", "lineage", "tags")


class _BlockMeta:
    """The metadata of a block's records, kept apart from the block (no shared-memory view is
    pinned by records a user keeps) and turned into ``SampleMeta`` one record at a time, only
    for the records whose ``meta`` is read: most loops read only the payload."""

    __slots__ = ("cols", "lineages", "pads", "comp_s", "comp_t", "closes")

    def __init__(self, block: Block) -> None:
        m = block.meta
        self.cols = [m[k].tolist() for k in ("dataset_id", "shard_id", "sample_idx", "lane_id",
                                              "chunk_id", "chunk_offset")]
        self.lineages = block.lineage_tuples()
        pad = m.get("padding_length")
        self.pads = pad.tolist() if pad is not None else None
        comp_s, comp_t = m.get("comp_samples"), m.get("comp_tokens")
        self.comp_s = np.array(comp_s) if comp_s is not None else None
        self.comp_t = np.array(comp_t) if comp_t is not None else None
        closes = m.get(CLOSES)
        self.closes = closes.tolist() if closes is not None else None

    def at(self, i: int) -> SampleMeta:
        d, s, x, lane, c, off = (col[i] for col in self.cols)
        tags: dict[str, Any] = {}
        if self.pads is not None and self.pads[i] >= 0:
            tags["_packing_metadata"] = {"padding_length": self.pads[i]}
        if self.closes is not None and self.lineages[i]:  # a fan-out's child: its base offset
            tags["_contributors"] = (ContributorRef(SampleCursor(c, off, (), (d, s, x)),
                                                    bool(self.closes[i])),)
        meta = object.__new__(SampleMeta)  # the frozen dataclass's __init__ costs 4x this
        vars(meta).update(zip(_META_KEYS, (
            (d, s, x), lane, c, off,
            _counts(self.comp_s, i) if self.comp_s is not None else {d: 1},
            _counts(self.comp_t, i) if self.comp_t is not None else None,
            self.lineages[i], tags)))
        return meta


class _BlockRecord(SampleRecord):
    """A ``SampleRecord`` of a block whose ``meta`` is built when first read. It behaves as a
    plain ``SampleRecord`` (equality, ``dataclasses.replace``, pickling as one)."""

    def __init__(self, meta: SampleMeta, payload: Any) -> None:  # what replace() calls
        self.__dict__["_src"] = None
        self.meta = meta
        self.payload = payload

    @classmethod
    def _of(cls, src: _BlockMeta, i: int, payload: Any) -> _BlockRecord:
        r = object.__new__(cls)
        r.__dict__.update(_src=src, _i=i, _meta=None, payload=payload)
        return r

    @property  # type: ignore[override]
    def meta(self) -> SampleMeta:
        m = self.__dict__["_meta"]
        if m is None:
            m = self.__dict__["_meta"] = self.__dict__["_src"].at(self.__dict__["_i"])
        return m

    @meta.setter
    def meta(self, value: SampleMeta) -> None:
        self.__dict__["_meta"] = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SampleRecord):
            return NotImplemented
        return (self.meta, self.payload) == (other.meta, other.payload)

    __hash__ = None  # type: ignore[assignment]  # as SampleRecord's (a mutable dataclass)

    def __reduce__(self):
        return (SampleRecord, (self.meta, self.payload))


def records_from_block(block: Block) -> list[SampleRecord]:
    """Per-record views of a block (user-facing only). Payloads are built at once (Python
    objects that outlive the block); each record's meta when it is first read."""
    src = _BlockMeta(block)
    make = _BlockRecord._of
    return [make(src, i, p) for i, p in enumerate(block.payload_list())]


def _counts(mat: np.ndarray, i: int) -> dict[int, int]:
    row = mat[i]
    nz = np.flatnonzero(row)
    return dict(zip(nz.tolist(), row[nz].tolist()))


def block_from_records(records: list[SampleRecord], *, is_batch: bool = False) -> Block:
    """Lay user-built records back out as a block (after a user callback)."""
    for r in records:
        if not isinstance(r, SampleRecord):
            raise TypeError(
                f"Unsupported element type {type(r).__name__}: operators must return "
                "SampleRecord objects (keep record.meta, replace record.payload)"
            )
    n = len(records)
    meta = {
        "dataset_id": np.fromiter((r.meta.sample_id[0] for r in records), np.int64, n),
        "shard_id": np.fromiter((r.meta.sample_id[1] for r in records), np.int64, n),
        "sample_idx": np.fromiter((r.meta.sample_id[2] for r in records), np.int64, n),
        "lane_id": np.fromiter((r.meta.lane_id for r in records), np.int64, n),
        "chunk_id": np.fromiter((r.meta.chunk_id for r in records), np.int64, n),
        "chunk_offset": np.fromiter((r.meta.chunk_offset for r in records), np.int64, n),
    }
    if any(r.meta.contributors for r in records):  # fan-out children: which one closes
        meta[CLOSES] = np.fromiter((all(c.is_last_child for c in r.meta.contributors)
                                    for r in records), np.int8, n)
    pads = [r.meta.padding_length for r in records]
    if any(p is not None for p in pads):
        meta["padding_length"] = np.array([-1 if p is None else p for p in pads], dtype=np.int64)
    depth = max((len(r.meta.lineage) for r in records), default=0)
    lineage = np.full((n, depth), -1, dtype=np.int32)
    for i, r in enumerate(records):
        if r.meta.lineage:
            lineage[i, : len(r.meta.lineage)] = r.meta.lineage
    base = Block(meta, None, lineage, is_batch=is_batch)
    return base.with_payloads([r.payload for r in records])


class SampleBatch:
    """A training micro-batch: records of exactly one lane, as a view over a columnar block.

    Iterating it, ``len()`` and indexing go through its ``records``; ``to_training()`` builds
    tensors without making per-record objects.

    Args:
        records: Build a batch from ``SampleRecord``s (user code, tests); the engine builds its
            batches from columnar blocks.
    """

    __slots__ = ("_block", "_records")

    def __init__(self, records: list[SampleRecord] | None = None, *, _block: Block | None = None):
        if _block is None:
            _block = block_from_records(list(records or []), is_batch=True)
            self._records: list[SampleRecord] | None = list(records or [])
        else:
            self._records = None
        self._block = _block

    @classmethod
    def _from_block(cls, block: Block) -> SampleBatch:
        return cls(_block=block)

    @property
    def block(self) -> Block:
        """The columnar block behind the batch (Arrow payload table and numpy metadata)."""
        return self._block

    @property
    def records(self) -> list[SampleRecord]:
        """The records, as ``SampleRecord`` views (built on first access)."""
        if self._records is None:
            self._records = records_from_block(self._block)
        return self._records

    @property
    def ids(self) -> tuple[SampleId, ...]:
        """Each record's ``(dataset_id, shard_id, sample_idx)``."""
        return tuple(self._block.ids())

    @property
    def lane_ids(self) -> list[int]:
        """Each record's lane."""
        return self._block.meta["lane_id"].tolist()

    @property
    def chunk_ids(self) -> list[int]:
        """Each record's work chunk within its lane."""
        return self._block.meta["chunk_id"].tolist()

    @property
    def lineage_paths(self) -> list[LineagePath]:
        """Each record's lineage: which child of a split or packed record it is (``()`` for an
        original record)."""
        return self._block.lineage_tuples()

    def __len__(self) -> int:
        return len(self._block)

    def __iter__(self):
        return iter(self.records)

    def __getitem__(self, i: int) -> SampleRecord:
        return self.records[i]

    def __repr__(self) -> str:
        lanes = sorted(set(self.lane_ids))
        return f"SampleBatch(len={len(self)}, lanes={lanes})"

    def column(self, name: str) -> Any:
        """One payload (or identity) column, without a Python object per record: a numpy view
        for fixed-width numbers, a ``RaggedColumn`` (numpy offsets + values) for token ids, a
        ``pyarrow.Array`` for strings and the rest (see ``zephon.columns``). The fast way to
        read a batch.

        Args:
            name: A payload column (e.g. ``"input_ids"``, ``"text"``) or an identity column
                (``dataset_id``, ``shard_id``, ``sample_idx``, ``lane_id``, ``chunk_id``,
                ``chunk_offset``); a payload column of that name is read first. Raises
                ``KeyError`` (listing the columns there are) when neither exists, and
                ``TypeError`` when the payloads are Python objects Arrow cannot hold as columns.
        """
        return column(self._block, name)

    def to_arrow(self) -> pa.Table:
        """The batch as one Arrow table: identity columns (``dataset_id``, ``shard_id``,
        ``sample_idx``, ``lane_id``, ``chunk_id``, ``chunk_offset``, plus ``lineage`` /
        ``padding_length`` where records have them), then the payload columns; views over the
        batch's memory, no copy of the payload."""
        from zephon.columns import to_arrow

        return to_arrow(self._block)

    def to_training(self, **kwargs: Any) -> dict[str, Any]:
        """Training tensors from the columnar batch: ``input_ids`` [B, S], and on request
        shifted ``labels`` with padding, loss masks and cross-document positions masked.

        Always present: ``ids`` and ``texts`` (the payloads' ``text`` or ``""``), as lists.

        Args:
            **kwargs: ``tokens_field`` ["auto": the first of input_ids, tokens, token_ids, ids];
                ``return_labels`` [False; True gives ``input_ids = tokens[:, :-1]`` and
                ``labels = tokens[:, 1:]`` with padding and ``loss_mask == 0`` set to
                ``ignore_index``]; ``dtype`` ["auto": torch int64 if torch is importable, else
                numpy; None for lists]; ``extra_fields`` [()]; ``ignore_index`` [-100];
                ``rename_fields`` [None]; ``flatten`` [False]; ``exclude_fields`` [()];
                ``return_num_valid_tokens``, ``return_loss_mask``, ``return_cu_seqlens`` (with
                ``max_seqlen``), ``return_padding_mask`` [all False]; ``eos_mask_loss`` [False;
                True masks the label predicted from an EOS, which needs ``eos_token_id``];
                ``position_mode`` ["preserve" per-document positions, or "sequence"].

        Returns:
            A dict of tensors (or arrays / lists, per ``dtype``).

        Raises:
            ValueError: No token field, unknown field names, or options that need
                ``return_labels`` without it.
        """
        from zephon.training import batch_to_training

        return batch_to_training(self._block, **kwargs)


StreamItem = Union[SampleRecord, SampleBatch]
