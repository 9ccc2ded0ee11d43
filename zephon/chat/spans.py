"""Assistant spans: which characters of a rendered conversation the loss is on, and which
tokens those are.

Spans come from the template's ``{% generation %}`` blocks (``zephon.chat.template``) or, for a
template without them, from its prefixes (``prefix_diff_spans``): assistant message ``i`` is the
text that rendering ``messages[:i + 1]`` adds to rendering ``messages[:i]`` with the generation
prompt (``<|im_start|>assistant\\n``), less the whitespace the template puts after the turn
(the model stops at its end-of-turn token and never generates it). That is exact only when each
prefix renders as a prefix of the whole conversation, so it is checked, and so is that every
span starts and ends on a token boundary of the whole encoding; a conversation that fails
either is ``Unmaskable`` - never given a mask that could be wrong.

A token is in the mask when its characters overlap a span (``token_start < span_end`` and
``token_end > span_start``), the rule of transformers' ``return_assistant_tokens_mask``. For a
byte-exact tokenizer (``zephon.tokens.byte_offsets``) no offsets are asked: the ids come from
its fastest call, every token's byte range from a per-id table and one cumulative sum, and a
span's token range from two ``searchsorted`` over the block. Otherwise the token range of a
span is found with the encoding's ``char_to_token`` at the span's two ends (a few calls per
span, not per token); where a span end falls on characters no token covers (trimmed offsets)
or a span is empty, the conversation's offsets are read whole and the rule is applied with
``searchsorted``. Masks are laid out with one cumulative sum over the block.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from zephon.chat.template import ChatTemplate, TemplateRefused
from zephon.tokens.byte_offsets import ByteLengths

SCOPES = ("all_assistant", "last_span", "after_last_user")


class Unmaskable(ValueError):
    """The assistant spans of a conversation cannot be derived exactly."""


def prefix_diff_spans(template: ChatTemplate, messages: list, tools: Any, extra: dict
                      ) -> tuple[str, list[tuple[int, int]], list[int]]:
    """(text, assistant spans, the message each span belongs to) by diffing prefixes."""
    full, _ = template.render(messages, tools=tools, extra=extra)
    spans, owners = [], []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        try:
            before, _ = template.render(messages[:i], tools=tools, add_generation_prompt=True,
                                        extra=extra)
            through, _ = template.render(messages[: i + 1], tools=tools, extra=extra)
        except TemplateRefused as e:
            raise Unmaskable(f"prefix_diff could not render the conversation up to message {i}: "
                             f"{e}") from None
        if not through.startswith(before) or not full.startswith(through):
            raise Unmaskable(
                f"the chat template does not render the conversation up to message {i} as a "
                "prefix of the whole, so prefix_diff cannot place its assistant turn (give the "
                "template {% generation %} tags)")
        start = len(before)
        spans.append((start, max(start, len(through.rstrip()))))
        owners.append(i)
    return full, spans, owners


def after_user_start(template: ChatTemplate, messages: list, tools: Any, extra: dict,
                     text: str) -> int | None:
    """Where the text after the last user message starts in ``text`` (the rendering of the
    whole conversation): the length of the rendering up to that message, when it is a prefix
    of the whole (None otherwise, or when there is no user message)."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    if last_user < 0:
        return 0
    try:
        head, _ = template.render(messages[: last_user + 1], tools=tools, extra=extra)
    except TemplateRefused:
        return None
    return len(head) if text.startswith(head) else None


def in_scope(spans: list[tuple[int, int]], owners: list[int] | None, messages: list,
             scope: str, after_user: Any = None) -> list[tuple[int, int]]:
    """The spans the loss is on: every assistant span, the last one, or those of the assistant
    messages after the last user message (``owners``: the message of each span;
    ``after_user()``: where the text after the last user message starts, for templates that
    mark several spans per assistant message, e.g. reasoning and answer)."""
    if scope == "all_assistant" or not spans:
        return spans
    if scope == "last_span":
        return spans[-1:]
    if owners is None:
        owners = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        start = after_user() if after_user is not None and len(owners) != len(spans) else None
        if start is not None:
            return [sp for sp in spans if sp[0] >= start]
        if len(owners) != len(spans):
            raise Unmaskable(f"the template marked {len(spans)} generation spans for "
                             f"{len(owners)} assistant messages, so loss_scope='after_last_user' "
                             "cannot tell which answer each span is")
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    return [s for s, o in zip(spans, owners) if o > last_user]


