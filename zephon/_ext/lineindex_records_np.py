"""Flat JSONL records of scalar values (twin of ``lineindex_records.pyx``; same contract, see its
docstring).

A JSON parser does not vectorise, so this twin validates each span with orjson (whose rules
match the compiled kernel's: RFC 8259 JSON, strict UTF-8, no lone surrogates, no BOM), then
reads its members with the stdlib parser, which hands over every number as written and every
repeated key, and checks the kernel's extra conditions: scalar values only, no repeated key,
the number and key limits.
"""

from __future__ import annotations

import json
import re

import numpy as np
import orjson

from zephon._ext import lineindex_np

MAX_KEYS = 64
MAX_KEY_BYTES = 256
MAX_NUMBER_BYTES = 64
MAX_EXPONENT = 200
KIND_ABSENT, KIND_STRING, KIND_INT, KIND_FLOAT, KIND_TRUE, KIND_FALSE, KIND_NULL = range(7)

_LITERALS = {True: (KIND_TRUE, b"true"), False: (KIND_FALSE, b"false"),
             None: (KIND_NULL, b"null")}
_EXPONENT = re.compile(r"[eE]\+?([0-9]+)$")  # a positive exponent's digits


class _Int(str):
    """An integer's text, as written."""


class _Float(str):
    """A number's text with a fraction or an exponent, as written."""


def _cell(v) -> tuple[int, bytes, int] | None:
    """(kind, bytes laid out in ``values``, int value) of one member value, or None."""
    if type(v) is str:
        return KIND_STRING, v.encode(), 0
    if type(v) is _Int or type(v) is _Float:
        if len(v) > MAX_NUMBER_BYTES:
            return None
        if type(v) is _Float:
            m = _EXPONENT.search(v)
            if m and int(m.group(1)) > MAX_EXPONENT:
                return None
            return KIND_FLOAT, v.encode(), 0
        value = int(v)
        if not -2**63 <= value < 2**63:
            return None
        return KIND_INT, v.encode(), value
    if type(v) is bool or v is None:
        kind, text = _LITERALS[v]
        return kind, text, 0
    return None


def _members(text: bytes) -> list[tuple[str, object]] | None:
    """The members of a flat object's text in order (repeats kept), or None if not one (or,
    found early, when a key repeats)."""
    try:
        obj = orjson.loads(text)  # the strict check: grammar, UTF-8, surrogates
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict:
        return None
    if b"\\" not in text and all(type(v) is str for v in obj.values()):
        # strings only and no backslash to hide a quote: four quotes a member tell repeats
        # apart without a second parse (orjson keeps only the last of repeated keys)
        return list(obj.items()) if text.count(b'"') == 4 * len(obj) else None
    return json.loads(text, object_pairs_hook=list, parse_int=_Int, parse_float=_Float)


def flat_records(buf, starts, ends, out=None):
    """``(keys, values, vstart, vend, kinds, ints)`` of flat scalar-valued objects, or None;
    ``values`` is a view of ``out`` when given (a writable uint8 array of at least the spans'
    size)."""
    a = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if len(starts) != len(ends):
        raise ValueError("starts and ends differ in length")
    n = len(starts)
    lineindex_np._check_spans(len(a), starts, ends)
    total = int((ends - starts).sum())
    if out is not None and len(out) < total:
        raise ValueError(f"out holds {len(out)} bytes, the spans {total}")
    if n == 0:
        empty = np.empty((0, 0), dtype=np.int64)
        return ([], np.empty(0, dtype=np.uint8) if out is None else out[:0], empty, empty.copy(),
                np.empty((0, 0), dtype=np.uint8), empty.copy())
    keys: dict[str, int] = {}
    pieces: list[bytes] = []
    cols: list[tuple[int, int, int, int, int]] = []  # (key id, span, end, kind, int) per member
    o = 0
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        members = _members(a[s:e].tobytes())
        if members is None or len({k for k, _ in members}) != len(members):
            return None
        for k, v in members:
            cell = _cell(v)
            if cell is None:
                return None
            j = keys.get(k)
            if j is None:
                if len(keys) >= MAX_KEYS or len(k.encode()) > MAX_KEY_BYTES:
                    return None
                j = keys[k] = len(keys)
            kind, b, value = cell
            pieces.append(b)
            o += len(b)
            cols.append((j, i, o, kind, value))
    shape = (len(keys), n)
    vstart, vend = np.full(shape, -1, dtype=np.int64), np.full(shape, -1, dtype=np.int64)
    kinds, ints = np.zeros(shape, dtype=np.uint8), np.zeros(shape, dtype=np.int64)
    if cols:
        j, i, stop, kind, value = (np.array(x, dtype=np.int64) for x in zip(*cols))
        vend[j, i] = stop
        vstart[j, i] = stop - np.array([len(p) for p in pieces], dtype=np.int64)
        kinds[j, i] = kind
        ints[j, i] = value
    values = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    if out is None:
        values = values.copy()
    else:
        out[:o] = values
        values = out[:o]
    return [k.encode() for k in keys], values, vstart, vend, kinds, ints
