"""Where a tokenizer comes from, in a picklable form that each worker loads once.

Accepted: a ``tokenizers.Tokenizer``, a transformers fast tokenizer (its backend is used), a path
to a ``tokenizer.json``, a Hugging Face tokenizer directory (``tokenizer.json`` plus
``tokenizer_config.json`` / ``special_tokens_map.json``, read as transformers reads them), a
model already in the local Hugging Face cache (``tokenizer_id="org/name"``; nothing is
downloaded), or ``"__fallback__"``. Which ids are BOS/EOS/PAD is settled here, once, in the
process that builds the pipeline (``zephon.tokens.special_tokens``), and travels in the spec.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from zephon.tokens.special_tokens import NAMES, ROLES, declared_tokens, template_ids

FALLBACK = "__fallback__"
# Documents per call of the tokenizer: an ``Encoding`` holds ~100 bytes per token (ids, type
# ids, token strings, offsets, masks), so a 1,024-document block of 2 KB texts made ~60 MB at
# once, which glibc then kept in every worker's heap (W2 worker: ~30 MB more PSS); calls of 64
# documents measured as fast on one thread. The tokenizer's pool splits a call's documents
# over its threads, so a call gets ``ENCODE_DOCS_PER_THREAD`` per thread (at least 64): with
# 64 documents on 16 threads, the longest of each thread's four decided the call.
ENCODE_DOCS = 64
ENCODE_DOCS_PER_THREAD = 16


def encode_docs() -> int:
    """Documents per tokenizer call for this process's tokenizer pool."""
    if os.environ.get("TOKENIZERS_PARALLELISM", "").lower() in ("false", "0", "off", "no"):
        return ENCODE_DOCS
    try:
        threads = int(os.environ.get("RAYON_NUM_THREADS") or 0) or (os.cpu_count() or 1)
    except ValueError:
        threads = os.cpu_count() or 1
    return max(ENCODE_DOCS, ENCODE_DOCS_PER_THREAD * threads)


@dataclass(frozen=True)
class TokenizerSpec:
    """Picklable recipe: the serialized tokenizer JSON (or the fallback marker) and the ids of
    its BOS/EOS/PAD tokens (None: it has none)."""

    kind: str  # "json" | "fallback"
    payload: str = ""
    label: str = ""
    bos_id: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None

    def fingerprint(self) -> str:
        """The tokenizer in a fingerprint: the fallback's name, else a digest of its JSON."""
        if self.kind == "fallback":
            return self.label
        return hashlib.sha256(self.payload.encode("utf-8")).hexdigest()[:16]


def load(tokenizer: Any = None, tokenizer_id: str | None = None) -> LoadedTokenizer:
    """The tokenizer ``tokenize(tokenizer=, tokenizer_id=)`` names, loaded (``.spec`` pickles)."""
    if tokenizer is not None:
        return _from_object(tokenizer)
    if tokenizer_id is None:
        raise ValueError("tokenize needs tokenizer= or tokenizer_id=")
    if tokenizer_id == FALLBACK:
        return LoadedTokenizer(_fallback_spec())
    return _from_path(tokenizer_id) or _from_hf_cache(tokenizer_id)


def _fallback_spec() -> TokenizerSpec:
    from zephon.tokens.fallback_tokenizer import FallbackTokenizer as F

    return TokenizerSpec("fallback", label=FALLBACK, bos_id=F.bos_token_id, eos_id=F.eos_token_id,
                         pad_id=F.pad_token_id)


def _from_object(tok: Any) -> LoadedTokenizer:
    if isinstance(tok, str | os.PathLike):
        if str(tok) == FALLBACK:
            return LoadedTokenizer(_fallback_spec())
        loaded = _from_path(str(tok))
        if loaded is None:
            raise FileNotFoundError(f"tokenizer path {tok!r} does not exist")
        return loaded
    backend = getattr(tok, "backend_tokenizer", None)  # transformers fast tokenizer
    if backend is not None:  # its *_token_id are its declaration (None: it has none)
        ids = {r: getattr(tok, f"{r}_token_id", None) for r in ROLES}
        return LoadedTokenizer(TokenizerSpec("json", backend.to_str(), type(tok).__name__,
                                             *(_int_or_none(ids[r]) for r in ROLES)))
    if hasattr(tok, "to_str") and hasattr(tok, "encode_batch"):
        return _detected(tok.to_str(), "tokenizers.Tokenizer")
    raise TypeError(
        f"unsupported tokenizer {type(tok).__name__}: pass a tokenizers.Tokenizer, a "
        "transformers fast tokenizer, a tokenizer.json path, a tokenizer directory or "
        "'__fallback__'")


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _from_path(path: str) -> LoadedTokenizer | None:
    p = os.path.expanduser(path)
    if os.path.isdir(p):
        return _from_directory(p, path)
    if not os.path.isfile(p):
        return None
    return _detected(_read(p), p)


