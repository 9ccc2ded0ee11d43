"""The lineindex kernel: compiled and numpy twins agree, and both mean what the docs say."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zephon._ext import compiled, fallback

NP = fallback("lineindex")
CY = compiled("lineindex")
TWINS = [NP] if CY is None else [NP, CY]
needs_both = pytest.mark.skipif(CY is None, reason="compiled lineindex kernel not built")

_ALPHABET = b'{}[]":,\\ \n\tab01'
JSONISH = st.binary(max_size=80).map(lambda b: bytes(_ALPHABET[x % len(_ALPHABET)] for x in b))


def u8(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.uint8)


def reference_starts(data: bytes) -> list[int]:
    """Starts of lines with non-whitespace content, by plain Python."""
    out, pos = [], 0
    for line in data.split(b"\n"):
        if line.strip(b" \t\r"):
            out.append(pos)
        pos += len(line) + 1
    return out


def scan_chunked(k, data: bytes, sizes: list[int]) -> np.ndarray:
    a, pos, state, parts = u8(data), 0, (0, False), []
    i = 0
    while pos < len(a):
        step = max(1, sizes[i % len(sizes)] if sizes else len(a))
        s, *rest = k.scan_line_starts(a[pos:pos + step], pos, *state)
        state = tuple(rest)
        parts.append(np.asarray(s))
        pos += step
        i += 1
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


@pytest.mark.parametrize("k", TWINS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("data", [
    b"", b"\n", b"{}", b'{"a":1}\n{"a":2}\n', b'{"a":1}\n{"a":2}', b"\n\n  \n{}\n\n{}\n  \n",
    b'{"a":1}\r\n{"a":2}\r\n', b"  {}\n\t\n{}",
])
def test_scan_line_starts_examples(k, data):
    got = k.scan_line_starts(u8(data), 0, 0, False)[0]
    assert got.tolist() == reference_starts(data)
    assert got.dtype == np.int64


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200).map(lambda b: bytes(b"ab \n\t\r{}"[x % 8] for x in b)),
       sizes=st.lists(st.integers(1, 17), max_size=6))
def test_scan_chunked_equals_reference(data, sizes):
    for k in TWINS:
        assert scan_chunked(k, data, sizes).tolist() == reference_starts(data)


@needs_both
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=120), base=st.integers(0, 10**9), line_start=st.integers(0, 10**9),
       has=st.booleans())
def test_scan_state_agrees(data, base, line_start, has):
    a = CY.scan_line_starts(u8(data), base, line_start, has)
    b = NP.scan_line_starts(u8(data), base, line_start, has)
    assert a[0].tolist() == b[0].tolist() and a[1:] == b[1:]


@needs_both
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=100), spans=st.lists(st.tuples(st.integers(0, 100),
                                                               st.integers(0, 30)), max_size=8))
def test_gather_spans_agree(data, spans):
    n = len(data)
    starts = np.array([min(s, n) for s, _ in spans], dtype=np.int64)
    ends = np.array([min(s + w, n) for (_, w), s in zip(spans, starts)], dtype=np.int64)
    a, oa = CY.gather_spans(u8(data), starts, ends)
    b, ob = NP.gather_spans(u8(data), starts, ends)
    assert a.tobytes() == b.tobytes() == b"".join(data[s:e] for s, e in zip(starts, ends))
    assert oa.tolist() == ob.tolist()


@pytest.mark.parametrize("k", TWINS, ids=lambda k: k.__name__)
def test_gather_spans_rejects_out_of_range(k):
    with pytest.raises(IndexError):
        k.gather_spans(u8(b"abc"), np.array([1], np.int64), np.array([5], np.int64))


@needs_both
@settings(max_examples=400, deadline=None)
@given(data=JSONISH, cuts=st.lists(st.integers(0, 80), max_size=5))
def test_count_members_agree(data, cuts):
    offs = np.array([0] + sorted(min(c, len(data)) for c in cuts) + [len(data)], np.int64)
    assert CY.count_members(u8(data), offs).tolist() == NP.count_members(u8(data), offs).tolist()


@needs_both
@settings(max_examples=400, deadline=None)
@given(data=JSONISH, spans=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 40)), max_size=5),
       key=st.sampled_from([b"a", b"ab", b"", b"b0", b'a\\"']))
def test_key_presence_agree(data, spans, key):
    n = len(data)
    starts = np.array([min(s, n) for s, _ in spans], dtype=np.int64)
    ends = np.array([min(s + w, n) for (_, w), s in zip(spans, starts)], dtype=np.int64)
    a = CY.key_presence(u8(data), starts, ends, u8(key))
    b = NP.key_presence(u8(data), starts, ends, key)
    assert a.tolist() == b.tolist()


RECORDS = [
    {"a": 1, "b": {"c": 2, "d": [1, {"e": None}]}},
    {"text": 'quote " colon : brace { bracket [', "a": None},
    {"nested": {"a": 1}},
    {"x\"y": 1, "a\\b": 2},
    {},
    {"list": [{"a": 1}, {"a": 2, "b": 3}]},
    {"é": "ü", "a": "\\"},
]


def _members(obj) -> int:
    if isinstance(obj, dict):
        return len(obj) + sum(_members(v) for v in obj.values())
    if isinstance(obj, list):
        return sum(_members(v) for v in obj)
    return 0


@pytest.mark.parametrize("k", TWINS, ids=lambda k: k.__name__)
def test_count_members_counts_object_members(k):
    lines = [json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in RECORDS]
    buf = b"".join(lines)
    offs = np.concatenate(([0], np.cumsum([len(x) for x in lines])))
    got = k.count_members(u8(buf), offs.astype(np.int64))
    assert got.tolist() == [_members(r) for r in RECORDS]


@pytest.mark.parametrize("k", TWINS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("key", ["a", "b", "nested", 'x"y', "a\\b", "é", "missing"])
def test_key_presence_finds_top_level_keys_only(k, key):
    lines = [json.dumps(r, ensure_ascii=False).encode() for r in RECORDS]
    buf = b"".join(lines)
    ends = np.cumsum([len(x) for x in lines]).astype(np.int64)
    starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
    raw = json.dumps(key, ensure_ascii=False).encode()[1:-1]
    got = k.key_presence(u8(buf), starts, ends, u8(raw)).tolist()
    for r, g in zip(RECORDS, got):
        escaped_keys = any("\\" in json.dumps(x, ensure_ascii=False) for x in r)
        if key in r:
            assert g == 1, (r, key)
        else:  # nested keys never count; escaped top-level keys make the answer "unknown"
            assert g == (2 if escaped_keys else 0), (r, key)


# -- lineindex_records: flat scalar-valued records decoded straight from their spans -----------

NPR = fallback("lineindex_records")
CYR = compiled("lineindex_records")
RTWINS = [NPR] if CYR is None else [NPR, CYR]
needs_both_records = pytest.mark.skipif(CYR is None, reason="compiled lineindex_records not built")

_FLAT_ALPHABET = [b"{", b"}", b'"', b":", b",", b" ", b"\n", b"\\", b"u", b"d8", b"dc", b"00", b"e9",
                  b"a", b"b", b"n", b"/", b"1", b"\xc3\xa9", b"\xc3", b"\xff", b"\x01", b"\xed\xa0\x80",
                  b"\xf0\x9f\x98\x80", b'{"a":"', b'"}', b'","b":"', b"\\ud83d\\ude00", b"\xef\xbb\xbf",
                  # numbers and literals, whole and in pieces
                  b'{"a":', b',"b":', b"-", b"0", b"9", b".", b"e", b"E", b"+", b"true", b"false",
                  b"null", b"nul", b"NaN", b"1e200", b"1e201", b"1e-999", b"9223372036854775807",
                  b"9223372036854775808", b"-9223372036854775808", b"12345678901234567890", b"0" * 60]
FLATISH = st.lists(st.sampled_from(_FLAT_ALPHABET), max_size=30).map(b"".join)
TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12)
SCALAR = st.one_of(TEXT, st.integers(-2**63, 2**63 - 1), st.booleans(), st.none(),
                   st.floats(-1e100, 1e100), st.floats(-1e-300, 1e-300))


def _spans(lines: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ends = np.cumsum([len(x) for x in lines]).astype(np.int64)
    starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
    return u8(b"".join(lines)), starts, ends


def _cell(k, text: bytes, kind: int, value: int):
    if kind == k.KIND_STRING:
        return text.decode()
    if kind == k.KIND_INT:
        assert int(text) == value
        return value
    if kind == k.KIND_FLOAT:
        assert b"." in text or b"e" in text.lower()
        return float(text)
    return {k.KIND_TRUE: True, k.KIND_FALSE: False, k.KIND_NULL: None}[kind]


def _decoded(k, parsed) -> list[dict]:
    """The records a flat_records result describes."""
    keys, values, vstart, vend, kinds, ints = parsed
    out = []
    for i in range(vstart.shape[1]):
        out.append({key.decode(): _cell(k, values[vstart[j, i]:vend[j, i]].tobytes(),
                                        int(kinds[j, i]), int(ints[j, i]))
                    for j, key in enumerate(keys) if vstart[j, i] >= 0})
        absent = [int(kinds[j, i]) == k.KIND_ABSENT for j in range(len(keys))]
        assert absent == [vstart[j, i] < 0 for j in range(len(keys))]
    return out


def _same(a, b) -> None:
    assert (a is None) == (b is None), (a, b)
    if a is not None:
        assert a[0] == b[0] and a[1].tobytes() == b[1].tobytes()
        for x, y in zip(a[2:], b[2:]):
            assert x.dtype == y.dtype and x.tolist() == y.tolist()


def test_kinds_agree():
    for name in ("KIND_ABSENT", "KIND_STRING", "KIND_INT", "KIND_FLOAT", "KIND_TRUE", "KIND_FALSE",
                 "KIND_NULL", "MAX_KEYS", "MAX_KEY_BYTES", "MAX_NUMBER_BYTES", "MAX_EXPONENT"):
        assert len({getattr(k, name) for k in RTWINS}) == 1, name


@settings(max_examples=300, deadline=None)
@given(recs=st.lists(st.dictionaries(TEXT, SCALAR, max_size=4), min_size=1, max_size=6),
       ascii_only=st.booleans(), pad=st.sampled_from([b"", b" ", b"\r\n", b"\n\n  \n"]))
def test_flat_records_decode_valid_records(recs, ascii_only, pad):
    lines = [json.dumps(r, ensure_ascii=ascii_only).encode() + pad for r in recs]
    results = [k.flat_records(*_spans(lines)) for k in RTWINS]
    for k, got in zip(RTWINS, results):
        if not any(recs):  # only empty objects: still decoded, with no keys
            assert got[0] == []
        assert _decoded(k, got) == recs
        first_seen = list(dict.fromkeys(key for r in recs for key in r))
        assert [key.decode() for key in got[0]] == first_seen
    _same(*results) if len(results) == 2 else None


@needs_both_records
@settings(max_examples=2000, deadline=None)
@given(lines=st.lists(FLATISH, min_size=1, max_size=4))
def test_flat_records_twins_agree_on_any_bytes(lines):
    buf, starts, ends = _spans(lines)
    _same(CYR.flat_records(buf, starts, ends), NPR.flat_records(buf, starts, ends))


@pytest.mark.parametrize("k", RTWINS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("line", [
    b'{"a": {"b": "c"}}', b'{"a": ["b"]}', b'{"a": []}', b'{"a": {}}',
    b'{"a": "x", "a": "y"}', b'{"a": "x", "\\u0061": "y"}', b'{"a": 1, "a": 1}', b"\xef\xbb\xbf{}",
    b'{"a": "\\ud800"}', b'{"a": "\\udc00\\ud800"}', b'{"a": "\t"}', b'{"a": "\xc0\x80"}',
    b'{"a": "\xed\xa0\x80"}', b'{"a": "\\x"}', b"[1]", b'"a"', b"1", b"null", b'{"a": "x"}{"a": "y"}',
    b'{"a": "x",}', b'{"a" "x"}', b'{"a": "x"', b"", b"  \n", b'{"' + b"k" * 257 + b'": "v"}',
    json.dumps({f"k{i}": "v" for i in range(65)}).encode(),
    # numbers outside the JSON grammar or this kernel's limits; literals misspelt
    b'{"a": 01}', b'{"a": -01}', b'{"a": +1}', b'{"a": 1.}', b'{"a": .5}', b'{"a": 1e}', b'{"a": 1e+}',
    b'{"a": -}', b'{"a": --1}', b'{"a": 1.5.2}', b'{"a": 0x10}', b'{"a": 1_0}', b'{"a": NaN}',
    b'{"a": Infinity}', b'{"a": -Infinity}', b'{"a": 1e201}', b'{"a": 1E+201}', b'{"a": 1e400}',
    b'{"a": 9223372036854775808}', b'{"a": -9223372036854775809}', b'{"a": 12345678901234567890}',
    b'{"a": 1' + b"0" * 64 + b'}', b'{"a": 0.' + b"1" * 63 + b'}', b'{"a": tru}', b'{"a": True}',
    b'{"a": nulll}', b'{"a": falsey}', b'{"a": 1 2}', b'{"a": 1,}', b'{"a": \'x\'}',
])
def test_flat_records_reject_other_shapes(k, line):
    assert k.flat_records(*_spans([b'{"ok": "yes"}\n', line])) is None


@pytest.mark.parametrize("k", RTWINS, ids=lambda k: k.__name__)
def test_flat_records_limits_and_escapes(k):
    wide = {f"k{i}": str(i) for i in range(62)}  # 64 keys in all: the most accepted
    lines = [json.dumps(wide).encode(), b'{"' + b"k" * 256 + b'": "\\/\\b\\f\\n\\r\\t\\"\\\\"}',
             b'{"\\u00e9": "\\ud83d\\ude00\\u0000"}']
    got = k.flat_records(*_spans(lines))
    assert _decoded(k, got) == [wide, {"k" * 256: '/\b\f\n\r\t"\\'}, {"é": "\U0001F600\0"}]


@pytest.mark.parametrize("k", RTWINS, ids=lambda k: k.__name__)
def test_flat_records_numbers_and_literals(k):
    top = b"0." + b"1" * 62  # 64 bytes: the longest number accepted
    line = (b'{"i": -0, "max": 9223372036854775807, "min": -9223372036854775808, "e": 1E+200,'
            b' "tiny": 1e-99999, "f": -0.0, "t": true, "n": null, "z": false, "top": ' + top +
            b', "s": "1"}')
    got = k.flat_records(*_spans([b" \t" + line + b" \r\n"]))
    keys, values, vstart, vend, kinds, ints = got
    texts = [values[vstart[j, 0]:vend[j, 0]].tobytes() for j in range(len(keys))]
    assert texts == [b"-0", b"9223372036854775807", b"-9223372036854775808", b"1E+200",
                     b"1e-99999", b"-0.0", b"true", b"null", b"false", top, b"1"]
    assert kinds[:, 0].tolist() == [k.KIND_INT] * 3 + [k.KIND_FLOAT] * 3 + [
        k.KIND_TRUE, k.KIND_NULL, k.KIND_FALSE, k.KIND_FLOAT, k.KIND_STRING]
    assert ints[:3, 0].tolist() == [0, 2**63 - 1, -2**63] and not ints[3:, 0].any()


@pytest.mark.parametrize("k", RTWINS, ids=lambda k: k.__name__)
def test_flat_records_spans_in_any_order_into_out(k):
    buf, starts, ends = _spans([b'{"a": "x"}\n', b'{"b": "yy"}\n'])
    order = np.array([1, 0, 1], dtype=np.int64)
    out = np.full(64, 7, dtype=np.uint8)
    got = k.flat_records(buf, starts[order], ends[order], out)
    assert _decoded(k, got) == [{"b": "yy"}, {"a": "x"}, {"b": "yy"}]
    assert got[1].tobytes() == b"yyxyy" and out[:5].tobytes() == b"yyxyy"
    with pytest.raises(ValueError):
        k.flat_records(buf, starts, ends, np.zeros(3, dtype=np.uint8))
    with pytest.raises(IndexError):
        k.flat_records(buf, np.array([0], np.int64), np.array([999], np.int64))
    keys, values, vstart, vend, kinds, ints = k.flat_records(buf, starts[:0], ends[:0])
    assert keys == [] and len(values) == 0 and vstart.shape == (0, 0)
    assert kinds.shape == ints.shape == (0, 0)


@pytest.mark.parametrize("k", RTWINS, ids=lambda k: k.__name__)
def test_flat_records_widen_past_four_keys_midway(k):
    # the compiled kernel starts with room for 4 keys and widens when a 5th appears
    lines = [b'{"a": 1, "b": null}\n', b'{"c": true, "d": 2.5, "e": "x", "a": -3}\n']
    got = k.flat_records(*_spans(lines))
    assert _decoded(k, got) == [{"a": 1, "b": None}, {"c": True, "d": 2.5, "e": "x", "a": -3}]
    assert got[5][0].tolist() == [1, -3]


@pytest.mark.parametrize("k", TWINS, ids=lambda k: k.__name__)
def test_gather_spans_into_out(k):
    out = np.zeros(8, dtype=np.uint8)
    got, offs = k.gather_spans(u8(b"abcdef"), np.array([4, 0], np.int64), np.array([6, 2], np.int64),
                               out)
    assert got.tobytes() == b"efab" and out[:4].tobytes() == b"efab" and offs.tolist() == [0, 2, 4]
    with pytest.raises(ValueError):
        k.gather_spans(u8(b"abcdef"), np.array([0], np.int64), np.array([6], np.int64),
                       np.zeros(2, dtype=np.uint8))
