"""decode_text: bytes fields become str, with newline normalisation and optional lowercasing."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from zephon.block import Block
from zephon.ops.base import OpTraits, StatelessOp, run_on_records
from zephon.state.fingerprint import settings


class DecodeTextOp(StatelessOp):
    name = "decode_text"

    def __init__(self, fields: Sequence[str] = ("text",), encoding: str = "utf-8",
                 errors: str = "strict", normalize_newlines: bool = True,
                 lowercase: bool = False, parallelism: int | None = None) -> None:
        if isinstance(fields, str):
            fields = (fields,)
        self.fields = tuple(fields)
        self.encoding = encoding
        self.errors = errors
        self.normalize_newlines = normalize_newlines
        self.lowercase = lowercase
        self.parallelism = parallelism

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, parallelism=self.parallelism or 2,
                        record_by_record=True, cost="decode")

    def fingerprint(self) -> dict:
        return settings(self, ("fields", "encoding", "errors", "normalize_newlines",
                               "lowercase", "parallelism"))

    def _decode_records(self, elems: list) -> list:
        """Python payloads (records Arrow cannot hold, or another codec): one at a time."""
        for r in elems:
            if not isinstance(r.payload, dict):
                raise TypeError(f"decode_text needs dict payloads, got {type(r.payload).__name__}"
                                f" for sample {r.meta.sample_id}")
            r.payload = {k: (self._decode_value(v) if k in self.fields else v)
                         for k, v in r.payload.items()}
        return elems

    def _decode_value(self, v):
        s = v.decode(self.encoding, self.errors) if isinstance(v, (bytes, bytearray)) else str(v)
        if self.normalize_newlines:
            s = s.replace("\r\n", "\n").replace("\r", "\n")
        return s.lower() if self.lowercase else s

    def process_block(self, block: Block) -> Block:
        if not block.columnar:
            if block.payload is not None and any(not isinstance(p, dict) for p in block.payload):
                bad = next(i for i, p in enumerate(block.payload) if not isinstance(p, dict))
                raise TypeError(
                    f"decode_text needs dict payloads, got {type(block.payload[bad]).__name__} "
                    f"for sample {block.ids()[bad]}")
            return run_on_records(self.op_name, block, self._decode_records)
        table = block.payload
        utf8 = self.encoding.replace("_", "-").lower() in ("utf-8", "utf8")
        for name in self.fields:
            if name not in table.column_names:
                continue
            col = table.column(name)
            if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
                if not (utf8 and self.errors == "strict"):
                    return run_on_records(self.op_name, block, self._decode_records)
                try:
                    col = pc.cast(col, pa.large_string() if pa.types.is_large_binary(col.type)
                                  else pa.string())
                except pa.ArrowInvalid as e:
                    raise ValueError(f"decode_text: field {name!r} is not valid UTF-8: {e}") from e
            elif not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
                if pa.types.is_nested(col.type):
                    return run_on_records(self.op_name, block, self._decode_records)
                col = pc.cast(col, pa.string())
            if self.normalize_newlines:
                col = pc.replace_substring(col, "\r\n", "\n")
                col = pc.replace_substring(col, "\r", "\n")
            if self.lowercase:
                col = pc.utf8_lower(col)
            table = table.set_column(table.column_names.index(name), name, col)
        return block.with_table(table)
