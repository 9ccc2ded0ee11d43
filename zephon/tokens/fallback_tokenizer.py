"""The ``"__fallback__"`` tokenizer: UTF-8 bytes shifted past four special ids.

Ids: 0 = <pad>, 1 = <s> (BOS), 2 = </s> (EOS), 3 = <unk> (never produced), 4 + b for byte b;
``vocab_size`` = 260. It is a pure function of the text - no Python ``hash()``, no process or
machine state - so every worker on every machine produces the same ids (the reference's stub
tokenizer did not). Batches are encoded in one pass over the joined UTF-8 bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

NUM_SPECIAL = 4


class FallbackTokenizer:
    """Deterministic byte-level tokenizer with an HF-like surface for tests and demos."""

    name = "__fallback__"
    pad_token_id = 0
    bos_token_id = 1
    eos_token_id = 2
    unk_token_id = 3
    pad_token, bos_token, eos_token, unk_token = "<pad>", "<s>", "</s>", "<unk>"
    vocab_size = 256 + NUM_SPECIAL

    def __len__(self) -> int:
        return self.vocab_size

    def encode_batch(self, texts: Sequence[str],
                     add_special_tokens: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Ragged ids of every text: (offsets int64 [n+1], values int32)."""
        texts = list(texts)
        data = np.frombuffer("".join(texts).encode("utf-8", "surrogatepass"), dtype=np.uint8)
        # byte offset of every character start; a text's byte range follows from char counts
        char_starts = np.flatnonzero((data & 0xC0) != 0x80)
        char_counts = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        char_ends = np.cumsum(char_counts)
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        if len(texts):
            bounds = np.append(char_starts, len(data))
            offsets[1:] = bounds[char_ends]
        values = data.astype(np.int32) + NUM_SPECIAL
        if add_special_tokens:
            from zephon._ext import kernel

            offsets, values = _bracket(offsets, values, kernel("ragged"))
        return offsets, values

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        offsets, values = self.encode_batch([text], add_special_tokens=add_special_tokens)
        return values.tolist()

    def __call__(self, text: str | Sequence[str], add_special_tokens: bool = False,
                 **_: Any) -> dict[str, Any]:
        """HF-style call: {"input_ids": ids or [ids, ...], "attention_mask": ...}."""
        single = isinstance(text, str)
        offsets, values = self.encode_batch([text] if single else text, add_special_tokens)
        ids = [values[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
        masks = [[1] * len(r) for r in ids]
        return {"input_ids": ids[0] if single else ids,
                "attention_mask": masks[0] if single else masks}

    def decode(self, ids: Sequence[int] | np.ndarray, skip_special_tokens: bool = True) -> str:
        names = (self.pad_token, self.bos_token, self.eos_token, self.unk_token)
        pieces: list[str] = []
        run: list[int] = []
        for i in np.asarray(ids, dtype=np.int64).reshape(-1).tolist():
            if i >= NUM_SPECIAL:
                run.append(i - NUM_SPECIAL)
                continue
            pieces.append(_utf8(bytes(run)))
            run = []
            if not skip_special_tokens:
                pieces.append(names[i] if 0 <= i < NUM_SPECIAL else self.unk_token)
        pieces.append(_utf8(bytes(run)))
        return "".join(pieces)

    def get_vocab(self) -> dict[str, int]:
        vocab = {self.pad_token: 0, self.bos_token: 1, self.eos_token: 2, self.unk_token: 3}
        vocab.update({f"<0x{b:02X}>": b + NUM_SPECIAL for b in range(256)})
        return vocab


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8", "surrogatepass")   # inverts encode_batch exactly
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


def _bracket(offsets: np.ndarray, values: np.ndarray, rk: Any) -> tuple[np.ndarray, np.ndarray]:
    """BOS + row + EOS for every row, as one ragged gather over [BOS, EOS] + values."""
    n = len(offsets) - 1
    lengths = np.diff(offsets)
    pool = np.concatenate([np.array([FallbackTokenizer.bos_token_id,
                                     FallbackTokenizer.eos_token_id], dtype=np.int32), values])
    src = np.stack([np.zeros(n, np.int64), offsets[:-1] + 2, np.ones(n, np.int64)], 1).reshape(-1)
    lens = np.stack([np.ones(n, np.int64), lengths, np.ones(n, np.int64)], 1).reshape(-1)
    seg_off, out = rk.gather_ragged(pool, src, lens)
    return seg_off[::3].copy(), out
