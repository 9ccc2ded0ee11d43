"""Streaming, checkpointable token packing for one lane (the numeric core of ``pack_flat``).

The caller pushes record lengths with its own record ids and receives completed bins as flat
segment arrays ``(record_id, token_start, token_len)``; ``build_rows`` then turns bins into a
dense [R, max_length] token matrix with one gather. The per-record loop runs in the
``packing`` kernel. Rules (spec 5.10, with the choices the spec leaves open):

- Records longer than ``max_length`` follow ``oversized`` (every algorithm): ``"split"``
  (default) keeps every token — first_fit / best_fit cut such a record into full solo bins of
  ``max_length`` tokens (emitted at once, so they are packed perfectly) and place the tail like
  any record; wrap / best_fit_wrap split records anyway. ``"truncate"`` keeps the first
  ``max_length`` tokens, ``"drop"`` drops the record (its id is listed in ``dropped``). The
  caller counts what it loses (``PackLane`` does, through ``zephon.accounting``). The old
  ``drop_oversized=True / False`` means ``"drop"`` / ``"split"``.
- ``first_fit`` / ``best_fit`` keep up to ``num_bins`` open bins in opening order; a record
  goes to the first bin with room, or to the one left with the least room (oldest on ties).
  A bin is emitted when its room drops below ``min_sequence_length``, when it reaches
  ``max_sequences_per_bin``, or as the victim when a new bin is needed and all are open
  (``flush_strategy``: "fifo" = oldest, "fullest" = most tokens, oldest on ties).
- ``wrap`` cuts the FIFO token stream into bins of ``max_length`` tokens, or of
  ``max_sequences_per_bin`` segments when capped (a fragment counts as one; such a bin is
  short, padded). At ``flush`` the partial carry is emitted as a last, padded bin (the
  reference drops it; we never lose tokens by default).
- ``best_fit_wrap`` keeps a candidate pool (``candidate_pool_size`` records, default 1024,
  allowed to grow while it holds fewer than ``max_length`` tokens, or fewer than
  ``max_sequences_per_bin`` records when capped) feeding one open bin. While the pool is over
  size it places the longest candidate that fits (oldest on ties); when none fits it splits
  the oldest candidate to complete the bin (the only cut in that bin); a candidate older than
  ``max_candidate_age`` arrivals (default 8 x pool) goes first. A bin is done at
  ``max_length`` tokens or ``max_sequences_per_bin`` segments. Every token is kept; only the
  last bins at ``flush`` (and capped bins) are padded. ``num_bins`` does not apply.
- Empty records are dropped (they hold no token) in every algorithm.
- There is no periodic flush: ``flush`` is for the end of the stream (or an explicit reset),
  emits every open bin in opening order and returns the packer to its fresh state.
- Aligned fields (loss masks) are laid out with ``build_aligned`` over the same bins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from zephon._ext import kernel
from zephon._ext.packing_algorithms import ALGORITHMS, POOLED, WHOLE_RECORDS
from zephon.block import RaggedChunks

OVERSIZED = ("split", "truncate", "drop")
STATE_VERSION = 1


def resolve_oversized(oversized: str | None, drop_oversized: bool | None) -> str:
    """The oversized policy from ``oversized=`` and the older ``drop_oversized=`` keyword."""
    legacy = None if drop_oversized is None else ("drop" if drop_oversized else "split")
    if oversized is None:
        return legacy or "split"
    if oversized not in OVERSIZED:
        raise ValueError(f"oversized must be one of {OVERSIZED}, got {oversized!r}")
    if legacy is not None and legacy != oversized:
        raise ValueError(f"drop_oversized={drop_oversized} contradicts oversized={oversized!r}: "
                         "pass only oversized=")
    return oversized


@dataclass(frozen=True)
class Bin:
    """One packed bin: its segments in order and the pad tokens after them."""

    record_id: np.ndarray
    token_start: np.ndarray
    token_len: np.ndarray
    padding: int


@dataclass(frozen=True)
class PackedBins:
    """Completed bins, columnar: bin i owns segments ``seg_offsets[i]:seg_offsets[i+1]``.

    ``dropped`` lists record ids whose tokens will never be emitted (empty records, and
    oversized ones under ``oversized="drop"``).
    """

    seg_offsets: np.ndarray
    record_id: np.ndarray
    token_start: np.ndarray
    token_len: np.ndarray
    padding: np.ndarray
    dropped: np.ndarray

    def __len__(self) -> int:
        return len(self.padding)

    def __getitem__(self, i: int) -> Bin:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        s = slice(int(self.seg_offsets[i]), int(self.seg_offsets[i + 1]))
        return Bin(self.record_id[s], self.token_start[s], self.token_len[s], int(self.padding[i]))

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    @property
    def num_segments(self) -> np.ndarray:
        return np.diff(self.seg_offsets)

    def bin_of_segment(self) -> np.ndarray:
        """Bin index of every segment (for per-bin sums such as component token counts)."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.num_segments)

    @classmethod
    def _from_kernel(cls, res: tuple) -> PackedBins:
        return cls(*res)


