# cython: language_level=3
"""JSONL line indexing and light JSON structure scans (compiled twin of ``lineindex_np``).

Byte spans are given as ``offsets`` (int64, n + 1 entries): span i is ``buf[offsets[i]:offsets[i+1]]``.
Structure scans follow one rule set on any input, valid JSON or not, so both twins agree byte for
byte: a double quote opens or closes a string unless an odd run of backslashes precedes it within
the span; brackets and colons count only outside strings; state resets at every span start.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memchr, memcmp, memcpy

cnp.import_array()


cdef inline bint _is_ws(uint8_t c) noexcept nogil:
    return c == 32 or c == 9 or c == 13 or c == 10


def scan_line_starts(const uint8_t[::1] buf, int64_t base, int64_t line_start, bint has_content):
    """Start offsets (absolute: ``base`` + position) of lines holding non-whitespace bytes.

    ``line_start`` / ``has_content`` carry the state of a line cut by the previous chunk; the
    updated state is returned with the starts: ``(starts, line_start, has_content)``. A line is
    recorded when its first non-whitespace byte is seen, so a line split across chunks is
    recorded once.
    """
    cdef Py_ssize_t n = buf.shape[0]
    cdef Py_ssize_t pos = 0, count = 0, bound = 1
    cdef const uint8_t* p
    cdef const uint8_t* hit
    if n == 0:
        return np.empty(0, dtype=np.int64), line_start, has_content
    p = &buf[0]
    with nogil:
        pos = 0
        while pos < n:
            hit = <const uint8_t*>memchr(p + pos, 10, n - pos)
            if hit == NULL:
                break
            bound += 1
            pos = (hit - p) + 1
    out = np.empty(bound, dtype=np.int64)
    cdef int64_t[::1] o = out
    with nogil:
        pos = 0
        while pos < n:
            if not has_content:
                if p[pos] == 10:
                    line_start = base + pos + 1
                    pos += 1
                    continue
                if _is_ws(p[pos]):
                    pos += 1
                    continue
                o[count] = line_start
                count += 1
                has_content = True
            hit = <const uint8_t*>memchr(p + pos, 10, n - pos)
            if hit == NULL:
                pos = n
                break
            pos = (hit - p) + 1
            line_start = base + pos
            has_content = False
    return out[:count].copy(), line_start, bool(has_content)


def gather_spans(const uint8_t[::1] src, const int64_t[::1] starts, const int64_t[::1] ends,
                 out=None):
    """Copy ``src[starts[i]:ends[i]]`` for every i into one buffer: ``(bytes uint8, offsets)``.

    ``out``, when given, is a writable uint8 array to fill (callers pass memory from Arrow's
    pool, which recycles it; fresh malloc'd megabytes cost a page fault per 4 KiB); the bytes
    returned are then its first ``offsets[-1]`` bytes.
    """
    cdef Py_ssize_t n = starts.shape[0], i
    cdef int64_t total = 0, length
    offsets = np.empty(n + 1, dtype=np.int64)
    cdef int64_t[::1] off = offsets
    off[0] = 0
    for i in range(n):
        length = ends[i] - starts[i]
        if length < 0 or starts[i] < 0 or ends[i] > src.shape[0]:
            raise IndexError(f"span {i} [{starts[i]}, {ends[i]}) outside a buffer of {src.shape[0]}")
        total += length
        off[i + 1] = total
    if out is None:
        out = np.empty(total, dtype=np.uint8)
    elif out.shape[0] < total:
        raise ValueError(f"out holds {out.shape[0]} bytes, the spans {total}")
    out = out[:total]
    if total == 0:
        return out, offsets
    cdef uint8_t[::1] o = out
    with nogil:
        for i in range(n):
            length = off[i + 1] - off[i]
            if length:
                memcpy(&o[off[i]], &src[starts[i]], length)
    return out, offsets


def count_members(const uint8_t[::1] buf, const int64_t[::1] offsets):
    """Per span, the colons outside strings: the number of object members at any depth."""
    cdef Py_ssize_t n = offsets.shape[0] - 1, i
    cdef int64_t j, c
    cdef bint in_str, esc
    cdef uint8_t ch
    out = np.zeros(max(n, 0), dtype=np.int64)
    cdef int64_t[::1] o = out
    for i in range(n):
        if offsets[i] < 0 or offsets[i + 1] > buf.shape[0] or offsets[i] > offsets[i + 1]:
            raise IndexError(f"span {i} [{offsets[i]}, {offsets[i + 1]}) outside a buffer of {buf.shape[0]}")
    with nogil:
        for i in range(n):
            in_str = False
            esc = False
            c = 0
            for j in range(offsets[i], offsets[i + 1]):
                ch = buf[j]
                if ch == 92:
                    esc = not esc
                    continue
                if ch == 34 and not esc:
                    in_str = not in_str
                elif ch == 58 and not in_str:
                    c += 1
                esc = False
            o[i] = c
    return out


def key_presence(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] ends,
                 const uint8_t[::1] key):
    """Per span ``buf[starts[i]:ends[i]]``: 1 if the top-level object has member ``key`` (raw JSON-escaped bytes), else 2
    if some top-level key is written with escapes (undecidable here), else 0.

    A top-level key is a string opened outside strings at bracket depth 1 whose first
    non-whitespace follower within the span is a colon.
    """
    cdef Py_ssize_t n = starts.shape[0], i
    cdef int64_t j, end, k, qstart = 0, depth
    cdef Py_ssize_t klen = key.shape[0]
    cdef bint in_str, esc, candidate = False, has_bs = False, found, unknown
    cdef uint8_t ch
    cdef const uint8_t* kp = &key[0] if klen > 0 else NULL
    if ends.shape[0] != n:
        raise ValueError("starts and ends differ in length")
    for i in range(n):
        if starts[i] < 0 or ends[i] > buf.shape[0] or starts[i] > ends[i]:
            raise IndexError(f"span {i} [{starts[i]}, {ends[i]}) outside a buffer of {buf.shape[0]}")
    out = np.zeros(max(n, 0), dtype=np.int8)
    cdef cnp.int8_t[::1] o = out
    with nogil:
        for i in range(n):
            in_str = False
            esc = False
            depth = 0
            found = False
            unknown = False
            end = ends[i]
            j = starts[i]
            while j < end:
                ch = buf[j]
                if ch == 92:
                    esc = not esc
                    if in_str and candidate:
                        has_bs = True
                    j += 1
                    continue
                if ch == 34 and not esc:
                    if not in_str:
                        in_str = True
                        candidate = depth == 1
                        has_bs = False
                        qstart = j + 1
                    else:
                        in_str = False
                        if candidate:
                            k = j + 1
                            while k < end and _is_ws(buf[k]):
                                k += 1
                            if k < end and buf[k] == 58:
                                if (j - qstart == klen
                                        and (klen == 0 or memcmp(&buf[qstart], kp, klen) == 0)):
                                    found = True
                                elif has_bs:
                                    unknown = True
                        candidate = False
                elif not in_str:
                    if ch == 123 or ch == 91:
                        depth += 1
                    elif ch == 125 or ch == 93:
                        depth -= 1
                esc = False
                j += 1
            o[i] = 1 if found else (2 if unknown else 0)
    return out
