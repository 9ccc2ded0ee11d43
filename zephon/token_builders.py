"""``Pipeline``'s token builders: tokenize, tokenize_chat, pack_flat, pack_sequences.

A part of the ``Pipeline`` class (``zephon.pipeline``), kept in its own module so each stays
readable: every method appends one operator (``zephon.ops``), whose constructor checks the
arguments, and returns the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zephon.compat_notes import compat_keywords
from zephon.ops.modes import MissingFieldMode, PackingAlgorithm, SpanSource, SpecialTokensMode
from zephon.pipeline_base import PipelineBase

if TYPE_CHECKING:
    from typing_extensions import Self


class TokenBuilders(PipelineBase):
    """The builder methods that turn text into token rows (see ``Pipeline``)."""

    @compat_keywords("placement", "parallelism")
    def tokenize(self, tokenizer: Any = None, tokenizer_id: str | None = None, *, field: str,
                 max_length: int | None = None, truncation: bool = False,
                 split_long_samples: bool = False, special_tokens: SpecialTokensMode = "bos_eos",
                 bos_token_id: int | None = None, eos_token_id: int | None = None,
                 preserve_upstream_payload: bool = False,
                 missing_field: MissingFieldMode = "error", add_attention_mask: bool = True,
                 padding: Any = False, return_tensors: str | None = None,
                 parallelism: int | None = None, placement: str = "auto",
                 pad_token_id: int | None = None, on_bad_record: str = "raise") -> Self:
        """Text -> token ids. Each document gets the BOS/EOS its tokenizer has, settled here (a
        ``special_tokens`` request it cannot honour raises now); bad text fields raise a
        ``DataError`` or, with ``on_bad_record="skip"``, are skipped and counted.

        Args:
            tokenizer: A ``tokenizers.Tokenizer``, the path of a ``tokenizer.json`` or of a
                tokenizer directory (read as transformers reads it), or a transformers tokenizer.
            tokenizer_id: A tokenizer by name instead: ``"__fallback__"`` is the built-in
                byte-level tokenizer (UTF-8 bytes past four special ids), the same in every
                process.
            field: The payload field holding the text (a dotted path reaches nested fields).
            max_length: Tokens per row, specials included (needed by ``truncation``,
                ``split_long_samples`` and ``padding="max_length"``).
            truncation: Cut rows to ``max_length``; every cut is counted.
            split_long_samples: Cut long documents into pieces of at most ``max_length``
                tokens that keep every token (BOS on the first, EOS on the last).
            special_tokens: ``"bos_eos"``, ``"bos"``, ``"eos"``, ``"none"`` or
                ``"tokenizer_default"`` (the tokenizer's own template decides).
            bos_token_id: The BOS id (default: the tokenizer's).
            eos_token_id: The EOS id (default: the tokenizer's).
            preserve_upstream_payload: Keep the input fields beside the ids.
            missing_field: A record without ``field`` raises (``"error"``) or counts as empty
                text (``"empty"``).
            add_attention_mask: Add an ``attention_mask`` column.
            padding: ``False``; ``"max_length"`` right-pads each row to ``max_length``;
                ``True`` / ``"longest"`` leaves rows as they are (``to_training`` pads each
                batch to its longest row).
            return_tensors: Accepted for the reference's API; rows are Arrow lists.
            parallelism: Shown in ``explain()``; every worker runs the stateless operators.
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once).
            pad_token_id: The pad id (default: the tokenizer's PAD, else its EOS, else 0).
            on_bad_record: A missing, null or non-text field raises a ``DataError``
                (``"raise"``) or is skipped and counted (``"skip"``).

        Returns:
            This pipeline.

        Raises:
            ValueError: Conflicting keywords, or a ``special_tokens`` request the tokenizer cannot
                honour (the message names the fix).
        """
        from zephon.ops.tokenize import TokenizeOp

        op = TokenizeOp(
            tokenizer, tokenizer_id, field=field, max_length=max_length, truncation=truncation,
            split_long_samples=split_long_samples, special_tokens=special_tokens,
            bos_token_id=bos_token_id, eos_token_id=eos_token_id,
            preserve_upstream_payload=preserve_upstream_payload, missing_field=missing_field,
            add_attention_mask=add_attention_mask, padding=padding,
            return_tensors=return_tensors, parallelism=parallelism, placement=placement,
            pad_token_id=pad_token_id, on_bad_record=on_bad_record)
        return self._append(op.named_by(self.work_source))

    @compat_keywords("placement", "parallelism")
    def tokenize_chat(self, tokenizer: Any = None, tokenizer_id: str | None = None, *,
                      eos_token: str | None = None, field: str = "messages",
                      max_length: int | None = None, chat_template: Any = None,
                      apply_chat_template: bool = True, span_source: SpanSource = "auto",
                      loss_on_last_turn_only: bool = False, loss_scope: str = "all_assistant",
                      chat_template_kwargs: Mapping[str, Any] | None = None,
                      tools_field: str | None = "tools",
                      enable_thinking_field: str | None = "enable_thinking",
                      mask_field_out: str = "loss_mask", preserve_upstream_payload: bool = False,
                      oversized: str = "error", on_bad_record: str = "raise",
                      placement: str = "auto", parallelism: int | None = None) -> Self:
        """Conversations -> token ids and a per-token ``loss_mask`` (1 on what the assistant
        generates), with the tokenizer's chat template or ``chat_template=``. The rules:
        ``zephon.ops.tokenize_chat``.

        Args:
            tokenizer: As for ``tokenize``; its chat template renders the conversations.
            tokenizer_id: As for ``tokenize``.
            eos_token: With ``apply_chat_template=False``, the text after each assistant
                content (default: the tokenizer's EOS).
            field: The payload field holding the list of ``{"role", "content"}`` messages.
            max_length: Tokens per conversation; longer ones follow ``oversized``.
            chat_template: A template string, a file, or a template name, instead of the
                tokenizer's.
            apply_chat_template: ``False`` joins the message contents as they are.
            span_source: Where assistant spans come from: ``"generation_tags"``
                (``{% generation %}``), ``"prefix_diff"`` (rendered prefixes, checked) or
                ``"auto"`` (tags, else prefix diffs).
            loss_on_last_turn_only: The same as ``loss_scope="last_span"``.
            loss_scope: ``"all_assistant"``, ``"last_span"`` or ``"after_last_user"``.
            chat_template_kwargs: Extra variables for the template.
            tools_field: The payload field holding a conversation's tools (None: none).
            enable_thinking_field: The payload field holding ``enable_thinking`` (None: none).
            mask_field_out: The name of the mask column.
            preserve_upstream_payload: Keep the input fields beside the ids.
            oversized: A conversation over ``max_length`` raises (``"error"``), is cut
                (``"truncate"``) or dropped (``"drop"``); both are counted.
            on_bad_record: A bad conversation raises a ``DataError`` (``"raise"``) or is
                skipped and counted (``"skip"``).
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once).
            parallelism: Shown in ``explain()``; every worker runs the stateless operators.

        Returns:
            This pipeline.

        Raises:
            ValueError: Bad or conflicting keywords, or a template whose spans cannot be found.
        """
        from zephon.ops.tokenize_chat import TokenizeChatOp

        op = TokenizeChatOp(
            tokenizer, tokenizer_id, eos_token=eos_token, field=field, max_length=max_length,
            chat_template=chat_template, apply_chat_template=apply_chat_template,
            span_source=span_source, loss_on_last_turn_only=loss_on_last_turn_only,
            loss_scope=loss_scope,
            chat_template_kwargs=dict(chat_template_kwargs) if chat_template_kwargs else None,
            tools_field=tools_field, enable_thinking_field=enable_thinking_field,
            mask_field_out=mask_field_out, preserve_upstream_payload=preserve_upstream_payload,
            oversized=oversized, on_bad_record=on_bad_record, parallelism=parallelism,
            placement=placement)
        return self._append(op.named_by(self.work_source))

    def _pack(self, *, flat: bool, **settings: Any) -> Self:
        """``pack_flat`` (``flat``) or ``pack_sequences`` with the settings it was given."""
        from zephon.ops.pack import PackOp

        return self._append(PackOp(flat=flat, work_source=self.work_source, **settings))

    @compat_keywords("placement", "parallelism")
    def pack_flat(self, max_length: int, *, num_bins: int | None = None,
                  algorithm: PackingAlgorithm = "first_fit", tokens_field: str = "auto",
                  drop_oversized: bool | None = None, oversized: str | None = None,
                  min_sequence_length: int = 1, max_sequences_per_bin: int | None = None,
                  shuffle_strategy: str | None = None, shuffle_seed: int | None = None,
                  flush_strategy: str = "fifo", candidate_pool_size: int | None = None,
                  max_candidate_age: int | None = None, homogeneity: str = "none",
                  groups: Any = None, pad_token_id: int | None = None,
                  emit_positions: bool = True, length_fn: Any = None,
                  pack_payloads: Any = "keep_list", placement: str = "auto",
                  parallelism: int | None = None) -> Self:
        """Pack token records into rows of exactly ``max_length`` tokens (packed documents plus
        padding) with per-document ``positions``; ``to_training`` turns them into tensors.

        Args:
            max_length: Tokens per row; use the model context + 1, so that the label shift leaves
                exactly the context length.
            num_bins: Open rows per lane and packing group (``first_fit`` / ``best_fit``:
                required; not allowed with ``wrap``).
            algorithm: ``"first_fit"``, ``"best_fit"``, ``"wrap"`` (a token stream cut into
                full rows, splitting documents) or ``"best_fit_wrap"`` (a candidate pool, at
                most one split per row).
            tokens_field: The token column (``"auto"``: the first of ``input_ids``, ``tokens``,
                ``token_ids``, ``ids``).
            drop_oversized: The older spelling of ``oversized``: True is ``"drop"``, False
                ``"split"``.
            oversized: A document longer than a row: ``"split"`` (default: cut into full rows
                and packed), ``"truncate"`` (its first ``max_length`` tokens) or ``"drop"``;
                what is removed is counted.
            min_sequence_length: A row leaves once fewer than this many tokens are free.
            max_sequences_per_bin: Documents per row at most (None: no cap).
            shuffle_strategy: Refused: ``shuffle()`` before packing gives a deterministic order.
            shuffle_seed: Goes with ``shuffle_strategy``.
            flush_strategy: Which open row leaves first when a new one is needed: ``"fifo"``
                (the oldest) or ``"fullest"``.
            candidate_pool_size: ``best_fit_wrap``'s pool (default 1024 records).
            max_candidate_age: ``best_fit_wrap``: arrivals after which a waiting record is
                placed anyway (default 8 x the pool size).
            homogeneity: ``"none"``; ``"full"`` keeps each row within one dataset, ``"group"``
                within one of ``groups``.
            groups: A ``DomainGroups`` or ``{group: [dataset, ...]}`` (with
                ``homogeneity="group"``).
            pad_token_id: The id of padding tokens (required unless ``algorithm="wrap"``
                without ``max_sequences_per_bin``); rows record their padding length, so any
                id works.
            emit_positions: Add the per-document ``positions`` column.
            length_fn: Refused: packing measures the token field.
            pack_payloads: Accepted (and checked) as ``pack_sequences`` takes it; token rows
                do not use it.
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once).
            parallelism: Accepted for compatibility; a lane's packing runs serially.

        Returns:
            This pipeline.

        Raises:
            ValueError: Bad or conflicting keywords (no ``pad_token_id`` for a padding algorithm,
                ``length_fn`` or ``shuffle_strategy``, which this version does not support).
        """
        return self._pack(flat=True, **{k: v for k, v in locals().items() if k != "self"})

    @compat_keywords("placement", "parallelism")
    def pack_sequences(self, max_length: int, *, num_bins: int | None = None,
                       algorithm: PackingAlgorithm = "first_fit", tokens_field: str = "auto",
                       drop_oversized: bool | None = None, oversized: str | None = None,
                       min_sequence_length: int = 1, max_sequences_per_bin: int | None = None,
                       shuffle_strategy: str | None = None, shuffle_seed: int | None = None,
                       flush_strategy: str = "fifo", candidate_pool_size: int | None = None,
                       max_candidate_age: int | None = None, homogeneity: str = "none",
                       groups: Any = None, pack_payloads: Any = "keep_list",
                       pad_token_id: int | None = None, emit_positions: bool = True,
                       length_fn: Any = None, placement: str = "auto",
                       parallelism: int | None = None) -> Self:
        """Pack records into groups of at most ``max_length`` tokens, as lists of whole payloads
        (``{"packed_samples": [...]}``; slices of the token field and the fields aligned with
        it for ``wrap`` / ``best_fit_wrap``) rather than flat token rows; no padding.

        Args:
            max_length: Tokens per packed record.
            num_bins: As for ``pack_flat``.
            algorithm: As for ``pack_flat``.
            tokens_field: As for ``pack_flat``.
            drop_oversized: As for ``pack_flat``.
            oversized: As for ``pack_flat``.
            min_sequence_length: As for ``pack_flat``.
            max_sequences_per_bin: As for ``pack_flat``.
            shuffle_strategy: Refused, as for ``pack_flat``.
            shuffle_seed: Goes with ``shuffle_strategy``.
            flush_strategy: As for ``pack_flat``.
            candidate_pool_size: As for ``pack_flat``.
            max_candidate_age: As for ``pack_flat``.
            homogeneity: As for ``pack_flat``.
            groups: As for ``pack_flat``.
            pack_payloads: How a packed record holds its pieces: ``"keep_list"`` (a list),
                ``"numpy_array"`` / ``"torch_tensor"`` (the token fields concatenated) or a
                callable merging the list.
            pad_token_id: Accepted as ``pack_flat`` takes it; nothing is padded here.
            emit_positions: Accepted as ``pack_flat`` takes it; unused here.
            length_fn: Refused, as for ``pack_flat``.
            placement: Zephon 0.2.0's; no effect here (a non-default value is said once).
            parallelism: Accepted for compatibility; a lane's packing runs serially.

        Returns:
            This pipeline.

        Raises:
            ValueError: Bad or conflicting keywords.
        """
        return self._pack(flat=False, **{k: v for k, v in locals().items() if k != "self"})
