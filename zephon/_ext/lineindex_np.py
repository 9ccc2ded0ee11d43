"""JSONL line indexing and light JSON structure scans (numpy twin of ``lineindex.pyx``).

Same functions, same results, vectorised with numpy. Byte spans are ``offsets`` (int64, n + 1
entries). Structure rule (both twins): a double quote toggles "inside a string" unless an odd
run of backslashes precedes it within the span; brackets and colons count only outside strings;
state resets at every span start.
"""

from __future__ import annotations

import numpy as np

_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 13, 32]] = True


def _cumsum(mask: np.ndarray) -> np.ndarray:
    """int64 running count of a boolean mask (cumsum straight from bool is slow in numpy)."""
    return np.cumsum(mask.astype(np.int64))


def _u8(buf) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf


def scan_line_starts(buf, base: int, line_start: int, has_content: bool):
    """Start offsets (``base`` + position) of lines holding non-whitespace bytes, plus the state
    carried to the next chunk: ``(starts, line_start, has_content)``."""
    a = _u8(buf)
    n = len(a)
    if n == 0:
        return np.empty(0, dtype=np.int64), line_start, has_content
    nl = np.flatnonzero(a == 10)
    seg_start = np.concatenate(([0], nl + 1)).astype(np.int64)
    seg_end = np.concatenate((nl, [n])).astype(np.int64)
    # a segment has content if its first byte is not whitespace (the usual '{'); the rare
    # segments that start with whitespace are checked byte by byte
    nonempty = seg_end > seg_start
    first = a[np.minimum(seg_start, n - 1)]
    has = nonempty & ~_WS[first]
    for i in np.flatnonzero(nonempty & ~has).tolist():
        has[i] = bool((~_WS[a[seg_start[i]:seg_end[i]]]).any())
    starts = base + seg_start
    starts[0] = line_start
    record = has.copy()
    if has_content:
        record[0] = False
    if seg_start[-1] >= n:  # chunk ended with a newline: the last segment is empty
        record = record[:-1]
        starts = starts[:-1]
        state = (base + n, False)
    else:
        last = len(seg_start) - 1
        state = (int(starts[last]), bool(has[last] or (last == 0 and has_content)))
    return starts[record].astype(np.int64), state[0], state[1]


def _check_spans(size: int, starts: np.ndarray, ends: np.ndarray) -> None:
    bad = np.flatnonzero((ends < starts) | (starts < 0) | (ends > size))
    if len(bad):
        i = int(bad[0])
        raise IndexError(f"span {i} [{starts[i]}, {ends[i]}) outside a buffer of {size}")


def gather_spans(src, starts, ends, out=None):
    """Copy ``src[starts[i]:ends[i]]`` for every i into one buffer: ``(bytes uint8, offsets)``;
    into the writable uint8 array ``out`` when given (then its first ``offsets[-1]`` bytes)."""
    a = _u8(src)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    lengths = ends - starts
    _check_spans(len(a), starts, ends)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    total = int(offsets[-1])
    if out is not None and len(out) < total:
        raise ValueError(f"out holds {len(out)} bytes, the spans {total}")
    if total == 0:
        return (np.empty(0, dtype=np.uint8) if out is None else out[:0]), offsets
    idx = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    if out is None:
        return a[idx], offsets
    np.take(a, idx, out=out[:total])
    return out[:total], offsets


def _structure(a: np.ndarray, offsets: np.ndarray):
    """Per byte: span id, real-quote mask and inside-string mask (quotes themselves excluded)."""
    lengths = np.diff(offsets)
    span = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    first = offsets[:-1][span] if len(span) else np.empty(0, dtype=np.int64)
    pos = np.arange(len(a), dtype=np.int64) + offsets[0]
    bs = a == 92
    # position of the last non-backslash byte before each byte, clamped to the span start - 1
    last_non_bs = np.maximum.accumulate(np.where(~bs, pos, offsets[0] - 1))
    prev_last = np.concatenate(([offsets[0] - 1], last_non_bs[:-1]))
    run = pos - 1 - np.maximum(prev_last, first - 1)
    quote = (a == 34) & (run % 2 == 0)
    q_excl = np.concatenate(([0], _cumsum(quote)))  # real quotes before i
    q_before = q_excl[:-1] - q_excl[offsets[:-1] - offsets[0]][span]  # ... within the span
    inside = (q_before % 2 == 1) & ~quote
    return span, first, quote, inside, q_before


