"""expand_chat: one record per answered user query of a conversation.

Each ``user`` message opens query 0, 1, ...; an ``assistant`` message after it answers it (empty
content counts). The record of query q keeps the conversation from its start up to the next
``user`` message (or the end): all earlier history, tool exchanges and every assistant turn of
q. ``[S, U1, A1, T, A2, U2, A3, U3]`` gives ``[S..A2]`` and ``[S..A3]``; U3 has no answer.

- One answered query: the record goes on with its identity unchanged, trailing unanswered
  turns cut off. Several: children whose lineage index is the query number (gaps allowed), so
  checkpoints name each exactly. None: the record is dropped.
- Drops and trimmed records are counted (``metrics_snapshot()["losses"]``: ``no_answer``,
  ``unanswered_turns``).
- A conversation that is missing, not a list, or has a message without a non-empty string
  ``role`` raises ``DataError`` naming the dataset, shard and row.

Conversations read as Arrow ``list<struct<role, ...>>`` columns (JSONL, Parquet) are expanded
with array operations; other payloads take a per-record path with the same results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephon import accounting
from zephon.block import Block, add_lineage, carry_hidden
from zephon.io.errors import DataError
from zephon.ops.base import OpTraits, StatelessOp


class ConversationTypeError(DataError, TypeError):
    """The conversation field holds something other than a list of messages."""


class ExpandChatOp(StatelessOp):
    name = "expand_chat"

    def __init__(self, datasets: Sequence[Any], *, field: str = "messages",
                 parallelism: int | None = None) -> None:
        path = str(field).split(".")
        if not field or any(not seg for seg in path):
            raise ValueError(f"expand_chat: field {field!r} has an empty path segment")
        if parallelism is not None and parallelism < 1:
            raise ValueError(f"expand_chat: parallelism must be >= 1, got {parallelism}")
        self.field = str(field)
        self.parallelism = parallelism
        self.datasets = list(datasets)  # to name the shard of a bad record
        self._path = path

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, indexable=False,
                        parallelism=self.parallelism or 4, calibration_replayable=True,
                        keeps_count=True)

    def fingerprint(self) -> dict:
        return {"field": self.field, "parallelism": self.parallelism}

    def process_block(self, block: Block) -> Block | None:
        if not len(block):
            return block
        conv = self._column(block) if block.columnar else None
        if conv is not None:
            offsets, is_user, is_asst = self._roles_columnar(block, conv)
        else:
            payloads = block.payload_list()
            lists = [self._messages(block, i, p) for i, p in enumerate(payloads)]
            offsets, is_user, is_asst = self._roles_python(block, lists)
        row, query, end = answered_prefixes(offsets, is_user, is_asst)
        self._count(block, offsets, row, end)
        if not len(row):
            return None
        per_row = np.bincount(row, minlength=len(block))
        out = block.take(row)
        if (per_row > 1).any():  # children: lineage index = query number; single rows keep theirs
            child = np.where(per_row[row] > 1, query, -1).astype(np.int32)
            out = Block(out.meta, out.payload, add_lineage(out.lineage, child), out.sparse)
        if conv is not None:
            table = _set_path(out.payload, self._path, _prefix_lists(conv, offsets, row, end))
            return carry_hidden(out, out.with_table(table))
        new = [_with_path(payloads[r], self._path, lists[r][: e - offsets[r]])
               for r, e in zip(row.tolist(), end.tolist())]
        return carry_hidden(out, out.with_payloads(new))

    # -- reading the conversations ---------------------------------------------------------------

    def _error(self, block: Block, i: int, message: str, cls: type = DataError) -> DataError:
        d, s, r = (int(block.meta[k][i]) for k in ("dataset_id", "shard_id", "sample_idx"))
        ds = self.datasets[d] if 0 <= d < len(self.datasets) else None
        name = getattr(ds, "name", str(d))
        try:
            shard = ds.shard_name(s) if ds is not None else str(s)
        except Exception:  # a dataset kind without shard names: its id still says where
            shard = str(s)
        return cls(f"expand_chat: {message}", dataset=name, shard=shard, row=r + 1)

    def _column(self, block: Block) -> pa.ListArray | None:
        """The conversations as one Arrow list<struct> array, or None (per-record path)."""
        table = block.payload
        if self._path[0] not in table.column_names:
            raise self._error(block, 0, f"field {self.field!r} is missing")
        arr = table.column(self._path[0]).combine_chunks()
        for seg in self._path[1:]:
            if not pa.types.is_struct(arr.type) or arr.type.get_field_index(seg) < 0:
                raise self._error(block, 0, f"field {self.field!r} is missing")
            arr = pc.struct_field(arr, seg)
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            raise self._error(block, _first_valid(arr), f"field {self.field!r} holds "
                              f"{arr.type}, not a list of messages", ConversationTypeError)
        if arr.null_count:
            raise self._error(block, int(np.flatnonzero(_nulls(arr))[0]),
                              f"field {self.field!r} is missing")
        vt = arr.type.value_type
        if not pa.types.is_struct(vt) or vt.get_field_index("role") < 0:
            return None  # messages that are not uniform records: checked one by one
        return arr

    def _roles_columnar(self, block: Block, conv: pa.ListArray) -> tuple:
        offsets = np.asarray(conv.offsets, dtype=np.int64)
        values = conv.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        offsets = offsets - offsets[0]
        role = values.field("role")
        if not (pa.types.is_string(role.type) or pa.types.is_large_string(role.type)):
            bad = np.arange(len(values))
        else:
            bad = np.flatnonzero(_nulls(role) | _nulls(values)
                                 | (pc.fill_null(pc.utf8_length(role), 0).to_numpy() == 0))
        if len(bad):
            row = int(np.searchsorted(offsets, bad[0], side="right") - 1)
            raise self._error(block, row, f"message {int(bad[0] - offsets[row])} has no "
                              "non-empty string role")
        return (offsets, pc.equal(role, "user").to_numpy(zero_copy_only=False),
                pc.equal(role, "assistant").to_numpy(zero_copy_only=False))

    def _messages(self, block: Block, i: int, payload: Any) -> list:
        value: Any = payload
        for seg in self._path:
            if not isinstance(value, Mapping) or seg not in value or value[seg] is None:
                raise self._error(block, i, f"field {self.field!r} is missing")
            value = value[seg]
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
            raise self._error(block, i, f"field {self.field!r} holds {type(value).__name__}, "
                              "not a list of messages", ConversationTypeError)
        return list(value)

    def _roles_python(self, block: Block, lists: list[list]) -> tuple:
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(m) for m in lists])
        roles = []
        for i, msgs in enumerate(lists):
            for j, m in enumerate(msgs):
                role = m.get("role") if isinstance(m, Mapping) else None
                if not isinstance(role, str) or not role:
                    raise self._error(block, i, f"message {j} has no non-empty string role")
                roles.append(role)
        roles_arr = np.asarray(roles, dtype=object)
        return offsets, roles_arr == "user", roles_arr == "assistant"

    def _count(self, block: Block, offsets: np.ndarray, row: np.ndarray, end: np.ndarray) -> None:
        ds = block.meta["dataset_id"]
        answered = np.zeros(len(block), dtype=bool)
        answered[row] = True
        accounting.count(self.op_name, "no_answer", ds[~answered])
        last_end = np.zeros(len(block), dtype=np.int64)
        np.maximum.at(last_end, row, end)
        trimmed = answered & (last_end < offsets[1:])
        accounting.count(self.op_name, "unanswered_turns", ds[trimmed])


def answered_prefixes(offsets: np.ndarray, is_user: np.ndarray, is_asst: np.ndarray) -> tuple:
    """(row, query, end) of every answered query, by row then query: conversation ``row``
    (messages ``offsets[row]:offsets[row + 1]`` of the flat role masks) answers query
    ``query``, whose record keeps messages up to ``end`` (exclusive, flat index)."""
    n = len(offsets) - 1
    total = int(offsets[-1])
    row_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    cu = np.concatenate(([0], np.cumsum(is_user, dtype=np.int64)))
    before = cu[offsets[:-1]]  # users before each conversation (index of its first user)
    in_row = cu[offsets[1:]] - before
    query = cu[1:] - before[row_of] - 1  # the query each message belongs to (-1: none yet)
    keys = np.unique(row_of[is_asst & (query >= 0)] * (total + 1) + query[is_asst & (query >= 0)])
    row, q = keys // (total + 1), keys % (total + 1)
    user_pos = np.flatnonzero(is_user)
    nxt = before[row] + q + 1  # flat index of the next user's position, if the row has one
    has_next = (q + 1) < in_row[row]
    end = np.where(has_next, user_pos[np.minimum(nxt, max(len(user_pos) - 1, 0))] if len(user_pos)
                   else 0, offsets[row + 1])
    return row, q, end.astype(np.int64)


def _nulls(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _first_valid(arr: pa.Array) -> int:
    ok = np.flatnonzero(~_nulls(arr))
    return int(ok[0]) if len(ok) else 0


def _prefix_lists(conv: pa.ListArray, offsets: np.ndarray, row: np.ndarray,
                  end: np.ndarray) -> pa.Array:
    """List array of the messages ``offsets[row]:end`` of each output."""
    first = int(np.asarray(conv.offsets)[0])
    values = conv.values.slice(first, int(offsets[-1]))
    start = offsets[row]
    lens = end - start
    new_off = np.concatenate(([0], np.cumsum(lens)))
    idx = np.repeat(start - new_off[:-1], lens) + np.arange(int(new_off[-1]), dtype=np.int64)
    taken = values.take(pa.array(idx))
    if pa.types.is_large_list(conv.type):
        return pa.LargeListArray.from_arrays(pa.array(new_off, pa.int64()), taken)
    return pa.ListArray.from_arrays(pa.array(new_off.astype(np.int32)), taken)


def _set_path(table: pa.Table, path: list[str], new: pa.Array) -> pa.Table:
    i = table.column_names.index(path[0])
    if len(path) == 1:
        return table.set_column(i, path[0], new)
    return table.set_column(i, path[0], _replace(table.column(i).combine_chunks(), path[1:], new))


def _replace(arr: pa.StructArray, path: list[str], new: pa.Array) -> pa.StructArray:
    names = [arr.type.field(k).name for k in range(arr.type.num_fields)]
    fields = [pc.struct_field(arr, n) for n in names]
    k = names.index(path[0])
    fields[k] = new if len(path) == 1 else _replace(fields[k], path[1:], new)
    return pa.StructArray.from_arrays(fields, names=names, mask=arr.is_null())


def _with_path(payload: Mapping, path: list[str], messages: list) -> dict:
    """A copy of ``payload`` (copied along ``path``) whose conversation is ``messages``."""
    out = dict(payload)
    if len(path) == 1:
        out[path[0]] = messages
    else:
        out[path[0]] = _with_path(payload[path[0]], path[1:], messages)
    return out
