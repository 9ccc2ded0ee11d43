"""tokenize_chat: conversations -> token ids and a per-token loss mask, for supervised fine-tuning.

Each record's ``field`` (default ``messages``) is rendered with the chat template, as
transformers' ``apply_chat_template`` renders it (``zephon.chat.template``: the tokenizer's own
template, or ``chat_template=`` as a string, a file or a template name), with the record's tools
(``tools_field``) and ``enable_thinking`` (``enable_thinking_field``) when it has them, and
encoded without added special tokens (the template writes its own). ``mask_field_out`` (default
``loss_mask``, int8) is 1 on the tokens the assistant generates: the template's
``{% generation %}`` blocks where it has them, else its prefixes diffed, checked
(``span_source``; ``zephon.chat.spans``). ``loss_scope`` keeps every assistant span
(``all_assistant``), the last one (``last_span``; also ``loss_on_last_turn_only=True``) or those
after the last user message (``after_last_user``). ``apply_chat_template=False`` joins the
message contents as they are, each assistant content followed by ``eos_token`` (default: the
tokenizer's EOS), every piece encoded on its own so the spans are exact.

The mask travels with the ids through shuffle, ensure_mixture and packing (an aligned column),
and ``to_training(return_labels=True)`` turns every 0 into ``ignore_index``.

Nothing is lost unsaid. A conversation longer than ``max_length`` tokens raises a ``DataError``
(``oversized="error"``, the default), or is cut to ``max_length`` (``"truncate"``: counted with
the tokens cut, reason ``truncated``) or skipped (``"drop"``: counted, reason ``oversized``). A
bad conversation (not a list, no messages, a message without a known role or with non-text
content, tools that are not a list, a template that refuses it) raises a ``DataError`` naming
dataset, shard and row, or with ``on_bad_record="skip"`` is skipped and counted (``bad_record``);
so is one whose spans cannot be derived exactly (``unmaskable``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zephon import accounting
from zephon._ext import kernel
from zephon.block import Block, list_array, with_columns
from zephon.chat.conversations import (
    ABSENT,
    bad_conversation,
    checked,
    checked_tools,
    column_values,
    flags,
)
from zephon.chat.template import special_strings, template_for
from zephon.ops.tokenizer_op import TokenizerOp
from zephon.tokens.byte_offsets import ByteLengths, byte_lengths
from zephon.tokens.tokenizer_source import LoadedTokenizer, load

SPAN_SOURCES = ("auto", "generation_tags", "prefix_diff")
# the settings in the fingerprint (template and tokenizer are added by digest)
_SETTINGS = ("apply_chat_template", "enable_thinking_field", "eos_token", "field", "loss_scope",
             "mask_field_out", "max_length", "on_bad_record", "oversized", "parallelism",
             "preserve_upstream_payload", "span_source", "tools_field")
_PROBE = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"},
          {"role": "assistant", "content": "Bye."}]


class TokenizeChatOp(TokenizerOp):
    name = "tokenize_chat"

    def __init__(self, tokenizer: Any = None, tokenizer_id: str | None = None, *,
                 eos_token: str | None = None, field: str = "messages",
                 max_length: int | None = None, chat_template: Any = None,
                 apply_chat_template: bool = True, span_source: str = "auto",
                 loss_on_last_turn_only: bool = False, loss_scope: str = "all_assistant",
                 chat_template_kwargs: dict | None = None, tools_field: str | None = "tools",
                 enable_thinking_field: str | None = "enable_thinking",
                 mask_field_out: str = "loss_mask", preserve_upstream_payload: bool = False,
                 oversized: str = "error", on_bad_record: str = "raise",
                 parallelism: int | None = None, placement: str = "auto") -> None:
        from zephon.chat.spans import SCOPES

        if not field:
            raise ValueError("tokenize_chat needs field=")
        if span_source not in SPAN_SOURCES:
            raise ValueError(f"span_source must be one of {SPAN_SOURCES}, got {span_source!r}")
        if loss_scope not in SCOPES:
            raise ValueError(f"loss_scope must be one of {SCOPES}, got {loss_scope!r}")
        if loss_on_last_turn_only and loss_scope not in ("all_assistant", "last_span"):
            raise ValueError("loss_on_last_turn_only=True is loss_scope='last_span'; it cannot "
                             f"be combined with loss_scope={loss_scope!r}")
        if oversized not in ("error", "truncate", "drop"):
            raise ValueError(f"oversized must be 'error', 'truncate' or 'drop', got {oversized!r}")
        if on_bad_record not in ("raise", "skip"):
            raise ValueError(f"on_bad_record must be 'raise' or 'skip', got {on_bad_record!r}")
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        if not mask_field_out or mask_field_out == "input_ids":
            raise ValueError(f"mask_field_out cannot be {mask_field_out!r}")
        if not apply_chat_template and chat_template is not None:
            raise ValueError("chat_template is not used with apply_chat_template=False")
        loaded = load(tokenizer, tokenizer_id)
        self.spec = loaded.spec
        self._tok: LoadedTokenizer | None = loaded
        # token byte lengths, found once per process (False: not looked for yet)
        self._lengths: ByteLengths | None | bool = False
        self.field = field
        self.max_length = max_length
        self.apply_chat_template = bool(apply_chat_template)
        self.span_source = span_source
        self.loss_scope = "last_span" if loss_on_last_turn_only else loss_scope
        self.tools_field = tools_field or None
        self.enable_thinking_field = enable_thinking_field or None
        self.mask_field_out = mask_field_out
        self.preserve_upstream_payload = preserve_upstream_payload
        self.oversized = oversized
        self.on_bad_record = on_bad_record
        self.parallelism = parallelism
        self.datasets: list | None = None
        specials = special_strings(tokenizer, loaded)
        self.eos_token = eos_token if eos_token is not None else specials.get("eos_token")
        if eos_token is not None:
            specials["eos_token"] = eos_token
        self.template = None
        if self.apply_chat_template:
            self.template = template_for(tokenizer, loaded, chat_template,
                                         {**specials, **(chat_template_kwargs or {})})
            self._check_spans()

    def _check_spans(self) -> None:
        """Refuse, while the pipeline is built, span sources the template cannot serve."""
        from zephon.chat.spans import Unmaskable, prefix_diff_spans
        from zephon.chat.template import TemplateRefused, has_generation_tags

        tagged = {n: has_generation_tags(s) for n, s in self.template.sources.items()}
        if self.span_source == "generation_tags" and not all(tagged.values()):
            raise ValueError(f"span_source='generation_tags' but chat template(s) "
                             f"{sorted(n for n, t in tagged.items() if not t)} have no "
                             "{% generation %} tags: use span_source='auto' or add the tags")
        if self.span_source == "generation_tags" or all(tagged.values()):
            return
        for probe in (_PROBE, _PROBE[1:]):  # some templates refuse a system message
            try:
                prefix_diff_spans(self.template, probe, None, {})
                return
            except TemplateRefused:
                continue
            except Unmaskable as e:
                raise ValueError(f"tokenize_chat cannot find assistant spans with this chat "
                                 f"template: it has no {{% generation %}} tags, and {e}") from None

    def named_by(self, work_source: Any) -> TokenizeChatOp:
        """Keep the work source's datasets, so errors name a record's dataset and shard."""
        datasets = getattr(work_source, "datasets_by_id", None)
        if isinstance(datasets, dict):
            datasets = [datasets[i] for i in sorted(datasets)]
        self.datasets = list(datasets) if datasets is not None else None
        return self

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_lengths"] = False  # the byte-length table too is made per process
        return state

    def fingerprint(self) -> dict:
        """Configuration for checkpoints and token-estimate caches: template and tokenizer by
        digest (a checkpoint stays small)."""
        import hashlib

        def digest(text: str) -> str:
            return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

        conf = {k: getattr(self, k) for k in _SETTINGS}
        conf["tokenizer"] = self.spec.fingerprint()
        if self.template is not None:
            conf["template"] = {n: digest(s) for n, s in sorted(self.template.sources.items())}
            conf["template_variables"] = {k: repr(v) for k, v in
                                          sorted(self.template.variables.items())}
            conf["strftime_now"] = self.template.now
        return conf

    def byte_lengths(self) -> ByteLengths | None:
        """The tokenizer's token byte lengths where its tokens cover the text's bytes exactly
        (masks then come without offsets, from its fastest call), else None."""
        if self._lengths is False:
            tok = self.tokenizer()
            self._lengths = None if tok.backend is None else byte_lengths(tok.backend,
                                                                          self.spec.payload)
        return self._lengths

    def text_bytes(self, block: Block) -> np.ndarray:
        """UTF-8 bytes of every record's message contents (priming leans on them)."""
        out = np.zeros(len(block), dtype=np.float64)
        for i, conv in enumerate(column_values(block, self.field)):
            if isinstance(conv, (list, tuple)):
                out[i] = sum(len(m["content"].encode("utf-8")) for m in conv if isinstance(m, dict)
                             and isinstance(m.get("content"), str))
        return out

    # -- the block path -------------------------------------------------------------------------

    def _conversation(self, messages: list, tools: Any, extra: dict) -> tuple:
        """(text, spans in scope, strict): one rendered conversation."""
        from zephon.chat.spans import after_user_start, in_scope, prefix_diff_spans

        tagged = self.span_source == "generation_tags" or (
            self.span_source == "auto" and self.template.tagged(bool(tools)))
        if tagged:
            text, spans = self.template.render(messages, tools=tools, extra=extra)
            owners = None
        else:
            text, spans, owners = prefix_diff_spans(self.template, messages, tools, extra)

        def after_user() -> int | None:  # several spans per answer: split at the last user
            return after_user_start(self.template, messages, tools, extra, text)

        return text, in_scope(spans, owners, messages, self.loss_scope, after_user), not tagged

    def _pieces(self, messages: list) -> tuple[list[str], list[bool]]:
        """apply_chat_template=False: contents as they are, EOS after each assistant's."""
        pieces, supervised = [], []
        answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        scoped = {"all_assistant": answers, "last_span": answers[-1:],
                  "after_last_user": [i for i in answers if i > last_user]}[self.loss_scope]
        for i, m in enumerate(messages):
            pieces.append(m.get("content", ""))
            supervised.append(i in scoped)
            if m["role"] == "assistant" and self.eos_token:
                pieces.append(self.eos_token)
                supervised.append(i in scoped)
        return pieces, supervised

    def _rendered(self, block: Block) -> tuple[list[str], list, list[str], list[str]]:
        """Per record: text (or pieces), spans (or piece flags), problem, loss reason."""
        from zephon.chat.spans import Unmaskable
        from zephon.chat.template import TemplateRefused

        n = len(block)
        convs = column_values(block, self.field)
        tools = column_values(block, self.tools_field) if self.tools_field else [ABSENT] * n
        thinking = column_values(block, self.enable_thinking_field) \
            if self.enable_thinking_field else [ABSENT] * n
        texts, spans, problems, reasons = [], [], [""] * n, [""] * n
        for i in range(n):
            messages, problem = checked(convs[i], self.field)
            tool_list = None
            if not problem and self.apply_chat_template:
                tool_list, problem = checked_tools(tools[i], self.tools_field)
            text, sp = "", []
            if not problem and not self.apply_chat_template:
                text, sp = self._pieces(messages)
            elif not problem:
                extra = {} if thinking[i] is ABSENT or thinking[i] is None else \
                    {"enable_thinking": thinking[i]}
                try:
                    text, sp, strict = self._conversation(messages, tool_list, extra)
                    sp = (sp, strict)
                except TemplateRefused as e:
                    problem = str(e)
                except Unmaskable as e:
                    problem, reasons[i] = str(e), "unmaskable"
            if problem:
                problems[i], reasons[i] = problem, reasons[i] or "bad_record"
            texts.append(text)
            spans.append(sp)
        return texts, spans, problems, reasons

    def _encode(self, texts: list, spans: list) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                         np.ndarray]:
        from zephon.chat.spans import encode_masked, encode_pieces

        tok = self.tokenizer()
        if not self.apply_chat_template:
            counts = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
            flat = [p for pieces in texts for p in pieces]
            sup = np.fromiter((s for flags_ in spans for s in flags_), dtype=bool, count=len(flat))
            offsets, ids, mask = encode_pieces(tok, flat, sup, counts)
            return offsets, ids, mask, np.zeros(len(texts), dtype=bool)
        strict = np.fromiter((s[1] for s in spans), dtype=bool, count=len(spans))
        return encode_masked(tok, texts, [s[0] for s in spans], strict, self.byte_lengths())

    def process_block(self, block: Block) -> Block:
        texts, spans, problems, reasons = self._rendered(block)
        bad = flags(problems)
        if bad.any():
            if self.on_bad_record == "raise":
                raise self._error(block, problems)
            self._count_skipped(block, bad, reasons)
            keep = np.flatnonzero(~bad)
            block = block.take(keep)
            texts, spans = [texts[i] for i in keep], [spans[i] for i in keep]
        offsets, ids, mask, misaligned = self._encode(texts, spans)
        if misaligned.any():
            problems = ["assistant span boundaries fall inside tokens (prefix_diff: the text "
                        "around a turn merges with it when tokenized; give the template "
                        "{% generation %} tags)" if m else "" for m in misaligned]
            if self.on_bad_record == "raise":
                raise self._error(block, problems)
            accounting.count(self.op_name, "unmaskable", block.meta["dataset_id"][misaligned])
            block, offsets, ids, mask = _keep(block, offsets, ids, mask, ~misaligned)
        block, offsets, ids, mask = self._fit(block, offsets, ids, mask)
        return self._output(block, offsets, ids, mask)

    def _error(self, block: Block, problems: list[str]) -> Exception:
        fix = "on_bad_record='skip' skips and counts such records"
        return bad_conversation(block, problems, self.datasets, self.op_name, fix)

    def _count_skipped(self, block: Block, bad: np.ndarray, reasons: list[str]) -> None:
        kinds = np.array(reasons, dtype=object)
        for reason in ("bad_record", "unmaskable"):
            sel = bad & (kinds == reason)
            if sel.any():
                accounting.count(self.op_name, reason, block.meta["dataset_id"][sel])

    def _fit(self, block: Block, offsets, ids, mask) -> tuple:
        """Apply ``max_length`` under the ``oversized`` policy, counted."""
        if self.max_length is None:
            return block, offsets, ids, mask
        lengths = np.diff(offsets)
        over = lengths > self.max_length
        if not over.any():
            return block, offsets, ids, mask
        ds = block.meta["dataset_id"]
        if self.oversized == "error":
            i = int(np.flatnonzero(over)[0])
            problems = [""] * len(block)
            problems[i] = (f"the conversation is {int(lengths[i])} tokens, longer than "
                           f"max_length={self.max_length}")
            return_fix = ("oversized='truncate' cuts it to max_length, oversized='drop' skips "
                          "it; both are counted")
            raise bad_conversation(block, problems, self.datasets, self.op_name, return_fix)
        if self.oversized == "truncate":
            accounting.count(self.op_name, "truncated", ds[over], lengths[over] - self.max_length)
            return (block, *_rows(offsets, (ids, mask), offsets[:-1],
                                  np.minimum(lengths, self.max_length)))
        accounting.count(self.op_name, "oversized", ds[over], lengths[over])
        return _keep(block, offsets, ids, mask, ~over)

    def _output(self, block: Block, offsets, ids, mask) -> Block:
        cols = {"input_ids": list_array(offsets, ids),
                self.mask_field_out: list_array(offsets, mask)}
        return with_columns(block, cols, self.preserve_upstream_payload)


def _rows(offsets, arrays, starts, lengths) -> tuple:
    """(offsets, *arrays) of the ragged rows that start at ``starts`` with ``lengths``: one
    kernel gather per array."""
    out = [kernel("ragged").gather_ragged(a, starts, lengths) for a in arrays]
    return (out[0][0], *(values for _, values in out))


def _keep(block: Block, offsets, ids, mask, keep: np.ndarray) -> tuple:
    """The rows ``keep`` selects, of the block and of its ragged ids and mask."""
    rows = np.flatnonzero(keep)
    return (block.take(rows), *_rows(offsets, (ids, mask), offsets[rows],
                                     np.diff(offsets)[rows]))