def _from_directory(directory: str, label: str) -> LoadedTokenizer:
    file = os.path.join(directory, "tokenizer.json")
    if not os.path.exists(file):
        raise FileNotFoundError(f"no tokenizer.json in directory {label!r} (Zephon loads fast "
                                "tokenizers: save one with tokenizer.save_pretrained(dir))")
    declared = declared_tokens(directory)
    if declared is None:  # a bare tokenizer.json in a folder
        return _detected(_read(file), file)
    tok = _backend(_read(file))
    ids: dict[str, int | None] = {}
    added = False
    for role in ROLES:
        content = declared[role]
        if content is None:
            ids[role] = None
            continue
        if tok.token_to_id(content) is None:
            # transformers adds a declared special token the vocabulary lacks, at the next id
            from tokenizers import AddedToken

            tok.add_special_tokens([AddedToken(content, special=True)])
            added = True
        ids[role] = int(tok.token_to_id(content))
    payload = tok.to_str() if added else _read(file)
    spec = TokenizerSpec("json", payload, directory, ids["bos"], ids["eos"], ids["pad"])
    return LoadedTokenizer(spec, tok)


def _detected(payload: str, label: str) -> LoadedTokenizer:
    """A bare tokenizer.json: the post-processor's template, then well-known names."""
    tok = _backend(payload)
    try:
        found: dict[str, int | None] = dict(template_ids(json.loads(payload)))
    except (ValueError, TypeError):
        found = {}
    for role in ROLES:
        if found.get(role) is None:
            found[role] = next((int(i) for i in map(tok.token_to_id, NAMES[role])
                                if i is not None), None)
    spec = TokenizerSpec("json", payload, label, found["bos"], found["eos"], found["pad"])
    return LoadedTokenizer(spec, tok)


def _from_hf_cache(model_id: str) -> LoadedTokenizer:
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
    pattern = os.path.join(hub, "models--" + model_id.replace("/", "--"), "snapshots", "*",
                           "tokenizer.json")
    found = sorted(glob.glob(pattern))
    if not found:
        raise FileNotFoundError(
            f"tokenizer {model_id!r} is neither a local path nor in the Hugging Face cache "
            f"({hub}); Zephon never downloads tokenizers at run time")
    return _from_directory(os.path.dirname(found[-1]), model_id)


def _backend(payload: str) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(payload)
    # a tokenizer.json may carry its own truncation / padding settings: they would cut or pad
    # documents unseen; tokenize does both itself, counted (max_length=, truncation=, padding=)
    tok.no_truncation()
    tok.no_padding()
    return tok


class LoadedTokenizer:
    """Batch encoding into ragged (offsets int64, values int32) arrays."""

    def __init__(self, spec: TokenizerSpec, backend: Any = None) -> None:
        self.spec = spec
        self.bos_token_id = spec.bos_id
        self.eos_token_id = spec.eos_id
        self.pad_token_id = spec.pad_id
        if spec.kind == "fallback":
            from zephon.tokens.fallback_tokenizer import FallbackTokenizer

            self._fallback = FallbackTokenizer()
            self._tok = None
        else:
            self._fallback = None
            self._tok = backend if backend is not None else _backend(spec.payload)

    @property
    def backend(self) -> Any:
        """The ``tokenizers.Tokenizer`` (None for the fallback tokenizer)."""
        return self._tok

    def encode(self, texts: list[str], add_special_tokens: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if self._fallback is not None:
            offsets, values = self._fallback.encode_batch(texts)
            if add_special_tokens:
                from zephon.tokens.token_layout import bracket

                return bracket(offsets, values, self.bos_token_id, self.eos_token_id)
            return offsets, values
        batch = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        lengths = np.zeros(len(texts), dtype=np.int64)
        parts = []
        step = encode_docs()
        for at in range(0, len(texts), step):
            encs = batch(texts[at:at + step], add_special_tokens=add_special_tokens)
            n = lengths[at:at + len(encs)]
            n[:] = np.fromiter((len(e) for e in encs), dtype=np.int64, count=len(encs))
            parts.append(np.fromiter(itertools.chain.from_iterable(e.ids for e in encs),
                                     dtype=np.int32, count=int(n.sum())))
            del encs  # before the next call allocates its own
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.concatenate(parts) if len(parts) > 1 else (
            parts[0] if parts else np.zeros(0, dtype=np.int32))
        return offsets, values

    def count_tokens(self, texts: list[str]) -> np.ndarray:
        offsets, _ = self.encode(texts)
        return np.diff(offsets)