class Packer:
    """Streaming per-lane packer; see the module docstring for the rules."""

    def __init__(self, max_length: int, algorithm: str = "first_fit", num_bins: int | None = None,
                 drop_oversized: bool | None = None, min_sequence_length: int = 1,
                 max_sequences_per_bin: int | None = None, flush_strategy: str = "fifo",
                 candidate_pool_size: int | None = None,
                 max_candidate_age: int | None = None, oversized: str | None = None) -> None:
        algorithm = str(getattr(algorithm, "value", algorithm))
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
        if not isinstance(max_length, (int, np.integer)) or max_length < 1:
            raise ValueError(f"max_length must be a positive integer, got {max_length!r}")
        whole = algorithm in WHOLE_RECORDS
        if whole and (num_bins is None or num_bins < 1):
            raise ValueError(f"{algorithm} requires num_bins >= 1")
        if algorithm == "wrap" and num_bins is not None:
            raise ValueError("num_bins is not allowed with algorithm='wrap'")
        if not 1 <= min_sequence_length <= max_length:
            raise ValueError("min_sequence_length must be in [1, max_length]")
        if max_sequences_per_bin is not None and (
                not isinstance(max_sequences_per_bin, (int, np.integer)) or max_sequences_per_bin < 1):
            raise ValueError(f"max_sequences_per_bin must be an integer >= 1 (or None), "
                             f"got {max_sequences_per_bin!r}")
        if flush_strategy not in ("fifo", "fullest"):
            raise ValueError(f"flush_strategy must be 'fifo' or 'fullest', got {flush_strategy!r}")
        if algorithm not in POOLED and (candidate_pool_size is not None
                                             or max_candidate_age is not None):
            raise ValueError("candidate_pool_size / max_candidate_age only apply to best_fit_wrap")
        pool = 1024 if candidate_pool_size is None else int(candidate_pool_size)
        if pool < 1:
            raise ValueError("candidate_pool_size must be >= 1")
        age = 8 * pool if max_candidate_age is None else int(max_candidate_age)
        if age < 1:
            raise ValueError("max_candidate_age must be >= 1")
        self.max_length = int(max_length)
        self.algorithm = algorithm
        self.num_bins = None if num_bins is None else int(num_bins)
        self.oversized = resolve_oversized(oversized, drop_oversized)
        self.min_sequence_length = int(min_sequence_length)
        self.max_sequences_per_bin = (None if max_sequences_per_bin is None
                                      else int(max_sequences_per_bin))
        self.flush_strategy = flush_strategy
        self.candidate_pool_size = pool if algorithm in POOLED else None
        self.max_candidate_age = age if algorithm in POOLED else None
        self._core = kernel("packing").PackCore(
            algorithm, self.max_length, self.num_bins if whole else 1,
            self.min_sequence_length, int(max_sequences_per_bin or 0),
            flush_strategy == "fullest", self.oversized == "drop", pool, age)

    @property
    def config(self) -> dict[str, Any]:
        """Constructor arguments, normalised (feed to ``Packer(**config)`` or ``from_state``)."""
        return {"max_length": self.max_length, "algorithm": self.algorithm,
                "num_bins": self.num_bins, "oversized": self.oversized,
                "min_sequence_length": self.min_sequence_length,
                "max_sequences_per_bin": self.max_sequences_per_bin,
                "flush_strategy": self.flush_strategy,
                "candidate_pool_size": self.candidate_pool_size,
                "max_candidate_age": self.max_candidate_age}

    def push(self, lengths, record_ids) -> PackedBins:
        """Feed records (token counts, caller ids); returns the bins this push completed.
        Under ``oversized="truncate"`` a record longer than ``max_length`` is packed as its
        first ``max_length`` tokens."""
        lengths = np.ascontiguousarray(lengths, dtype=np.int64).reshape(-1)
        if self.oversized == "truncate":
            lengths = np.minimum(lengths, self.max_length)
        record_ids = np.ascontiguousarray(record_ids, dtype=np.int64).reshape(-1)
        return PackedBins._from_kernel(self._core.push(lengths, record_ids))

    def flush(self) -> PackedBins:
        """End of stream: every remaining bin (padded); the packer is fresh afterwards."""
        return PackedBins._from_kernel(self._core.flush())

    @property
    def pending_tokens(self) -> int:
        """Tokens held in open bins, the wrap carry and the candidate pool."""
        return int(self._core.pending_tokens)

    def has_pending(self) -> bool:
        return self.pending_tokens > 0

    def get_state(self) -> dict[str, Any]:
        """JSON-serialisable cursors: open bins (oldest first) as [record_id, token_start,
        token_len] lists, the best_fit_wrap pool as [record_id, token_start, token_len,
        arrival_seq] in arrival order, and the arrival counter. Never token data."""
        return {"version": STATE_VERSION, "algorithm": self.algorithm, **self._core.export()}

    @classmethod
    def from_state(cls, config: dict[str, Any], state: dict[str, Any]) -> Packer:
        """A packer that continues exactly where the one that produced ``state`` stood."""
        packer = cls(**config)
        if state.get("version") != STATE_VERSION or state.get("algorithm") != packer.algorithm:
            raise ValueError("packer state does not match this version or algorithm")
        packer._core.load(_validated(packer, state))
        return packer

    def __reduce__(self):
        return (Packer.from_state, (self.config, self.get_state()))


