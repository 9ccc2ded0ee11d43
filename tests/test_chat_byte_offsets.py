"""Assistant masks from token byte lengths (``zephon.tokens.byte_offsets``): the same ids,
masks and misalignment verdicts as from the tokenizer's offsets, for any text and any spans;
only byte-exact tokenizers get the table; the operator's hot path asks no offsets then."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chat_support import SPECIALS, WORDS, conversations, train_chat_tokenizer
from zephon.block import Block
from zephon.chat.spans import _encode_by_bytes, encode_masked
from zephon.tokens.byte_offsets import byte_lengths
from zephon.tokens.tokenizer_source import LoadedTokenizer, load

pytest.importorskip("jinja2")

_TOK: dict = {}


def _loaded(**kw) -> LoadedTokenizer:
    key = tuple(sorted(kw.items()))
    if key not in _TOK:
        _TOK[key] = load(train_chat_tokenizer(**kw))
    return _TOK[key]


def _lengths(tok: LoadedTokenizer):
    return byte_lengths(tok.backend, tok.spec.payload)


def test_byte_exact_tokenizers_get_a_table_others_none():
    from tokenizers import AddedToken, normalizers, pre_tokenizers, processors

    tok = _loaded()
    table = _lengths(tok)
    assert table is not None
    ids = tok.backend.encode_batch_fast(["naïve 日本語 🙂<|im_end|>\n"], add_special_tokens=False)[0].ids
    assert table.of(np.asarray(ids)).sum() == len("naïve 日本語 🙂<|im_end|>\n".encode())
    assert _lengths(_loaded(trim_offsets=True)) is None  # offsets trimmed of whitespace
    changes = [
        lambda t: setattr(t, "normalizer", normalizers.NFKC()),
        lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=True)),
        lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(), pre_tokenizers.ByteLevel(add_prefix_space=False)])),
        lambda t: setattr(t, "post_processor", processors.ByteLevel(trim_offsets=True)),
        lambda t: t.add_tokens([AddedToken("<tool>", lstrip=True)]),
    ]
    for change in changes:
        t = train_chat_tokenizer()
        change(t)
        assert byte_lengths(t, t.to_str()) is None


_PIECE = st.one_of(st.sampled_from([" ", "\n", "  ", "\t", *WORDS, *SPECIALS]),
                   st.text(st.characters(blacklist_categories=("Cs",)), max_size=8))


@st.composite
def _texts_and_spans(draw):
    """Texts (joined pieces, often words and specials) with sorted, disjoint character spans,
    some empty, some inside tokens."""
    texts, spans = [], []
    for _ in range(draw(st.integers(1, 5))):
        text = "".join(draw(st.lists(_PIECE, max_size=12)))
        cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
        pairs = list(zip(cuts[::2], cuts[1::2]))
        texts.append(text)
        spans.append(pairs)
    return texts, spans


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_texts_and_spans(), strict=st.lists(st.booleans(), min_size=5, max_size=5))
def test_byte_masks_equal_offset_masks(case, strict):
    texts, spans = case
    tok = _loaded()
    flags = np.asarray(strict[:len(texts)])
    by_offsets = encode_masked(tok, texts, spans, flags)
    by_bytes = _encode_by_bytes(tok, _lengths(tok), texts, spans, flags)
    assert by_bytes is not None  # sorted spans, a byte-exact tokenizer: never the offsets path
    for a, b in zip(by_offsets, by_bytes):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_a_split_then_byte_level_pre_tokenizer_is_byte_exact_too():
    """Llama 3 / Qwen style: a regex split before a ByteLevel without its own regex."""
    from tokenizers import Regex, pre_tokenizers

    t = train_chat_tokenizer()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}{1,3}| ?\p{L}+|\s+(?!\S)|\s+|[^\s\p{L}\p{N}]+"),
                             behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = load(t)
    assert _lengths(tok) is not None
    texts = [" ".join(WORDS) + "<|im_end|>\n12345 x", "naïve\n\n  café<|im_start|>日本語"]
    spans = [[(3, 20), (40, 41)], [(0, 0), (2, 9), (12, 25)]]
    flags = np.array([True, True])
    by_bytes = _encode_by_bytes(tok, _lengths(tok), texts, spans, flags)
    assert by_bytes is not None
    for a, b in zip(encode_masked(tok, texts, spans, flags), by_bytes):
        np.testing.assert_array_equal(a, b)


def _block(records):
    n = len(records)
    ptrs = Block.from_pointers(np.zeros(n), np.zeros(n), np.arange(n), lane_id=0, chunk_id=0,
                               chunk_offset=np.arange(n))
    return ptrs.with_payloads(records)


def test_the_operator_asks_no_offsets_of_a_byte_exact_tokenizer(tmp_path, monkeypatch):
    """Once the table is checked, blocks are encoded by the offset-free call only, and give
    what the offsets path gives."""
    from tests.chat_support import write_tokenizer_dir
    from zephon.ops.tokenize_chat import TokenizeChatOp

    directory = write_tokenizer_dir(tmp_path / "tok")
    records = conversations(60, seed=3)
    want = TokenizeChatOp(directory, on_bad_record="skip")
    want._lengths = None  # the offsets path
    expected = want.process_block(_block(records)).payload.to_pylist()
    op = TokenizeChatOp(directory, on_bad_record="skip")
    assert op.byte_lengths() is not None
    backend = op.tokenizer().backend

    def refuse(*a, **k):
        raise AssertionError("encode_batch (offsets) called on the hot path")

    monkeypatch.setattr(type(backend), "encode_batch", refuse, raising=False)
    assert op.process_block(_block(records)).payload.to_pylist() == expected
