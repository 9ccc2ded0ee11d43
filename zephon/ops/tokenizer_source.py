"""Where a tokenizer comes from, in a picklable form that each worker loads once.

Accepted: a ``tokenizers.Tokenizer``, a transformers fast tokenizer (its backend is used), a path
to a ``tokenizer.json`` or to a directory holding one, a model already in the local Hugging Face
cache (``tokenizer_id="org/name"``; nothing is downloaded), or ``"__fallback__"``.
"""

from __future__ import annotations

import glob
import itertools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

FALLBACK = "__fallback__"
_BOS_NAMES = ("<s>", "<|begin_of_text|>", "<|startoftext|>", "[BOS]", "<bos>", "<|bos|>")
_EOS_NAMES = ("</s>", "<|end_of_text|>", "<|endoftext|>", "[EOS]", "<eos>", "<|eos|>", "[SEP]")


@dataclass(frozen=True)
class TokenizerSpec:
    """Picklable recipe: either the serialized tokenizer JSON or the fallback marker."""

    kind: str  # "json" | "fallback"
    payload: str = ""
    label: str = ""
    bos_hint: int | None = None
    eos_hint: int | None = None


def resolve_spec(tokenizer: Any = None, tokenizer_id: str | None = None) -> TokenizerSpec:
    if tokenizer is not None:
        return _spec_from_object(tokenizer)
    if tokenizer_id is None:
        raise ValueError("tokenize needs tokenizer= or tokenizer_id=")
    if tokenizer_id == FALLBACK:
        return TokenizerSpec("fallback", label=FALLBACK)
    return _spec_from_path(tokenizer_id) or _spec_from_hf_cache(tokenizer_id)


def _spec_from_object(tok: Any) -> TokenizerSpec:
    if isinstance(tok, str | os.PathLike):
        if str(tok) == FALLBACK:
            return TokenizerSpec("fallback", label=FALLBACK)
        spec = _spec_from_path(str(tok))
        if spec is None:
            raise FileNotFoundError(f"tokenizer path {tok!r} does not exist")
        return spec
    backend = getattr(tok, "backend_tokenizer", None)  # transformers fast tokenizer
    if backend is not None:
        bos = getattr(tok, "bos_token_id", None)
        eos = getattr(tok, "eos_token_id", None)
        return TokenizerSpec("json", backend.to_str(), type(tok).__name__, bos, eos)
    if hasattr(tok, "to_str") and hasattr(tok, "encode_batch"):
        return TokenizerSpec("json", tok.to_str(), "tokenizers.Tokenizer")
    raise TypeError(
        f"unsupported tokenizer {type(tok).__name__}: pass a tokenizers.Tokenizer, a "
        "transformers fast tokenizer, a tokenizer.json path or '__fallback__'")


def _spec_from_path(path: str) -> TokenizerSpec | None:
    p = os.path.expanduser(path)
    if os.path.isdir(p):
        p = os.path.join(p, "tokenizer.json")
        if not os.path.exists(p):
            raise FileNotFoundError(f"no tokenizer.json in directory {path!r}")
    if not os.path.isfile(p):
        return None
    with open(p, encoding="utf-8") as f:
        return TokenizerSpec("json", f.read(), p)


def _spec_from_hf_cache(model_id: str) -> TokenizerSpec:
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
    pattern = os.path.join(hub, "models--" + model_id.replace("/", "--"), "snapshots", "*",
                           "tokenizer.json")
    found = sorted(glob.glob(pattern))
    if not found:
        raise FileNotFoundError(
            f"tokenizer {model_id!r} is neither a local path nor in the Hugging Face cache "
            f"({hub}); Zephon never downloads tokenizers at run time")
    return _spec_from_path(found[-1])  # type: ignore[return-value]


class LoadedTokenizer:
    """Batch encoding into ragged (offsets int64, values int32) arrays."""

    def __init__(self, spec: TokenizerSpec) -> None:
        self.spec = spec
        if spec.kind == "fallback":
            from zephon.tokens.fallback_tokenizer import FallbackTokenizer

            self._fallback = FallbackTokenizer()
            self._tok = None
            self.bos_token_id = self._fallback.bos_token_id
            self.eos_token_id = self._fallback.eos_token_id
        else:
            from tokenizers import Tokenizer

            self._fallback = None
            self._tok = Tokenizer.from_str(spec.payload)
            self.bos_token_id = spec.bos_hint if spec.bos_hint is not None else self._find(_BOS_NAMES)
            self.eos_token_id = spec.eos_hint if spec.eos_hint is not None else self._find(_EOS_NAMES)

    def _find(self, names: tuple[str, ...]) -> int | None:
        for n in names:
            i = self._tok.token_to_id(n)
            if i is not None:
                return int(i)
        return None

    def encode(self, texts: list[str], add_special_tokens: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if self._fallback is not None:
            offsets, values = self._fallback.encode_batch(texts)
            if add_special_tokens:
                from zephon.ops.token_layout import bracket

                return bracket(offsets, values, self.bos_token_id, self.eos_token_id)
            return offsets, values
        encs = self._tok.encode_batch_fast(texts, add_special_tokens=add_special_tokens) \
            if hasattr(self._tok, "encode_batch_fast") else \
            self._tok.encode_batch(texts, add_special_tokens=add_special_tokens)
        lengths = np.fromiter((len(e) for e in encs), dtype=np.int64, count=len(encs))
        offsets = np.zeros(len(encs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.fromiter(itertools.chain.from_iterable(e.ids for e in encs),
                             dtype=np.int32, count=int(offsets[-1]))
        return offsets, values

    def count_tokens(self, texts: list[str]) -> np.ndarray:
        offsets, _ = self.encode(texts)
        return np.diff(offsets)
