# JSON scalars scanned in place, one function each, for the flat-records kernel
# (lineindex_records.pyx includes this file: an ``include``, not a module of its own, so that
# the scanners inline into the record loop as before; a call into another extension module
# would cost a pointer call per value).
#
# ``_string`` decodes a string body (escapes, surrogate pairs, raw control characters refused,
# UTF-8 checked byte by byte, plain runs copied 8 bytes at a time); ``_number`` checks a number
# against the JSON grammar and the kernel's limits and reads an int64 when it has no fraction or
# exponent; ``_literal`` reads ``true``, ``false`` or ``null``; ``_skip_ws`` skips JSON
# whitespace. Each returns the position after what it read, or -1 when the text is not what the
# kernel accepts (the caller then falls back to the general parser).

from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

cdef enum:
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
