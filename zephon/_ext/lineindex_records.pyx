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
# kinds of a cell (the _K_ values below); named KIND_* as Cython reserves NULL
KIND_ABSENT, KIND_STRING, KIND_INT, KIND_FLOAT, KIND_TRUE, KIND_FALSE, KIND_NULL = range(7)

cdef enum:
    _MAX_KEYS = 64  # one bit each in a record's seen-keys mask
    _MAX_KEY_BYTES = 256
    _REJECT = -1
    _GROW = -2
    # a mantissa of at most 64 digits times 10**200 stays far below the largest double
    _MAX_NUMBER_BYTES = 64
    _MAX_EXPONENT = 200
    _K_STRING = 1
    _K_INT = 2
    _K_FLOAT = 3
    _K_TRUE = 4
    _K_FALSE = 5
    _K_NULL = 6

# bytes copied as they are inside a string: printable ASCII except '"' and '\'
cdef uint8_t _PLAIN[256]
for _c in range(256):
    _PLAIN[_c] = 1 if (0x20 <= _c < 0x80 and _c != 34 and _c != 92) else 0


cdef inline bint _is_ws(uint8_t c) noexcept nogil:
    return c == 32 or c == 9 or c == 13 or c == 10


cdef inline int _hex(uint8_t c) noexcept nogil:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef inline int64_t _hex4(const uint8_t* p, int64_t pos, int64_t end) noexcept nogil:
    """The code unit of the 4 hex digits at ``pos``, or -1."""
    cdef int64_t v = 0
    cdef int d, k
    if end - pos < 4:
        return -1
    for k in range(4):
        d = _hex(p[pos + k])
        if d < 0:
            return -1
        v = (v << 4) | d
    return v


cdef inline int _utf8_len(const uint8_t* p, int64_t pos, int64_t end) noexcept nogil:
    """Length of the valid UTF-8 sequence of a non-ASCII lead byte at ``pos``, or 0."""
    cdef uint8_t c = p[pos], c1, lo = 0x80, hi = 0xBF
    cdef int n, k
    if 0xC2 <= c <= 0xDF:
        n = 2
    elif 0xE0 <= c <= 0xEF:
        n = 3
        if c == 0xE0:
            lo = 0xA0
        elif c == 0xED:  # no UTF-16 surrogates
            hi = 0x9F
    elif 0xF0 <= c <= 0xF4:
        n = 4
        if c == 0xF0:
            lo = 0x90
        elif c == 0xF4:  # nothing past U+10FFFF
            hi = 0x8F
    else:
        return 0
    if end - pos < n:
        return 0
    c1 = p[pos + 1]
    if c1 < lo or c1 > hi:
        return 0
    for k in range(2, n):
        if (p[pos + k] & 0xC0) != 0x80:
            return 0
    return n


cdef inline int64_t _put_utf8(uint8_t* out, int64_t o, uint32_t cp) noexcept nogil:
    if cp < 0x80:
        out[o] = <uint8_t>cp
        return o + 1
    if cp < 0x800:
        out[o] = <uint8_t>(0xC0 | (cp >> 6))
        out[o + 1] = <uint8_t>(0x80 | (cp & 0x3F))
        return o + 2
    if cp < 0x10000:
        out[o] = <uint8_t>(0xE0 | (cp >> 12))
        out[o + 1] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
        out[o + 2] = <uint8_t>(0x80 | (cp & 0x3F))
        return o + 3
    out[o] = <uint8_t>(0xF0 | (cp >> 18))
    out[o + 1] = <uint8_t>(0x80 | ((cp >> 12) & 0x3F))
    out[o + 2] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
    out[o + 3] = <uint8_t>(0x80 | (cp & 0x3F))
    return o + 4


cdef inline int64_t _plain_run(const uint8_t* p, int64_t pos, int64_t end) noexcept nogil:
    """End of the run of plain bytes from ``pos``: 8 at a time while a word holds no quote,
    backslash, control or non-ASCII byte (exact "some byte is zero / below n" word tests)."""
    cdef uint64_t w, q, b
    cdef uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL
    while end - pos >= 8:
        memcpy(&w, p + pos, 8)
        q = w ^ (ones * 34)
        b = w ^ (ones * 92)
        if (((q - ones) & ~q) | ((b - ones) & ~b) | ((w - ones * 32) & ~w) | w) & highs:
            break
        pos += 8
    while pos < end and _PLAIN[p[pos]]:
        pos += 1
    return pos


