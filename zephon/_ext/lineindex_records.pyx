# cython: language_level=3
"""Flat JSONL records of scalar values, parsed straight out of their line spans (compiled twin
of ``lineindex_records_np``).

Most LLM corpora are lines like ``{"id": 17, "url": "...", "text": "...", "score": 0.53}``.
For them ``pyarrow.json`` costs more than all the rest of a read (type inference, block
chunking, a copy of the lines); this kernel decodes the values in one pass with no copy of the
lines, and ``zephon.io.formats.records.flat_record_table`` applies Arrow's typing rules to them.

``flat_records(buf, starts, ends)`` takes span i = ``buf[starts[i]:ends[i]]`` and returns
``(keys, values, vstart, vend, kinds, ints)``, or None when any span falls outside the accepted
shape:

- a span is JSON whitespace, one object, JSON whitespace; every member value is a string, a
  number, ``true``, ``false`` or ``null``; no key repeats within an object; every string is
  valid JSON (escapes, surrogate pairs, no raw control characters) and valid UTF-8;
- a number follows the JSON grammar, is at most ``MAX_NUMBER_BYTES`` long, has an exponent of
  at most ``MAX_EXPONENT`` (so its double is finite and Arrow's parser, which refuses
  exponents past 308, never calls it too big) and, written without fraction and exponent,
  fits int64 (past it Arrow types the column double; the general path does that);
- at most ``MAX_KEYS`` distinct keys in all, each at most ``MAX_KEY_BYTES`` UTF-8 bytes.

``keys``: the decoded keys (UTF-8 bytes) in order of first appearance. ``values``: uint8, every
value laid end to end in span order, then member order: strings decoded, numbers and literals
as written. ``vstart`` / ``vend``: int64 arrays of shape (len(keys), n), the value of key j in
span i is ``values[vstart[j, i]:vend[j, i]]``, or -1 / -1 when span i lacks key j. ``kinds``:
uint8, same shape, one of ``KIND_ABSENT``, ``KIND_STRING``, ``KIND_INT`` (no fraction or
exponent), ``KIND_FLOAT``, ``KIND_TRUE``, ``KIND_FALSE``, ``KIND_NULL``. ``ints``: int64, same
shape, the value of each ``KIND_INT`` cell (else 0). Callers fall back to a general parser on None, so a rejection never changes results, it only
costs the scan.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

cnp.import_array()

MAX_KEYS = 64
MAX_KEY_BYTES = 256
MAX_NUMBER_BYTES = 64
MAX_EXPONENT = 200
# kinds of a cell (the _K_ values of json_scalars.pxi); named KIND_* as Cython reserves NULL
KIND_ABSENT, KIND_STRING, KIND_INT, KIND_FLOAT, KIND_TRUE, KIND_FALSE, KIND_NULL = range(7)

cdef enum:
    _MAX_KEYS = 64  # one bit each in a record's seen-keys mask
    _MAX_KEY_BYTES = 256
    _REJECT = -1
    _GROW = -2

# the scanners of one JSON scalar each (strings, numbers, literals), their limits and the kinds
# they report (_K_*), included as text so that they inline into _record as before
include "json_scalars.pxi"


cdef int64_t _value(const uint8_t* p, int64_t pos, int64_t end, uint8_t* out, int64_t* o_io,
                    int* kind, int64_t* value) noexcept nogil:
    """Decode the member value at ``pos`` into ``out`` at ``o_io[0]`` (advanced): a string
    decoded, a number or literal as written (that keeps member order readable from the value
    positions); returns the position after it, or -1."""
    cdef int64_t after
    cdef uint8_t c = p[pos]
    if c == 34:
        kind[0] = _K_STRING
        return _string(p, pos + 1, end, out, o_io)
    if c == 45 or 48 <= c <= 57:
        after = _number(p, pos, end, kind, value)
    else:
        after = _literal(p, pos, end, kind)
    if after < 0:
        return -1
    memcpy(out + o_io[0], p + pos, after - pos)
    o_io[0] += after - pos
    return after


cdef int _record(const uint8_t* p, int64_t pos, int64_t end, uint8_t* out, int64_t* o_io,
                 uint8_t* keybuf, int64_t* keylen, int* nkeys, int kcap,
                 int64_t* vstart, int64_t* vend, uint8_t* kinds, int64_t* ints,
                 Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """Parse span ``[pos, end)`` as record i; 0, _REJECT, or _GROW (a key past ``kcap``)."""
    cdef int64_t o = o_io[0], ks, kl, vs, value = 0
    cdef uint64_t seen = 0
    cdef int j, kind = 0
    pos = _skip_ws(p, pos, end)
    if pos >= end or p[pos] != 123:
        return _REJECT
    pos = _skip_ws(p, pos + 1, end)
    if pos < end and p[pos] == 125:
        pos += 1
    else:
        while True:
            if pos >= end or p[pos] != 34:
                return _REJECT
            ks = o  # the key is decoded where its value will go, then overwritten
            pos = _string(p, pos + 1, end, out, &o)
            if pos < 0:
                return _REJECT
            kl = o - ks
            if kl > _MAX_KEY_BYTES:
                return _REJECT
            o = ks
            j = 0
            while j < nkeys[0]:
                if keylen[j] == kl and memcmp(keybuf + j * _MAX_KEY_BYTES, out + ks, kl) == 0:
                    break
                j += 1
            if j == nkeys[0]:
                if j >= _MAX_KEYS:
                    return _REJECT
                if j >= kcap:
                    return _GROW
                memcpy(keybuf + j * _MAX_KEY_BYTES, out + ks, kl)
                keylen[j] = kl
                nkeys[0] = j + 1
            if seen & ((<uint64_t>1) << j):
                return _REJECT  # a repeated key
            seen |= (<uint64_t>1) << j
            pos = _skip_ws(p, pos, end)
            if pos >= end or p[pos] != 58:
                return _REJECT
            pos = _skip_ws(p, pos + 1, end)
            if pos >= end:
                return _REJECT
            vs = o
            pos = _value(p, pos, end, out, &o, &kind, &value)
            if pos < 0:
                return _REJECT
            vstart[j * n + i] = vs
            vend[j * n + i] = o
            kinds[j * n + i] = <uint8_t>kind
            if kind == _K_INT:
                ints[j * n + i] = value
            pos = _skip_ws(p, pos, end)
            if pos < end and p[pos] == 44:
                pos = _skip_ws(p, pos + 1, end)
                continue
            if pos < end and p[pos] == 125:
                pos += 1
                break
            return _REJECT
    if _skip_ws(p, pos, end) != end:
        return _REJECT
    o_io[0] = o
    return 0


def flat_records(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] ends,
                 out=None):
    """See the module docstring: ``(keys, values, vstart, vend, kinds, ints)`` or None.
    ``out``: a writable uint8 array of at least the spans' total size to decode into (``values``
    is then a view of it), so the caller chooses the allocator."""
    cdef Py_ssize_t n = starts.shape[0], i, size = buf.shape[0]
    cdef int64_t total = 0, o = 0, mark
    cdef int nkeys = 0, kcap = 4, status = 0
    if ends.shape[0] != n:
        raise ValueError("starts and ends differ in length")
    for i in range(n):
        if starts[i] < 0 or ends[i] > size or starts[i] > ends[i]:
            raise IndexError(f"span {i} [{starts[i]}, {ends[i]}) outside a buffer of {size}")
        total += ends[i] - starts[i]
    # decoded values never outgrow their JSON text, so the spans' size bounds the output
    if out is None:
        values = np.empty(total, dtype=np.uint8)
    elif out.shape[0] < total:
        raise ValueError(f"out holds {out.shape[0]} bytes, the spans {total}")
    else:
        values = out
    keybuf = np.empty(_MAX_KEYS * _MAX_KEY_BYTES, dtype=np.uint8)
    keylen = np.zeros(_MAX_KEYS, dtype=np.int64)
    cells = _cells(kcap, n)
    cdef uint8_t[::1] outv = values
    cdef uint8_t[::1] kb = keybuf
    cdef int64_t[::1] kl = keylen
    cdef int64_t[:, ::1] vs = cells[0]
    cdef int64_t[:, ::1] ve = cells[1]
    cdef uint8_t[:, ::1] kd = cells[2]
    cdef int64_t[:, ::1] iv = cells[3]
    cdef const uint8_t* p = &buf[0] if size > 0 else NULL
    cdef uint8_t* outp = &outv[0] if total > 0 else NULL
    if n == 0:
        return [], values[:0], cells[0][:0], cells[1][:0], cells[2][:0], cells[3][:0]
    if total == 0:
        return None
    i = 0
    while i < n:
        with nogil:
            while i < n:
                mark = o
                status = _record(p, starts[i], ends[i], outp, &o, &kb[0], &kl[0], &nkeys, kcap,
                                 &vs[0, 0], &ve[0, 0], &kd[0, 0], &iv[0, 0], n, i)
                if status != 0:
                    o = mark
                    break
                i += 1
        if status == _REJECT:
            return None
        if status == _GROW:  # more keys than rows in the cell arrays: widen, redo span i
            kcap = _MAX_KEYS
            wider = _cells(kcap, n)
            for a, b in zip(wider, cells):
                a[:nkeys] = b[:nkeys]
            cells = wider
            vs, ve, kd, iv = cells
            status = 0
    keys = [keybuf[j * _MAX_KEY_BYTES:j * _MAX_KEY_BYTES + keylen[j]].tobytes()
            for j in range(nkeys)]
    return (keys, values[:o]) + tuple(c[:nkeys] for c in cells)


def _cells(int kcap, Py_ssize_t n):
    """vstart, vend, kinds, ints for ``kcap`` keys: every cell absent."""
    return (np.full((kcap, n), -1, dtype=np.int64), np.full((kcap, n), -1, dtype=np.int64),
            np.zeros((kcap, n), dtype=np.uint8), np.zeros((kcap, n), dtype=np.int64))
