"""What every operator that runs a tokenizer shares (``tokenize``, ``tokenize_chat``).

A tokenizer travels to worker processes as its spec: the loaded one holds native objects, so
each process loads its own copy, in ``setup``, before its first block.
"""

from __future__ import annotations

from typing import Any

from zephon.ops.base import OpContext, OpTraits, StatelessOp
from zephon.tokens.tokenizer_source import LoadedTokenizer


class TokenizerOp(StatelessOp):
    """A stateless operator whose cost is a tokenizer (``spec``: what to load)."""

    spec: Any
    parallelism: int | None
    _tok: LoadedTokenizer | None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_tok"] = None  # workers load their own copy
        return state

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, parallelism=self.parallelism or 1,
                        record_by_record=True, cost="tokenize", keeps_count=True)

    def setup(self, ctx: OpContext) -> None:
        super().setup(ctx)
        self.tokenizer()

    def tokenizer(self) -> LoadedTokenizer:
        """The tokenizer, loaded in this process on first use."""
        if self._tok is None:
            self._tok = LoadedTokenizer(self.spec)
        return self._tok