cdef int64_t _string(const uint8_t* p, int64_t pos, int64_t end, uint8_t* out,
                     int64_t* o_io) noexcept nogil:
    """Decode the string whose opening quote is just before ``pos`` into ``out`` at
    ``o_io[0]`` (advanced); returns the position after the closing quote, or -1."""
    cdef int64_t o = o_io[0], run, u, lo
    cdef uint8_t c
    cdef int n
    while pos < end:
        run = _plain_run(p, pos, end)
        if run > pos:
            memcpy(out + o, p + pos, run - pos)
            o += run - pos
            pos = run
            if pos >= end:
                break
        c = p[pos]
        if c == 34:
            o_io[0] = o
            return pos + 1
        if c == 92:
            if pos + 1 >= end:
                return -1
            c = p[pos + 1]
            pos += 2
            if c == 34 or c == 92 or c == 47:
                out[o] = c
            elif c == 98:
                out[o] = 8
            elif c == 102:
                out[o] = 12
            elif c == 110:
                out[o] = 10
            elif c == 114:
                out[o] = 13
            elif c == 116:
                out[o] = 9
            elif c == 117:
                u = _hex4(p, pos, end)
                if u < 0:
                    return -1
                pos += 4
                if 0xDC00 <= u <= 0xDFFF:  # a low surrogate with no high one
                    return -1
                if 0xD800 <= u <= 0xDBFF:
                    if pos + 1 >= end or p[pos] != 92 or p[pos + 1] != 117:
                        return -1
                    lo = _hex4(p, pos + 2, end)
                    if lo < 0xDC00 or lo > 0xDFFF:
                        return -1
                    pos += 6
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00)
                o = _put_utf8(out, o, <uint32_t>u)
                continue
            else:
                return -1
            o += 1
            continue
        if c < 0x20:
            return -1
        n = _utf8_len(p, pos, end)
        if n == 0:
            return -1
        memcpy(out + o, p + pos, n)
        o += n
        pos += n
    return -1


cdef int64_t _skip_ws(const uint8_t* p, int64_t pos, int64_t end) noexcept nogil:
    while pos < end and _is_ws(p[pos]):
        pos += 1
    return pos


cdef inline bint _is_digit(const uint8_t* p, int64_t pos, int64_t end) noexcept nogil:
    return pos < end and 48 <= p[pos] <= 57


cdef int64_t _digits(const uint8_t* p, int64_t pos, int64_t end) noexcept nogil:
    while _is_digit(p, pos, end):
        pos += 1
    return pos


cdef bint _int64_of(const uint8_t* p, int64_t pos, int64_t end, int64_t* value) noexcept nogil:
    """The integer written ``-?[0-9]+`` in ``[pos, end)`` into ``value``; 0 when past int64
    (Arrow would type such a column double: the general path decides)."""
    cdef bint neg = p[pos] == 45
    cdef uint64_t u = 0
    if neg:
        pos += 1
    if end - pos > 19:  # 19 digits fit uint64; the limits are checked below
        return 0
    while pos < end:
        u = u * 10 + (p[pos] - 48)
        pos += 1
    if neg:
        if u > 9223372036854775808ULL:
            return 0
        value[0] = -(<int64_t>(u - 1)) - 1  # -2**63 without overflowing on the way
    else:
        if u > 9223372036854775807ULL:
            return 0
        value[0] = <int64_t>u
    return 1


cdef int64_t _number(const uint8_t* p, int64_t pos, int64_t end, int* kind,
                     int64_t* value) noexcept nogil:
    """Check the JSON number at ``pos`` (RFC 8259 grammar and this module's limits); returns
    the position after it, or -1. ``kind``: _K_INT or _K_FLOAT; ``value``: an int's value."""
    cdef int64_t s = pos, int_end, e = 0
    cdef bint exp_neg = 0
    kind[0] = _K_INT
    if pos < end and p[pos] == 45:
        pos += 1
    if not _is_digit(p, pos, end):
        return -1
    if p[pos] == 48:  # a leading zero stands alone ("01" leaves "1" for the caller to reject)
        pos += 1
    else:
        pos = _digits(p, pos, end)
    int_end = pos
    if pos < end and p[pos] == 46:
        if not _is_digit(p, pos + 1, end):
            return -1
        pos = _digits(p, pos + 1, end)
        kind[0] = _K_FLOAT
    if pos < end and (p[pos] == 101 or p[pos] == 69):
        pos += 1
        if pos < end and (p[pos] == 43 or p[pos] == 45):
            exp_neg = p[pos] == 45
            pos += 1
        if not _is_digit(p, pos, end):
            return -1
        while _is_digit(p, pos, end):
            if e <= _MAX_EXPONENT:
                e = e * 10 + (p[pos] - 48)
            pos += 1
        if not exp_neg and e > _MAX_EXPONENT:
            return -1
        kind[0] = _K_FLOAT
    if pos - s > _MAX_NUMBER_BYTES:
        return -1
    if kind[0] == _K_INT and not _int64_of(p, s, int_end, value):
        return -1
    return pos


cdef int64_t _literal(const uint8_t* p, int64_t pos, int64_t end, int* kind) noexcept nogil:
    """``true``, ``false`` or ``null`` at ``pos``: the position after it, or -1."""
    if end - pos >= 4 and memcmp(p + pos, b"true", 4) == 0:
        kind[0] = _K_TRUE
        return pos + 4
    if end - pos >= 5 and memcmp(p + pos, b"false", 5) == 0:
        kind[0] = _K_FALSE
        return pos + 5
    if end - pos >= 4 and memcmp(p + pos, b"null", 4) == 0:
        kind[0] = _K_NULL
        return pos + 4
    return -1


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