# -- characters to tokens --------------------------------------------------------------------


def _fast_range(enc: Any, n: int, s: int, t: int) -> tuple[int, int] | None:
    """Token range [a, b) overlapping characters [s, t), from the span's ends (None: the ends
    fall on characters no token covers, or the span is empty)."""
    if s >= t:
        return None
    a, b = enc.char_to_token(s), enc.char_to_token(t - 1)
    if a is None or b is None:
        return None
    while a > 0 and enc.token_to_chars(a - 1)[1] > s:  # tokens sharing a character (bytes)
        a -= 1
    while b + 1 < n and enc.token_to_chars(b + 1)[0] < t:
        b += 1
    return a, b + 1


def _aligned(enc: Any, a: int, b: int, s: int, t: int) -> bool:
    return b <= a or (enc.token_to_chars(a)[0] >= s and enc.token_to_chars(b - 1)[1] <= t)


def _offsets_mask(enc: Any, spans: list[tuple[int, int]]) -> tuple[np.ndarray, bool]:
    """Per-token mask of one conversation from its full offsets, and whether every overlapping
    token lies inside its span."""
    offs = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
    if not spans or not len(offs):
        return np.zeros(len(offs), dtype=bool), True
    starts = np.fromiter((s for s, _ in spans), np.int64, len(spans))
    ends = np.fromiter((t for _, t in spans), np.int64, len(spans))
    k = np.searchsorted(ends, offs[:, 0], side="right")  # first span ending after the token
    kk = np.minimum(k, len(spans) - 1)
    hit = (k < len(spans)) & (starts[kk] < offs[:, 1])
    inside = (offs[:, 0] >= starts[kk]) & (offs[:, 1] <= ends[kk])
    return hit, bool(np.all(inside[hit]))


def _ids(encodings: list) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(e) for e in encodings), dtype=np.int64, count=len(encodings))
    offsets = np.zeros(len(encodings) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings),
                         dtype=np.int32, count=int(offsets[-1]))
    return offsets, values


def _ranges_mask(total: int, starts: list[int], ends: list[int]) -> np.ndarray:
    """A 0/1 mask over ``total`` tokens with ones in every [start, end) range (two ranges share
    a token where one token straddles the gap between their spans)."""
    delta = np.zeros(total + 1, dtype=np.int32)
    np.add.at(delta, np.asarray(starts, dtype=np.int64), 1)
    np.add.at(delta, np.asarray(ends, dtype=np.int64), -1)
    return np.cumsum(delta[:-1]) > 0


