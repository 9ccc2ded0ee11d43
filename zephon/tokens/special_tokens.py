"""Which ids are a tokenizer's BOS, EOS and PAD, and which of them ``tokenize`` adds.

Where the ids come from, first match wins:

1. ``bos_token_id=`` / ``eos_token_id=`` / ``pad_token_id=`` given to ``tokenize``;
2. what the tokenizer *declares*: a transformers tokenizer object's ``*_token_id``, or a
   Hugging Face tokenizer directory's ``tokenizer_config.json`` / ``special_tokens_map.json``
   read the way transformers reads them (``declared_tokens``). A declaration is complete: a role
   it leaves out is a role the tokenizer does not have (GPT-2 declares no PAD);
3. for a bare ``tokenizer.json``: the special tokens its post-processor wraps a sequence in
   (``template_ids``: Llama's ``<s> $A``), then well-known token names (``NAMES``).

``brackets`` turns those ids and the ``special_tokens`` mode into the ids each document gets.
"""

from __future__ import annotations

import json
import os
from typing import Any

NAMES = {
    "bos": ("<s>", "<|begin_of_text|>", "<|startoftext|>", "[BOS]", "<bos>", "<|bos|>"),
    "eos": ("</s>", "<|end_of_text|>", "<|endoftext|>", "[EOS]", "<eos>", "<|eos|>", "[SEP]"),
    "pad": ("<pad>", "[PAD]", "<|pad|>", "<|padding|>"),
}
ROLES = ("bos", "eos", "pad")


def _content(value: Any) -> str | None:
    """A token as transformers stores it: a string or an AddedToken dict ``{"content": ...}``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _load_json(path: str) -> dict | None:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"tokenizer file {path} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"tokenizer file {path} must hold a JSON object")
    return data


def declared_tokens(directory: str) -> dict[str, str | None] | None:
    """BOS/EOS/PAD token strings a Hugging Face tokenizer directory declares, or None when it
    holds neither ``tokenizer_config.json`` nor ``special_tokens_map.json``.

    As transformers does: ``tokenizer_config.json`` gives the tokens; ``special_tokens_map.json``
    overrides them, unless the config carries ``added_tokens_decoder`` (the format since
    transformers 4.34, whose loader ignores the map then).
    """
    config = _load_json(os.path.join(directory, "tokenizer_config.json"))
    smap = _load_json(os.path.join(directory, "special_tokens_map.json"))
    if config is None and smap is None:
        return None
    merged: dict[str, Any] = dict(config or {})
    if smap is not None and "added_tokens_decoder" not in merged:
        merged.update(smap)
    return {role: _content(merged.get(f"{role}_token")) for role in ROLES}


def template_ids(tokenizer_json: dict) -> dict[str, int]:
    """BOS/EOS ids that the post-processor puts around a single sequence."""
    out: dict[str, int] = {}
    _walk_processor(tokenizer_json.get("post_processor"), out)
    return out


def _walk_processor(proc: Any, out: dict[str, int]) -> None:
    if not isinstance(proc, dict):
        return
    kind = proc.get("type")
    if kind == "Sequence":
        for p in proc.get("processors") or ():
            _walk_processor(p, out)
    elif kind in ("BertProcessing", "RobertaProcessing"):
        for role, key in (("bos", "cls"), ("eos", "sep")):
            pair = proc.get(key)
            if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], int):
                out.setdefault(role, int(pair[1]))
    elif kind == "TemplateProcessing":
        specials = proc.get("special_tokens") or {}
        role = "bos"
        for piece in proc.get("single") or ():
            if "Sequence" in piece:
                role = "eos"
                continue
            name = (piece.get("SpecialToken") or {}).get("id")
            ids = (specials.get(name) or {}).get("ids") or []
            if len(ids) == 1:  # a one-token marker before (BOS) or after (EOS) the text
                out.setdefault(role, int(ids[0]))


def brackets(mode: str, bos: int | None, eos: int | None, *, bos_given: bool, eos_given: bool,
             label: str) -> tuple[int | None, int | None]:
    """The (BOS, EOS) ``tokenize`` adds to every document, None where it adds none.

    ``"bos_eos"`` (the default) adds the markers the tokenizer has: BOS and EOS, EOS only
    (GPT-2 style, also when BOS and EOS are one token), BOS only; a tokenizer with neither is
    refused, as documents would run together once packed. ``"bos"`` / ``"eos"`` ask for one
    marker and are refused when the tokenizer lacks it and no id is given. Refusals name the
    fix; they happen when the pipeline is built.
    """
    if mode in ("none", "tokenizer_default"):
        return None, None
    if mode == "bos_eos":
        if bos is None and eos is None:
            raise ValueError(
                f"tokenizer {label} has neither a BOS nor an EOS token, so documents would run "
                "together once packed: pass eos_token_id= (and/or bos_token_id=), or "
                "special_tokens='none' to add no markers")
        if bos is not None and bos == eos and not bos_given:
            return None, eos  # one token declared as both (GPT-2): one separator per document
        return bos, eos
    if mode == "bos" and bos is None:
        alt = " or special_tokens='eos'" if eos is not None else ""
        raise ValueError(f"tokenizer {label} has no BOS token: pass bos_token_id={alt}, or "
                         "special_tokens='bos_eos' to add the markers it has")
    if mode == "eos" and eos is None:
        alt = " or special_tokens='bos'" if bos is not None else ""
        raise ValueError(f"tokenizer {label} has no EOS token: pass eos_token_id={alt}, or "
                         "special_tokens='bos_eos' to add the markers it has")
    return (bos, None) if mode == "bos" else (None, eos)