def _validated(p: Packer, state: dict[str, Any]) -> dict[str, Any]:
    """Reject states the configuration could not have produced (the kernel trusts them)."""
    bins = [[[int(x) for x in seg] for seg in b] for b in state.get("bins", [])]
    pool = [[int(x) for x in c] for c in state.get("pool", [])]
    limit = p.num_bins if p.algorithm in WHOLE_RECORDS else 1
    ok = len(bins) <= limit and all(
        b and sum(s[2] for s in b) <= p.max_length and all(len(s) == 3 and s[1] >= 0 and s[2] > 0
                                                           for s in b) for b in bins)
    ok = ok and all(len(c) == 4 and c[1] >= 0 and c[2] > 0 for c in pool)
    ok = ok and (not pool or p.algorithm in POOLED)
    if not ok:
        raise ValueError("malformed packer state")
    return {"bins": bins, "pool": pool, "arrivals": int(state.get("arrivals", 0))}


class PackedRows(NamedTuple):
    tokens: np.ndarray           # [R, L] int32 (values dtype), pad-filled
    positions: np.ndarray        # [R, L] int32, 0.. per segment and for the pad tail
    padding_length: np.ndarray   # [R] int32
    seg_counts: np.ndarray       # [R] int32, segments (documents) per row, pad tail excluded
    segment_ids: np.ndarray | None  # [R, L] int32 when asked: 0.. per segment, pad tail = count


