"""The string vocabularies of builder parameters, as types (``zephon.ops`` hands them on)."""

from __future__ import annotations

from typing import Literal

from zephon._ext.packing_algorithms import PackingAlgorithm

__all__ = ["MissingFieldMode", "PackingAlgorithm", "SpanSource", "SpecialTokensMode"]

SpecialTokensMode = Literal["bos_eos", "bos", "eos", "none", "tokenizer_default"]
"""The ``special_tokens`` of ``tokenize``: which markers bracket each document."""
MissingFieldMode = Literal["error", "empty"]
"""The ``missing_field`` of ``tokenize``: a record without the text field raises, or counts as
empty text."""
SpanSource = Literal["auto", "generation_tags", "prefix_diff"]
"""Where a chat template's assistant spans come from (kept for the reference's API)."""
