"""BOS/EOS bracketing, truncation and splitting against slow per-row references."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from zephon.tokens.token_layout import bracket, split, truncate

rows_st = st.lists(st.lists(st.integers(3, 99), max_size=12), min_size=1, max_size=8)


def _ragged(rows):
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    values = np.array([t for r in rows for t in r], dtype=np.int32)
    return offsets, values


def _rows(offsets, values):
    return [values[offsets[i]:offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]


@given(rows_st, st.sampled_from([(1, 2), (1, None), (None, 2), (None, None)]))
def test_bracket_matches_reference(rows, specials):
    bos, eos = specials
    out = _rows(*bracket(*_ragged(rows), bos, eos))
    assert out == [([bos] if bos is not None else []) + r + ([eos] if eos is not None else [])
                   for r in rows]


@given(rows_st, st.integers(1, 6))
def test_truncate_matches_reference(rows, k):
    assert _rows(*truncate(*_ragged(rows), k)) == [r[:k] for r in rows]


@settings(max_examples=200)
@given(rows_st, st.integers(1, 5))
def test_split_pieces_concatenate_back(rows, k):
    offsets, values, parent, child = split(*_ragged(rows), k)
    pieces = _rows(offsets, values)
    for i, r in enumerate(rows):
        mine = [p for p, q in zip(pieces, parent.tolist()) if q == i]
        assert sum(mine, []) == r
        assert len(mine) == max(1, -(-len(r) // k))
        assert all(len(p) <= k for p in mine)
        assert child[parent == i].tolist() == list(range(len(mine)))