def _sources(bins: PackedBins, offsets: np.ndarray, rows) -> np.ndarray:
    """Absolute start of every segment in the ragged values, bounds-checked."""
    r = bins.record_id if rows is None else np.asarray(rows, dtype=np.int64)
    if len(r) != len(bins.token_start):
        raise ValueError("rows must give one ragged row per segment")
    if len(r) and (r.min() < 0 or r.max() >= len(offsets) - 1):
        raise ValueError("segment row is out of range of the ragged token store")
    if np.any(bins.token_start + bins.token_len > offsets[r + 1] - offsets[r]):
        raise ValueError("a segment reaches past the end of its record")
    return offsets[r] + bins.token_start


def _chunked(offsets: np.ndarray, values, src: np.ndarray) -> tuple[Any, np.ndarray, Any]:
    """Kernel arguments (values, src, chunk) for ``values`` given as one array or as the list
    of arrays whose concatenation ``offsets`` index (an Arrow column's chunks, not joined)."""
    if not isinstance(values, (list, tuple)):
        return np.asarray(values), src, None
    sizes = np.array([len(v) for v in values], dtype=np.int64)
    starts = np.zeros(len(values), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return RaggedChunks(offsets, list(values), starts).locate(src)


def _dtype(values) -> np.dtype:
    """Element type of ``_chunked``'s values (an array or a list of chunk arrays)."""
    if isinstance(values, list):
        return np.asarray(values[0]).dtype if values else np.dtype(np.int32)
    return values.dtype


def build_rows(bins: PackedBins, offsets, values, pad_id: int, max_length: int, *,
               rows=None, return_segment_ids: bool = False) -> PackedRows:
    """Dense packed rows from bins over a ragged token store, in one gather.

    Segment k reads row ``rows[k]`` (default ``bins.record_id[k]``) of (offsets, values),
    tokens ``token_start .. token_start + token_len``; ``values`` may also be the list of
    arrays (Arrow chunks) that ``offsets`` index as if joined, read in place. Positions restart
    at 0 for every segment and again for the pad tail, so ``cumsum(positions == 0) - 1`` is a
    document id and padding stays a segment of its own (masked by ``padding_length``, not by id).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    values, src, chunk = _chunked(offsets, values, _sources(bins, offsets, rows))
    n = len(bins)
    tokens = np.empty((n, max_length), dtype=_dtype(values))
    positions = np.empty((n, max_length), dtype=np.int32)
    seg_ids = np.empty((n, max_length), dtype=np.int32) if return_segment_ids else None
    pad = kernel("ragged").pack_rows(values, src, bins.token_len, bins.seg_offsets, pad_id,
                                     tokens, positions, seg_ids, chunk=chunk)
    return PackedRows(tokens, positions, pad.astype(np.int32),
                      np.diff(bins.seg_offsets).astype(np.int32), seg_ids)


def build_aligned(bins: PackedBins, offsets, values, max_length: int, *, pad_value: int = 0,
                  rows=None) -> np.ndarray:
    """[R, max_length] rows of a field aligned element-wise with the tokens (e.g. a loss
    mask), laid out exactly like ``build_rows`` lays the tokens; padding gets ``pad_value``.
    ``values`` may be a list of chunks, as for ``build_rows``."""
    offsets = np.asarray(offsets, dtype=np.int64)
    values, src, chunk = _chunked(offsets, values, _sources(bins, offsets, rows))
    out = np.empty((len(bins), max_length), dtype=_dtype(values))
    kernel("ragged").pack_rows(values, src, bins.token_len, bins.seg_offsets, pad_value, out,
                               chunk=chunk)
    return out
