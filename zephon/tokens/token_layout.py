"""Vectorised layout of ragged token ids: BOS/EOS bracketing, truncation, splitting.

Every function takes and returns (offsets int64 [n+1], values int32) and never loops over
records in Python: insertions and cuts are computed with cumulative sums over the whole block
(or, for ``bracket``, as one ``ragged`` kernel gather).
"""

from __future__ import annotations

import numpy as np

from zephon._ext import kernel


def bracket(offsets: np.ndarray, values: np.ndarray, bos: int | None,
            eos: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Prepend ``bos`` and/or append ``eos`` to every row.

    One gather by the ``ragged`` kernel over a two-array source (the token values and the
    special ids): each row becomes the segments [bos], its tokens, [eos], copied once (index
    arithmetic over every token cost ten times more).
    """
    nb = 1 if bos is not None else 0
    ne = 1 if eos is not None else 0
    if nb == 0 and ne == 0:
        return offsets, values
    offsets = np.asarray(offsets, dtype=np.int64)
    values = np.asarray(values, dtype=np.int32)
    n = len(offsets) - 1
    k = nb + 1 + ne  # segments per row
    specials = np.array([0 if bos is None else bos, 0 if eos is None else eos], dtype=np.int32)
    chunk = np.ones((n, k), dtype=np.int64)
    src = np.empty((n, k), dtype=np.int64)
    lens = np.ones((n, k), dtype=np.int64)
    chunk[:, nb], src[:, nb], lens[:, nb] = 0, offsets[:-1], np.diff(offsets)
    if nb:
        src[:, 0] = 0
    if ne:
        src[:, -1] = 1
    seg_off, out = kernel("ragged").gather_ragged([values, specials], src.ravel(), lens.ravel(),
                                                  chunk=chunk.ravel())
    return seg_off[::k].copy(), out


def truncate(offsets: np.ndarray, values: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep at most ``max_len`` leading tokens of each row."""
    lengths = np.diff(offsets)
    keep = np.minimum(lengths, max_len)
    if np.array_equal(keep, lengths):
        return offsets, values
    new_off = np.zeros(len(offsets), dtype=np.int64)
    np.cumsum(keep, out=new_off[1:])
    src = _row_ranges(offsets[:-1], keep)
    return new_off, values[src]


def split(offsets: np.ndarray, values: np.ndarray, max_len: int
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cut each row into pieces of at most ``max_len`` tokens.

    Returns (offsets, values, parent_row, child_index): the values are unchanged (pieces are
    consecutive), only the offsets gain cut points.
    """
    lengths = np.diff(offsets)
    pieces = np.maximum(1, -(-lengths // max_len))  # an empty row stays one (empty) piece
    parent = np.repeat(np.arange(len(lengths), dtype=np.int64), pieces)
    first = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(pieces, out=first[1:])
    child = np.arange(len(parent), dtype=np.int64) - first[parent]
    starts = offsets[parent] + child * max_len
    ends = np.minimum(starts + max_len, offsets[parent + 1])
    new_off = np.empty(len(parent) + 1, dtype=np.int64)
    new_off[:-1] = starts
    new_off[-1] = offsets[-1]
    del ends  # pieces are contiguous: each ends where the next starts
    return new_off, values, parent, child


def _row_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(start, start + length)`` for every row, vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    row_first = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=row_first[1:])
    idx = np.arange(total, dtype=np.int64)
    row = np.repeat(np.arange(len(lengths)), lengths)
    return starts[row] + (idx - row_first[row])
