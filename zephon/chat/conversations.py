"""The conversations ``tokenize_chat`` reads, checked, and the records it cannot use.

A conversation is a list of messages; a message is an object with a ``role`` (one of
``ROLES``) and a text ``content``. An assistant message that calls tools may leave its content
out (or null). Keys whose value is null are dropped, as transformers drops them: a
Parquet/Arrow column of messages holds every key any message has, null where a message lacks
it. Reasoning under ``thinking`` / ``reasoning`` is also given as ``reasoning_content`` (and the
reverse), the names templates read. Anything else is a bad record, reported with its dataset,
shard and row (``bad_conversation``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from zephon.block import Block, record_location
from zephon.io.errors import DataError

ROLES = ("system", "developer", "user", "assistant", "tool", "function", "ipython")
_ROLE_SET = frozenset(ROLES)
_REASONING = ("reasoning_content", "thinking", "reasoning")
_REASONING_SET = frozenset(_REASONING)
ABSENT = object()


def column_values(block: Block, path: str) -> list:
    """The value at a dot-separated ``path`` of every record (``ABSENT`` where it is missing)."""
    parts = path.split(".")
    if block.columnar:
        table = block.payload
        if parts[0] not in table.column_names:
            return [ABSENT] * len(block)
        values = table.column(parts[0]).to_pylist()
        sparse = parts[0] in block.sparse  # a null there means the record had no such key
        values = [ABSENT if v is None and sparse else v for v in values]
        return values if len(parts) == 1 else [_walk(v, parts[1:]) for v in values]
    return [_walk(p, parts) for p in block.payload_list()]


def _walk(value: Any, parts: list[str]) -> Any:
    for p in parts:
        if not isinstance(value, dict) or p not in value:
            return ABSENT
        value = value[p]
    return value


def _kind(value: Any) -> str:
    return type(value).__name__


def checked(conversation: Any, field: str) -> tuple[list[dict] | None, str]:
    """(messages ready for a template, "") or (None, what is wrong with the conversation)."""
    if conversation is ABSENT:
        return None, f"field {field!r} is missing"
    if conversation is None:
        return None, f"field {field!r} is null"
    if isinstance(conversation, str):
        return None, f"field {field!r} holds a string, not a list of messages"
    if not isinstance(conversation, (list, tuple)):
        return None, f"field {field!r} holds a {_kind(conversation)}, not a list of messages"
    if not conversation:
        return None, f"field {field!r} holds no messages"
    out = []
    for i, message in enumerate(conversation):
        if not isinstance(message, dict):
            return None, f"message {i} is a {_kind(message)}, not an object with role and content"
        if any(v is None for v in message.values()):  # copied only when there are nulls
            message = {k: v for k, v in message.items() if v is not None}
        role = message.get("role")
        if role is None:
            return None, f"message {i} has no role"
        if not isinstance(role, str) or role not in _ROLE_SET:
            return None, f"message {i} has an unknown role {role!r} (known: {', '.join(ROLES)})"
        content = message.get("content", ABSENT)
        if content is ABSENT:
            if not (role == "assistant" and message.get("tool_calls")):
                return None, f"message {i} ({role}) has no content"
        elif not isinstance(content, str):
            return None, (f"message {i} ({role}) holds {_kind(content)} content, not text "
                          "(join multi-part content into one string with a map_transform)")
        reasoning = None if _REASONING_SET.isdisjoint(message) else \
            next((message[k] for k in _REASONING if k in message), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out, ""


def checked_tools(value: Any, field: str) -> tuple[Any, str]:
    """A record's tool schemas: None (no tools), a list of objects, or a JSON text of one."""
    if value is ABSENT or value is None:
        return None, ""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except ValueError:
            return None, f"field {field!r} holds text that is not JSON"
        if value is None:
            return None, ""
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, dict) for t in value):
        return None, f"field {field!r} must hold a list of tool schemas (objects)"
    return list(value) or None, ""


def bad_conversation(block: Block, problems: list[str], datasets: list | None, op: str,
                     fix: str) -> DataError:
    """The error for the first bad record of a block (``problems``: "" where a record is
    fine), naming dataset, shard and row."""
    bad = [i for i, p in enumerate(problems) if p]
    i = bad[0]
    name, shard, row = record_location(block, i, datasets)
    more = f"; {len(bad) - 1} more bad records in this block" if len(bad) > 1 else ""
    m = block.meta
    sample = (int(m["dataset_id"][i]), int(m["shard_id"][i]), int(m["sample_idx"][i]))
    return DataError(f"{op}: {problems[i]} (sample {sample}; {fix}){more}", dataset=name,
                     shard=shard, row=row)


def flags(problems: list[str]) -> np.ndarray:
    return np.fromiter((bool(p) for p in problems), dtype=bool, count=len(problems))