def count_members(buf, offsets):
    """Per span, the colons outside strings: the number of object members at any depth."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    if n <= 0:
        return np.zeros(max(n, 0), dtype=np.int64)
    _check_spans(len(_u8(buf)), offsets[:-1], offsets[1:])
    a = _u8(buf)[offsets[0] : offsets[-1]]
    if len(a) == 0:
        return np.zeros(n, dtype=np.int64)
    span, _, _, inside, _ = _structure(a, offsets)
    colon = (a == 58) & ~inside
    return np.bincount(span[colon], minlength=n).astype(np.int64)


def key_presence(buf, starts, ends, key):
    """Per span ``buf[starts[i]:ends[i]]``: 1 if the top-level object has member ``key`` (raw JSON-escaped bytes), else 2 if
    some top-level key is written with escapes, else 0 (same rule as the compiled twin)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if len(starts) != len(ends):
        raise ValueError("starts and ends differ in length")
    n = len(starts)
    out = np.zeros(n, dtype=np.int8)
    if n == 0:
        return out
    a, offsets = gather_spans(buf, starts, ends)  # spans laid end to end
    k = _u8(bytes(key))
    if len(a) == 0:
        return out
    span, first, quote, inside, q_before = _structure(a, offsets)
    base = offsets[0]
    outside = ~inside & ~quote
    delta = np.zeros(len(a), dtype=np.int64)
    delta[outside & ((a == 123) | (a == 91))] = 1
    delta[outside & ((a == 125) | (a == 93))] = -1
    d_excl = np.concatenate(([0], np.cumsum(delta)))
    depth_before = d_excl[:-1] - d_excl[offsets[:-1] - base][span]
    qpos = np.flatnonzero(quote)
    opening = qpos[q_before[qpos] % 2 == 0]
    closing_all = qpos[q_before[qpos] % 2 == 1]
    # each opening quote's partner is the next real quote of the same span, if any
    nxt = np.searchsorted(closing_all, opening, side="right")
    ok = nxt < len(closing_all)
    opening, close = opening[ok], closing_all[nxt[ok]]
    same = span[opening] == span[close]
    opening, close = opening[same], close[same]
    cand = depth_before[opening] == 1
    opening, close = opening[cand], close[cand]
    if len(opening) == 0:
        return out
    # first non-whitespace byte after the closing quote, within the span
    non_ws = np.flatnonzero(~_WS[a])
    after = np.searchsorted(non_ws, close + 1)
    has_next = after < len(non_ws)
    follow = np.where(has_next, non_ws[np.minimum(after, len(non_ws) - 1)], len(a))
    span_end = offsets[1:][span[close]] - base
    is_key = (follow < span_end) & (a[np.minimum(follow, len(a) - 1)] == 58)
    opening, close = opening[is_key], close[is_key]
    if len(opening) == 0:
        return out
    key_len = close - opening - 1
    bs_cum = np.concatenate(([0], _cumsum(a == 92)))
    has_bs = bs_cum[close] - bs_cum[opening + 1] > 0
    match = key_len == len(k)
    if match.any() and len(k):
        starts = opening[match] + 1
        window = a[starts[:, None] + np.arange(len(k))[None, :]]
        match[np.flatnonzero(match)] = np.all(window == k[None, :], axis=1)
    spans = span[opening]
    unknown = np.zeros(n, dtype=bool)
    unknown[spans[has_bs & ~match]] = True
    found = np.zeros(n, dtype=bool)
    found[spans[match]] = True
    out[unknown] = 2
    out[found] = 1
    return out
