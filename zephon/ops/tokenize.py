"""tokenize: text field -> ragged int32 token ids (+ attention mask), batch-encoded per block."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephon.block import Block, add_lineage, carry_hidden, list_array
from zephon.ops.base import BaseOp, OpContext, OpTraits
from zephon.ops.token_layout import bracket, split, truncate
from zephon.ops.tokenizer_source import LoadedTokenizer, resolve_spec

_MODES = ("bos_eos", "bos", "eos", "none", "tokenizer_default")


class TokenizeOp(BaseOp):
    name = "tokenize"

    def __init__(self, tokenizer: Any = None, tokenizer_id: str | None = None, *, field: str,
                 max_length: int | None = None, truncation: bool = False,
                 split_long_samples: bool = False, special_tokens: str = "bos_eos",
                 bos_token_id: int | None = None, eos_token_id: int | None = None,
                 preserve_upstream_payload: bool = False, missing_field: str = "error",
                 add_attention_mask: bool = True, padding: Any = False,
                 return_tensors: str | None = None, parallelism: int | None = None,
                 placement: str = "auto", pad_token_id: int | None = None) -> None:
        if special_tokens not in _MODES:
            raise ValueError(f"special_tokens must be one of {_MODES}, got {special_tokens!r}")
        if missing_field not in ("error", "empty"):
            raise ValueError(f"missing_field must be 'error' or 'empty', got {missing_field!r}")
        if truncation and split_long_samples:
            raise ValueError("truncation and split_long_samples are mutually exclusive")
        if (truncation or split_long_samples) and max_length is None:
            raise ValueError("truncation / split_long_samples need max_length")
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        if special_tokens in ("none", "tokenizer_default") and (
                bos_token_id is not None or eos_token_id is not None):
            raise ValueError(f"bos_token_id/eos_token_id cannot be used with special_tokens={special_tokens!r}")
        if padding not in (False, None, "max_length"):
            raise ValueError("tokenize supports padding=False or 'max_length' (pad to a batch's "
                             "longest row in to_training instead)")
        if padding == "max_length" and max_length is None:
            raise ValueError("padding='max_length' needs max_length")
        if not field:
            raise ValueError("tokenize needs field=")
        self.spec = resolve_spec(tokenizer, tokenizer_id)
        self.field = field
        self.max_length = max_length
        self.truncation = truncation
        self.split_long_samples = split_long_samples
        self.special_tokens = special_tokens
        self.bos_override = bos_token_id
        self.eos_override = eos_token_id
        self.preserve_upstream_payload = preserve_upstream_payload
        self.missing_field = missing_field
        self.add_attention_mask = add_attention_mask
        self.padding = padding or False
        self.pad_token_id = pad_token_id
        self.parallelism = parallelism
        self._tok: LoadedTokenizer | None = None
        if truncation and special_tokens == "bos_eos" and max_length is not None and max_length < 2:
            raise ValueError("max_length must leave room for BOS and EOS")

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_tok"] = None  # workers load their own copy
        return state

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, parallelism=self.parallelism or 1)

    def setup(self, ctx: OpContext) -> None:
        super().setup(ctx)
        self.tokenizer()

    def tokenizer(self) -> LoadedTokenizer:
        if self._tok is None:
            self._tok = LoadedTokenizer(self.spec)
        return self._tok

    def specials(self) -> tuple[int | None, int | None]:
        tok = self.tokenizer()
        mode = self.special_tokens
        bos = eos = None
        if mode in ("bos_eos", "bos"):
            bos = self.bos_override if self.bos_override is not None else tok.bos_token_id
            if bos is None:
                raise ValueError(f"tokenizer {self.spec.label} has no BOS token: pass bos_token_id")
        if mode in ("bos_eos", "eos"):
            eos = self.eos_override if self.eos_override is not None else tok.eos_token_id
            if eos is None:
                raise ValueError(f"tokenizer {self.spec.label} has no EOS token: pass eos_token_id")
        return bos, eos

    def process_many(self, elems: list) -> list:
        raise TypeError("tokenize runs on blocks inside the engine")

    # -- the block path -------------------------------------------------------------------------

    def texts(self, block: Block) -> list[str]:
        """The text of each record (missing -> error naming the sample, or empty)."""
        if block.columnar:
            col = _field_column(block.payload, self.field)
            if col is None or col.null_count:
                bad = 0 if col is None else int(np.flatnonzero(
                    pc.is_null(col).to_numpy(zero_copy_only=False))[0])
                if self.missing_field == "error":
                    raise KeyError(f"tokenize: field {self.field!r} missing in sample "
                                   f"{block.ids()[bad]}")
                if col is None:
                    return [""] * len(block)
                col = pc.fill_null(col, "")
            if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
                col = pc.cast(col, pa.string())
            return col.to_pylist()
        out = []
        for i, p in enumerate(block.payload_list()):
            v = _get_path(p, self.field)
            if v is None:
                if self.missing_field == "error":
                    raise KeyError(f"tokenize: field {self.field!r} missing in sample {block.ids()[i]}")
                v = ""
            out.append(v.decode("utf-8") if isinstance(v, bytes) else str(v))
        return out

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids with specials, truncation and splitting applied (no children yet)."""
        tok = self.tokenizer()
        if self.special_tokens == "tokenizer_default":
            offsets, values = tok.encode(texts, add_special_tokens=True)
            if self.truncation:
                offsets, values = truncate(offsets, values, self.max_length)
            return offsets, values
        offsets, values = tok.encode(texts)
        bos, eos = self.specials()
        if self.truncation:
            room = self.max_length - (bos is not None) - (eos is not None)
            offsets, values = truncate(offsets, values, room)
        return bracket(offsets, values, bos, eos)

    def process_block(self, block: Block) -> Block:
        offsets, values = self.encode(self.texts(block))
        base = block
        if self.split_long_samples:
            offsets, values, parent, child = split(offsets, values, self.max_length)
            # every record gets a lineage level (child 0 when unsplit), so a record's identity
            # never depends on which other records shared its block
            base = block.take(parent) if len(parent) != len(block) else block
            base = Block(base.meta, base.payload, add_lineage(base.lineage, child),
                         base.sparse, base.is_batch)
        lengths = np.diff(offsets)
        ids_col = list_array(offsets, values)
        mask_col = list_array(offsets, np.ones(len(values), dtype=np.int8)) \
            if self.add_attention_mask else None
        if self.padding == "max_length":
            ids_col, mask_col = _pad_to(offsets, values, self.max_length,
                                        self.pad_token_id or 0, self.add_attention_mask)
        cols = {"input_ids": ids_col}
        if mask_col is not None:
            cols["attention_mask"] = mask_col
        if self.preserve_upstream_payload and base.columnar:
            table = base.payload
            for name, col in cols.items():
                if name in table.column_names:
                    table = table.set_column(table.column_names.index(name), name, col)
                else:
                    table = table.append_column(name, col)
            return Block(base.meta, table, base.lineage, base.sparse)
        if self.preserve_upstream_payload:
            payloads = base.payload_list()
            ids = pa.array(ids_col).to_pylist()
            for p, row in zip(payloads, ids):
                if isinstance(p, dict):
                    p["input_ids"] = row
                    if self.add_attention_mask:
                        p["attention_mask"] = [1] * len(row)
            return base.with_payloads(payloads)
        del lengths
        return carry_hidden(base, Block(base.meta, pa.table(cols), base.lineage))


def _pad_to(offsets, values, max_len, pad_id, with_mask):
    lengths = np.diff(offsets)
    n = len(lengths)
    width = max(int(lengths.max(initial=0)), max_len)
    dense = np.full((n, width), pad_id, dtype=np.int32)
    mask = np.zeros((n, width), dtype=np.int8)
    cols = np.arange(width)
    fill = cols[None, :] < lengths[:, None]
    dense[fill] = values
    mask[fill] = 1
    new_off = np.arange(n + 1, dtype=np.int64) * width
    return list_array(new_off, dense.ravel()), (list_array(new_off, mask.ravel()) if with_mask else None)


def _field_column(table: pa.Table, path: str):
    parts = path.split(".")
    if parts[0] not in table.column_names:
        return None
    col = table.column(parts[0])
    for p in parts[1:]:
        if not pa.types.is_struct(col.type) or col.type.get_field_index(p) < 0:
            return None
        col = pc.struct_field(col, p)
    return col


def _get_path(payload: Any, path: str) -> Any:
    cur = payload
    for p in path.split("."):
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur
