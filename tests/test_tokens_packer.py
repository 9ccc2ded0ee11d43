"""Packer + build_rows: packing invariants, checkpoint round trips, push-granularity independence."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kernel_twins import examples, twin_fixture

from zephon.tokens import Packer, build_aligned, build_rows

impl = twin_fixture("packing")


def make_packer(algorithm: str, L: int, **kw) -> Packer:
    if algorithm in ("first_fit", "best_fit"):
        kw.setdefault("num_bins", 3)
    if algorithm == "best_fit_wrap":
        kw.setdefault("candidate_pool_size", 4)
    return Packer(L, algorithm, **kw)


def run(packer: Packer, lengths: list[int], cuts: list[int],
        first_id: int = 0) -> tuple[list[tuple], list[int]]:
    """Push ``lengths`` (record id = index) split at ``cuts``; returns (bins, dropped)."""
    bins, dropped = [], []
    bounds = sorted({0, len(lengths), *[c for c in cuts if 0 < c < len(lengths)]})
    ids = np.arange(first_id, first_id + len(lengths))
    results = [packer.push(np.array(lengths[a:b], np.int64), ids[a:b])
               for a, b in zip(bounds[:-1], bounds[1:])]
    results.append(packer.flush())
    for res in results:
        for b in res:
            bins.append((b.record_id.tolist(), b.token_start.tolist(), b.token_len.tolist(),
                         b.padding))
        dropped += res.dropped.tolist()
    return bins, dropped


stream = st.tuples(st.integers(1, 48), st.lists(st.integers(0, 120), max_size=50),
                   st.lists(st.integers(0, 50), max_size=5))


def _check_common(bins, L):
    for _recs, _starts, lens, pad in bins:
        assert sum(lens) + pad == L          # every packed row is exactly max_length tokens
        assert all(n > 0 for n in lens)


def _pieces(bins) -> dict[int, list[tuple[int, int]]]:
    """record -> its emitted (token_start, token_len) pieces, sorted."""
    out: dict[int, list[tuple[int, int]]] = {}
    for recs, starts, lens, _ in bins:
        for r, b, n in zip(recs, starts, lens):
            out.setdefault(r, []).append((b, n))
    return {r: sorted(p) for r, p in out.items()}


def _kept(n: int, L: int, oversized: str) -> int:
    """Tokens of an n-token record that a packer must emit under an oversized policy."""
    if n > L:
        return {"split": n, "truncate": L, "drop": 0}[oversized]
    return n


@examples(60)
@given(s=stream, algo=st.sampled_from(["first_fit", "best_fit"]),
       oversized=st.sampled_from(["split", "truncate", "drop"]))
def test_whole_document_algorithms_keep_documents_whole(impl, s, algo, oversized):
    L, lengths, cuts = s
    bins, dropped = run(make_packer(algo, L, oversized=oversized), lengths, cuts)
    _check_common(bins, L)
    gone = [i for i, n in enumerate(lengths) if n == 0 or (n > L and oversized == "drop")]
    assert sorted(dropped) == gone
    pieces = _pieces(bins)
    for r, n in enumerate(lengths):
        got = pieces.get(r, [])
        kept = _kept(n, L, oversized)
        # each record's pieces tile its first `kept` tokens: nothing lost, nothing twice
        assert [b for b, _ in got] == list(range(0, kept, L))
        assert sum(ln for _, ln in got) == kept
    for recs, starts, lens, _ in bins:
        # a record that fits is never cut; only an oversized one is, into max_length pieces
        assert all(b + ln == lengths[r] or ln == L for r, b, ln in zip(recs, starts, lens)
                   if oversized == "split")


def test_oversized_policies_and_the_old_keyword(impl):
    for kw, want in (({}, "split"), ({"drop_oversized": True}, "drop"),
                     ({"drop_oversized": False}, "split"), ({"oversized": "truncate"}, "truncate")):
        assert Packer(4, "best_fit", num_bins=2, **kw).oversized == want
    p = Packer(4, "best_fit", num_bins=2)         # the default keeps a long record, in pieces
    assert [(b.token_start.tolist(), b.padding) for b in p.push([10], [7])] == [([0], 0), ([4], 0)]
    assert [(b.token_start.tolist(), b.token_len.tolist()) for b in p.flush()] == [([8], [2])]
    p = Packer(4, "first_fit", num_bins=2, oversized="truncate")
    assert len(p.push([10], [7])) == 1 and p.flush().token_len.tolist() == []
    with pytest.raises(ValueError, match="contradicts"):
        Packer(4, "wrap", drop_oversized=True, oversized="split")
    with pytest.raises(ValueError, match="oversized"):
        Packer(4, "wrap", oversized="clip")


@examples(60)
@given(s=stream)
def test_wrap_emits_every_token_in_stream_order(impl, s):
    L, lengths, cuts = s
    packer = make_packer("wrap", L)
    bins, dropped = run(packer, lengths, cuts)
    _check_common(bins, L)
    assert all(pad == 0 for *_, pad in bins[:-1])   # only the flush tail is padded
    # the emitted tokens are exactly the token stream, in order, nothing left behind
    stream_tokens = [(r, t) for r, n in enumerate(lengths) for t in range(n)]
    got = [(r, begin + j) for recs, starts, lens, _ in bins
           for r, begin, n in zip(recs, starts, lens) for j in range(n)]
    assert got == stream_tokens
    assert dropped == [i for i, n in enumerate(lengths) if n == 0]


@examples(40)
@given(s=stream, algo=st.sampled_from(["wrap", "best_fit_wrap"]), cap=st.integers(1, 4))
def test_wrap_algorithms_cap_segments_per_bin(impl, s, algo, cap):
    L, lengths, cuts = s
    bins, _ = run(make_packer(algo, L, max_sequences_per_bin=cap), lengths, cuts)
    _check_common(bins, L)
    assert all(len(recs) <= cap for recs, *_ in bins)
    pieces = _pieces(bins)
    assert {r: sum(n for _, n in p) for r, p in pieces.items()} == \
        {r: n for r, n in enumerate(lengths) if n}


def test_capped_wrap_matches_the_spec_example(impl):
    # addendum A.7: max_length 8, cap 2, lengths 3,3,10,2,2,2,5 -> [3,3] [8] [2,2] [2,2] [5]
    bins, _ = run(Packer(8, "wrap", max_sequences_per_bin=2), [3, 3, 10, 2, 2, 2, 5], [])
    assert [lens for _, _, lens, _ in bins] == [[3, 3], [8], [2, 2], [2, 2], [5]]
    assert [pad for *_, pad in bins] == [2, 0, 4, 4, 3]


@examples(60)
@given(s=stream, pool=st.integers(1, 6), age=st.integers(1, 12))
def test_best_fit_wrap_keeps_every_token(impl, s, pool, age):
    L, lengths, cuts = s
    bins, dropped = run(
        Packer(L, "best_fit_wrap", candidate_pool_size=pool, max_candidate_age=age),
        lengths, cuts)
    _check_common(bins, L)
    assert dropped == [i for i, n in enumerate(lengths) if n == 0]
    assert all(pad == 0 for *_, pad in bins[:-1])   # only the flush tail is padded
    covered: dict[int, list[tuple[int, int]]] = {}
    for recs, starts, lens, _ in bins:
        cuts_here = sum(b + n < lengths[r] for r, b, n in zip(recs, starts, lens))
        assert cuts_here <= 1                    # at most one split per bin
        for r, b, n in zip(recs, starts, lens):
            covered.setdefault(r, []).append((b, n))
    for r, n in enumerate(lengths):
        pieces = sorted(covered.get(r, []))
        pos = 0
        for b, ln in pieces:
            assert b == pos
            pos += ln
        assert pos == n


@examples(40)
@given(s=stream, algo=st.sampled_from(["first_fit", "best_fit", "wrap", "best_fit_wrap"]),
       data=st.data())
def test_state_round_trip_gives_identical_continuation(impl, s, algo, data):
    L, lengths, cuts = s
    reference = run(make_packer(algo, L), lengths, cuts)
    cut = data.draw(st.integers(0, len(lengths)))
    first = make_packer(algo, L)
    head = first.push(np.array(lengths[:cut], np.int64), np.arange(cut))
    state = json.loads(json.dumps(first.get_state()))
    resumed = Packer.from_state(json.loads(json.dumps(first.config)), state)
    tail_bins, tail_dropped = run(resumed, lengths[cut:], [], first_id=cut)
    head_bins = [(b.record_id.tolist(), b.token_start.tolist(), b.token_len.tolist(), b.padding)
                 for b in head]
    assert head_bins + tail_bins == reference[0]
    assert head.dropped.tolist() + tail_dropped == reference[1]


@examples(40)
@given(s=stream, algo=st.sampled_from(["first_fit", "best_fit", "wrap", "best_fit_wrap"]))
def test_push_granularity_never_changes_the_bins(impl, s, algo):
    L, lengths, cuts = s
    assert run(make_packer(algo, L), lengths, cuts) == \
        run(make_packer(algo, L), lengths, list(range(len(lengths))))


@examples(40)
@given(s=stream, algo=st.sampled_from(["first_fit", "best_fit", "wrap", "best_fit_wrap"]),
       pad_id=st.integers(0, 3))
def test_build_rows_positions_restart_per_document_and_pad_tail(impl, s, algo, pad_id):
    L, lengths, cuts = s
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = (np.arange(offsets[-1], dtype=np.int32) % 50) + 10
    packer = make_packer(algo, L)
    res = packer.push(np.array(lengths, np.int64), np.arange(len(lengths)))
    for part in (res, packer.flush()):
        rows = build_rows(part, offsets, values, pad_id, L, return_segment_ids=True)
        assert rows.tokens.shape == (len(part), L) and rows.tokens.dtype == np.int32
        for i, b in enumerate(part):
            toks, pos, seg = [], [], []
            for k, (r, st_, n) in enumerate(zip(b.record_id, b.token_start, b.token_len)):
                toks += values[offsets[r] + st_: offsets[r] + st_ + n].tolist()
                pos += list(range(n))
                seg += [k] * n
            toks += [pad_id] * b.padding
            pos += list(range(b.padding))
            seg += [len(b.record_id)] * b.padding
            assert rows.tokens[i].tolist() == toks
            assert rows.positions[i].tolist() == pos
            assert rows.segment_ids[i].tolist() == seg
            assert rows.padding_length[i] == b.padding
            assert rows.seg_counts[i] == len(b.record_id)


def test_build_rows_with_row_mapping_and_bounds(impl):
    packer = Packer(6, "first_fit", num_bins=1)
    packer.push([2, 3], [100, 101])
    bins = packer.flush()
    offsets, values = np.array([0, 2, 5]), np.array([7, 8, 1, 2, 3], np.int32)
    rows = build_rows(bins, offsets, values, 0, 6, rows=bins.record_id - 100)
    assert rows.tokens.tolist() == [[7, 8, 1, 2, 3, 0]]
    assert rows.positions.tolist() == [[0, 1, 0, 1, 2, 0]]
    mask = np.array([True, False, True, True, False])
    aligned = build_aligned(bins, offsets, mask, 6, rows=bins.record_id - 100)
    assert aligned.dtype == np.bool_ and aligned.tolist() == [[1, 0, 1, 1, 0, 0]]
    with pytest.raises(ValueError, match="out of range"):
        build_rows(bins, offsets, values, 0, 6)
    with pytest.raises(ValueError, match="past the end"):
        build_rows(bins, [0, 1, 2], values, 0, 6, rows=[0, 1])


def test_first_fit_best_fit_and_flush_strategies(impl):
    # bins [5], [6] open (L=10); 4 goes to the first bin with room (ff) or to the one left
    # with the least room (bf), which it fills exactly, so bf emits that bin at once
    ff = Packer(10, "first_fit", num_bins=2)
    bf = Packer(10, "best_fit", num_bins=2)
    assert len(ff.push([5, 6, 4], [0, 1, 2])) == 0
    assert [b.record_id.tolist() for b in ff.flush()] == [[0, 2], [1]]
    assert [b.record_id.tolist() for b in bf.push([5, 6, 4], [0, 1, 2])] == [[1, 2]]
    assert [b.record_id.tolist() for b in bf.flush()] == [[0]]
    # a third bin is needed: fifo evicts the oldest, fullest the bin holding most tokens
    for strategy, victim in (("fifo", [0]), ("fullest", [1])):
        p = Packer(10, "first_fit", num_bins=2, flush_strategy=strategy)
        assert [b.record_id.tolist() for b in p.push([3, 8, 9], [0, 1, 2])] == [victim]


def test_min_sequence_length_max_sequences_and_oversized(impl):
    p = Packer(10, "first_fit", num_bins=4, min_sequence_length=3)
    out = p.push([8, 1], [0, 1])                  # room 2 < 3: emitted at once
    assert [b.record_id.tolist() for b in out] == [[0]]
    p = Packer(10, "best_fit", num_bins=4, max_sequences_per_bin=2)
    assert [b.record_id.tolist() for b in p.push([1, 1, 1], [0, 1, 2])] == [[0, 1]]
    p = Packer(4, "first_fit", num_bins=2, drop_oversized=False)
    out = p.push([10], [7])
    assert [(b.token_start.tolist(), b.padding) for b in out] == [([0], 0), ([4], 0)]
    assert [(b.token_start.tolist(), b.token_len.tolist()) for b in p.flush()] == [([8], [2])]
    p = Packer(4, "wrap", drop_oversized=True)
    assert p.push([5, 4], [0, 1]).dropped.tolist() == [0]


def test_wrap_flush_emits_the_carry_padded(impl):
    p = Packer(4, "wrap")
    p.push([3, 3], [0, 1])
    out = p.flush()
    assert [(b.record_id.tolist(), b.token_start.tolist(), b.token_len.tolist(), b.padding)
            for b in out] == [([1], [1], [2], 2)]
    assert out.dropped.tolist() == []
    assert not p.has_pending() and p.get_state()["bins"] == []


@pytest.mark.parametrize("kwargs, match", [
    ({"algorithm": "first_fit"}, "num_bins"),
    ({"algorithm": "wrap", "num_bins": 2}, "num_bins"),
    ({"algorithm": "zigzag"}, "algorithm"),
    ({"algorithm": "wrap", "max_sequences_per_bin": 0}, "max_sequences_per_bin"),
    ({"algorithm": "best_fit", "num_bins": 2, "max_sequences_per_bin": -1},
     "max_sequences_per_bin"),
    ({"algorithm": "best_fit", "num_bins": 2, "flush_strategy": "lifo"}, "flush_strategy"),
    ({"algorithm": "first_fit", "num_bins": 2, "candidate_pool_size": 4}, "best_fit_wrap"),
    ({"algorithm": "wrap", "min_sequence_length": 0}, "min_sequence_length"),
])
def test_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Packer(8, **kwargs)


def test_from_state_rejects_mismatch_and_malformed():
    p = Packer(8, "best_fit", num_bins=2)
    p.push([3], [0])
    state = p.get_state()
    with pytest.raises(ValueError, match="algorithm"):
        Packer.from_state(Packer(8, "wrap").config, state)
    with pytest.raises(ValueError, match="malformed"):
        Packer.from_state(p.config, {**state, "bins": [[[0, 0, 9]]]})
    with pytest.raises(ValueError, match="malformed"):
        Packer.from_state(p.config, {**state, "bins": [[[0, 0, 1]]] * 3})


def test_pickle_round_trip_keeps_state():
    import pickle

    p = Packer(16, "best_fit_wrap", candidate_pool_size=3)
    p.push([5, 9, 4, 7, 2], range(5))
    q = pickle.loads(pickle.dumps(p))
    assert q.get_state() == p.get_state() and q.config == p.config
