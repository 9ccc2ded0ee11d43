"""Where the tokens of a byte-level BPE encoding lie in the text, without the tokenizer's offsets.

``encode_batch`` computes character offsets for every token; ``encode_batch_fast`` skips them
and is ~1.5x faster on one core. For a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen...) with
no normalizer, no pre-tokenizer that drops characters and no offset trimming, the tokens of an
encoding cover the UTF-8 bytes of the text exactly and in order: a vocabulary token's string is
one character per byte (GPT-2's byte-to-unicode alphabet) and an added token covers its
content. So every token's byte range is a cumulative sum over a per-id table of byte lengths
(``ByteLengths``), and a byte range overlaps a span of characters exactly when the token's
character offsets do (spans begin and end on character boundaries).

``byte_lengths`` builds that table, or returns None where the tokenizer is not one of those
(any doubt counts: the caller then asks for offsets). The table is also checked against
``encode_batch``'s offsets on a probe text; callers check each text's byte total too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

# pre-tokenizer pieces that only split the text (Split may also drop what it matches)
_SPLIT_BEHAVIOURS = ("Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")
_PROBE = ("Hi  there,\n\tna\u00efve caf\u00e9 \u65e5\u672c\u8a9e \U0001f642 x=1;\r\n"
          "  end\u00a0 \u2003 ok \n\n")


@dataclass(frozen=True)
class ByteLengths:
    """Bytes of text each token id covers (-1: an id no byte-exact tokenizer run produces)."""

    table: np.ndarray  # int64, one per id

    def of(self, ids: np.ndarray) -> np.ndarray:
        """Byte length of every token in ``ids`` (-1 for an id outside the table)."""
        ids = np.asarray(ids)
        if not len(ids) or (ids.min() >= 0 and ids.max() < len(self.table)):
            return self.table[ids]
        out = np.full(len(ids), -1, dtype=np.int64)
        ok = (ids >= 0) & (ids < len(self.table))
        out[ok] = self.table[ids[ok]]
        return out


def _byte_alphabet() -> frozenset[str]:
    """The 256 characters GPT-2's byte-level pre-tokenizer writes bytes as."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    extra = [256 + i for i in range(256 - len(keep))]
    return frozenset(chr(c) for c in keep + extra)


def _byte_level_pre(pre: Any) -> bool:
    """A ByteLevel pre-tokenizer without a prefix space, alone or after pure splitters."""
    if not isinstance(pre, dict):
        return False
    parts = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if not isinstance(parts, list):
        return False
    levels = 0
    for p in parts:
        kind = p.get("type") if isinstance(p, dict) else None
        if kind == "ByteLevel":
            if p.get("add_prefix_space"):
                return False
            levels += 1
        elif kind == "Split":
            if p.get("behavior") not in _SPLIT_BEHAVIOURS:
                return False
        elif kind != "Digits":
            return False
    return levels == 1


def _untrimmed_post(post: Any) -> bool:
    """A post-processor that leaves offsets as they are (no whitespace trimming)."""
    if post is None:
        return True
    if not isinstance(post, dict):
        return False
    kind = post.get("type")
    if kind == "Sequence":
        return all(_untrimmed_post(p) for p in post.get("processors") or [None])
    if kind in ("ByteLevel", "RobertaProcessing"):
        return not post.get("trim_offsets", True)
    return kind in ("TemplateProcessing", "BertProcessing")


def _table(config: dict) -> np.ndarray | None:
    model = config.get("model") or {}
    if (model.get("type") != "BPE" or model.get("byte_fallback") or model.get("dropout")
            or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix")):
        return None
    vocab = model.get("vocab")
    added = config.get("added_tokens") or []
    if not isinstance(vocab, dict) or any(a.get("lstrip") or a.get("rstrip") for a in added):
        return None
    size = 1 + max([*vocab.values(), *(a["id"] for a in added), -1])
    table = np.full(size, -1, dtype=np.int64)
    alphabet = _byte_alphabet()
    for piece, i in vocab.items():
        if piece and alphabet.issuperset(piece):
            table[i] = len(piece)
    for a in added:
        n = len(a["content"].encode("utf-8"))
        if not n or table[a["id"]] not in (-1, n):  # the model could also produce it, covering other bytes
            return None
        table[a["id"]] = n
    unk = model.get("unk_token")
    if unk is not None and unk in vocab:
        table[vocab[unk]] = -1  # an unknown token covers bytes its string does not tell
    return table


def _char_offsets(text: str, starts: np.ndarray, ends: np.ndarray) -> list[tuple[int, int]]:
    """Byte ranges of ``text`` (none empty) as the character ranges that cover them."""
    raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    char_of = np.cumsum((raw & 0xC0) != 0x80) - 1  # the character each byte belongs to
    return [(int(char_of[a]), int(char_of[b - 1]) + 1)
            for a, b in zip(starts.tolist(), ends.tolist())]


def byte_lengths(backend: Any, payload: str) -> ByteLengths | None:
    """The byte length of every token id of ``backend`` (a ``tokenizers.Tokenizer`` serialized
    as ``payload``), or None when its tokens do not cover the text's bytes exactly."""
    try:
        config = json.loads(payload)
    except ValueError:
        return None
    if (config.get("normalizer") is not None or not _byte_level_pre(config.get("pre_tokenizer"))
            or not _untrimmed_post(config.get("post_processor"))):
        return None
    table = _table(config)
    if table is None:
        return None
    encode_fast = getattr(backend, "encode_batch_fast", None)
    if encode_fast is None:  # tokenizers < 0.21: no call that skips the offsets, no gain
        return None
    lengths = ByteLengths(table)
    probe = _PROBE + "".join(f"{a['content']} x{a['content']}\n"
                             for a in config.get("added_tokens") or [])
    slow = backend.encode_batch([probe], add_special_tokens=False)[0]
    fast = encode_fast([probe], add_special_tokens=False)[0]
    n = lengths.of(np.asarray(fast.ids))
    if list(fast.ids) != list(slow.ids) or (n < 0).any() or n.sum() != len(probe.encode()):
        return None
    ends = np.cumsum(n)
    if _char_offsets(probe, ends - n, ends) != [tuple(o) for o in slow.offsets]:
        return None
    return lengths