def _byte_spans(texts: list[str], spans: list[list[tuple[int, int]]], base: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, owner) of every span: its range of bytes of the block's texts laid end
    to end (``base``: where each text's bytes begin) and its text; a few string operations per
    span."""
    starts: list[int] = []
    ends: list[int] = []
    owners: list[int] = []
    for c, sp in enumerate(spans):
        if not sp:
            continue
        b, text = int(base[c]), texts[c]
        if text.isascii():
            starts.extend(b + s for s, _ in sp)
            ends.extend(b + t for _, t in sp)
        else:
            starts.extend(b + len(text[:s].encode("utf-8")) for s, _ in sp)
            ends.extend(b + len(text[:t].encode("utf-8")) for _, t in sp)
        owners.extend([c] * len(sp))
    return (np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64),
            np.asarray(owners, dtype=np.int64))


def _span_tokens(tok_ends: np.ndarray, nbytes: np.ndarray, starts: np.ndarray,
                 ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For spans given in the tokens' coordinate: (first token, end token, partial), the
    [first, end) range of tokens overlapping each span (``token_start < span_end`` and
    ``token_end > span_start``; an empty span keeps a token straddling it) and whether a token
    of it sticks out of the span. Searches per span, not per token."""
    first = np.searchsorted(tok_ends, starts, side="right")  # first token ending after start
    tok_starts = tok_ends - nbytes
    end = np.searchsorted(tok_starts, ends, side="left")  # tokens starting before the end
    some = first < end
    last = np.maximum(end - 1, 0)
    at = np.minimum(first, len(tok_ends) - 1)
    partial = some & ((tok_starts[at] < starts) | (tok_ends[last] > ends))
    return first, end, partial


def _encode_by_bytes(tokenizer: Any, lengths: ByteLengths, texts: list[str],
                     spans: list[list[tuple[int, int]]], strict: np.ndarray) -> tuple | None:
    """``encode_masked`` without the tokenizer's offsets (``zephon.tokens.byte_offsets``): ids
    from its fastest call, every token's bytes from the id table, spans found by search. None
    where a text's tokens do not add up to its bytes (the caller asks offsets)."""
    offsets, ids = tokenizer.encode(texts)
    nbytes = lengths.of(ids)
    tok_ends = np.cumsum(nbytes)
    text_at = np.concatenate(([0], tok_ends))[offsets]  # where each text's bytes begin
    sizes = np.fromiter((len(t) if t.isascii() else len(t.encode("utf-8")) for t in texts),
                        dtype=np.int64, count=len(texts))
    if (nbytes <= 0).any() or not np.array_equal(np.diff(text_at), sizes):
        return None  # an id the table does not know, or tokens that are not the text's bytes
    starts, ends, owners = _byte_spans(texts, spans, text_at)
    misaligned = np.zeros(len(texts), dtype=bool)
    if not len(starts) or not len(ids):
        return offsets, ids, np.zeros(len(ids), dtype=np.int8), misaligned
    if (ends < starts).any() or (starts[1:] < ends[:-1]).any():
        return None  # spans out of order: the offsets path reads them one conversation at a time
    first, end, partial = _span_tokens(tok_ends, nbytes, starts, ends)
    if partial.any():
        misaligned[owners[partial]] = True
        misaligned &= strict
    some = first < end
    return offsets, ids, _ranges_mask(len(ids), first[some], end[some]).astype(np.int8), \
        misaligned


def encode_masked(tokenizer: Any, texts: list[str], spans: list[list[tuple[int, int]]],
                  strict: np.ndarray, lengths: ByteLengths | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, ids, int8 mask, misaligned): every text encoded without added specials, the
    mask over the tokens of its spans; ``misaligned[c]`` where ``strict[c]`` asks that spans
    begin and end on token boundaries and one does not. ``lengths``: the tokenizer's token
    byte lengths, where it is byte-exact (the mask then needs no offsets)."""
    backend = tokenizer.backend
    if lengths is not None and backend is not None:
        done = _encode_by_bytes(tokenizer, lengths, texts, spans, strict)
        if done is not None:
            return done
    misaligned = np.zeros(len(texts), dtype=bool)
    if backend is None:  # the byte-level fallback tokenizer: a token is a byte
        offsets, ids = tokenizer.encode(texts)
        starts, ends = [], []
        for c, (text, sp) in enumerate(zip(texts, spans)):
            for s, t in sp:
                starts.append(offsets[c] + len(text[:s].encode("utf-8", "surrogatepass")))
                ends.append(offsets[c] + len(text[:t].encode("utf-8", "surrogatepass")))
        return offsets, ids, _ranges_mask(len(ids), starts, ends).astype(np.int8), misaligned
    encodings = backend.encode_batch(texts, add_special_tokens=False)
    offsets, ids = _ids(encodings)
    starts, ends, slow = [], [], []
    for c, (enc, sp) in enumerate(zip(encodings, spans)):
        n, base = len(enc), int(offsets[c])
        found = []
        for s, t in sp:
            r = _fast_range(enc, n, s, t)
            if r is None:
                break
            found.append(r)
        if len(found) < len(sp):
            slow.append(c)
            continue
        if strict[c] and not all(_aligned(enc, a, b, s, t) for (a, b), (s, t) in zip(found, sp)):
            misaligned[c] = True
        starts.extend(base + a for a, _ in found)
        ends.extend(base + b for _, b in found)
    mask = _ranges_mask(len(ids), starts, ends)
    for c in slow:
        hit, inside = _offsets_mask(encodings[c], spans[c])
        mask[offsets[c]:offsets[c + 1]] = hit
        misaligned[c] = bool(strict[c]) and not inside
    return offsets, ids, mask.astype(np.int8), misaligned


def encode_pieces(tokenizer: Any, pieces: list[str], supervised: np.ndarray,
                  per_conversation: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Conversations given as pieces (``apply_chat_template=False``), each piece encoded on
    its own so spans are exact: (offsets, ids, int8 mask). ``per_conversation``: pieces of
    each conversation, in order."""
    piece_off, ids = tokenizer.encode(pieces)
    bounds = np.zeros(len(per_conversation) + 1, dtype=np.int64)
    np.cumsum(per_conversation, out=bounds[1:])
    mask = np.repeat(supervised.astype(np.int8), np.diff(piece_off))
    return piece_off[bounds], ids, mask
