"""Flat JSONL records of string values (twin of ``lineindex_records.pyx``; same contract, see
its docstring).

A JSON parser does not vectorise, so this twin decodes each span with orjson (whose rules match
the compiled kernel's: RFC 8259 JSON, strict UTF-8, no lone surrogates, no BOM) and checks the
kernel's extra conditions: string values only, no repeated key, the key limits.
"""

from __future__ import annotations

import json

import numpy as np
import orjson

from zephon._ext import lineindex_np

MAX_KEYS = 64
MAX_KEY_BYTES = 256


def _members_in_text(text: bytes) -> int:
    """Members written in a flat object's text (orjson keeps only the last of repeated keys):
    a quarter of its quotes when no backslash can hide one, else the stdlib parser's pairs."""
    if b"\\" not in text:
        return text.count(b'"') // 4
    return len(json.loads(text, object_pairs_hook=list))


def flat_strings(buf, starts, ends, out=None):
    """``(keys, values, vstart, vend)`` of flat string-valued objects, or None; ``values`` is
    a view of ``out`` when given (a writable uint8 array of at least the spans' size)."""
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
        return [], np.empty(0, dtype=np.uint8) if out is None else out[:0], empty, empty.copy()
    keys: dict[str, int] = {}
    pieces: list[bytes] = []
    cols: list[tuple[int, int, int]] = []  # (key id, span, value end) per member, in order
    o = 0
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        text = a[s:e].tobytes()
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        if type(obj) is not dict:
            return None
        if _members_in_text(text) != len(obj):
            return None
        for k, v in obj.items():
            if type(v) is not str:
                return None
            j = keys.get(k)
            if j is None:
                if len(keys) >= MAX_KEYS or len(k.encode()) > MAX_KEY_BYTES:
                    return None
                j = keys[k] = len(keys)
            b = v.encode()
            pieces.append(b)
            o += len(b)
            cols.append((j, i, o))
    vstart = np.full((len(keys), n), -1, dtype=np.int64)
    vend = np.full((len(keys), n), -1, dtype=np.int64)
    if cols:
        j, i, stop = (np.array(x, dtype=np.int64) for x in zip(*cols))
        vend[j, i] = stop
        vstart[j, i] = stop - np.array([len(p) for p in pieces], dtype=np.int64)
    values = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    if out is None:
        values = values.copy()
    else:
        out[:o] = values
        values = out[:o]
    return [k.encode() for k in keys], values, vstart, vend
