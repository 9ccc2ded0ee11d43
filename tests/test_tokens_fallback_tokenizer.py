"""The "__fallback__" tokenizer: byte-exact, vectorised, identical in every process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from zephon.tokens import FallbackTokenizer

TEXTS = ["hello world", "", "héllo wörld", "a😀b", "\u4e2d\u6587", "line\nbreak\t", "\ud800x"]
REPO = Path(__file__).resolve().parents[1]


def test_ids_are_utf8_bytes_past_the_specials():
    tok = FallbackTokenizer()
    offsets, values = tok.encode_batch(["hé", ""])
    assert offsets.dtype == np.int64 and values.dtype == np.int32
    assert offsets.tolist() == [0, 3, 3]
    assert values.tolist() == [b + 4 for b in "hé".encode()]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.vocab_size) == (0, 1, 2, 260)
    for text in TEXTS:   # lone surrogates included: they round-trip too
        assert tok.decode(tok.encode(text)) == text


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=20), max_size=12), st.booleans())
def test_batch_equals_per_text_and_round_trips(texts, specials):
    tok = FallbackTokenizer()
    offsets, values = tok.encode_batch(texts, add_special_tokens=specials)
    assert len(offsets) == len(texts) + 1
    for i, text in enumerate(texts):
        row = values[offsets[i]:offsets[i + 1]].tolist()
        body = [b + 4 for b in text.encode("utf-8", "surrogatepass")]
        assert row == ([1] + body + [2] if specials else body)
        assert tok.decode(row) == text
        assert tok.encode(text, add_special_tokens=specials) == row


def test_hf_style_call_and_decode_with_specials():
    tok = FallbackTokenizer()
    enc = tok(["ab", "c"], add_special_tokens=True)
    assert enc["input_ids"] == [[1, 101, 102, 2], [1, 103, 2]]
    assert enc["attention_mask"] == [[1] * 4, [1] * 3]
    assert tok("ab")["input_ids"] == [101, 102]
    assert tok.decode([1, 101, 2, 0], skip_special_tokens=False) == "<s>a</s><pad>"
    assert len(tok.get_vocab()) == len(tok) == 260


def test_identical_ids_across_processes_and_hash_seeds():
    script = (
        "import json, sys; from zephon.tokens.fallback_tokenizer import FallbackTokenizer;"
        "o, v = FallbackTokenizer().encode_batch(json.loads(sys.argv[1]));"
        "print(json.dumps([o.tolist(), v.tolist()]))"
    )
    texts = json.dumps(TEXTS[:-1])
    results = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed,
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run([sys.executable, "-c", script, texts], env=env, cwd=REPO,
                              capture_output=True, text=True, check=True, timeout=120)
        results.append(proc.stdout)
    assert results[0] == results[1]
    o, v = FallbackTokenizer().encode_batch(TEXTS[:-1])
    assert json.loads(results[0]) == [o.tolist(), v.tolist()]
