"""Operator errors that name the operator and the record at fault."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from zephon.block import Block
from zephon.errors import CheckpointError, ZephonError

__all__ = ["CheckpointError", "OperatorError", "ZephonError", "wrap_op_error"]


class OperatorError(ZephonError):
    """An operator failed; ``op_name`` and, where known, ``sample_id`` say where.

    Args:
        op_name: The operator's name.
        sample_id: ``(dataset_id, shard_id, sample_idx)`` of the record at fault, or None.
        message: What went wrong.
    """

    def __init__(self, op_name: str, sample_id: Any, message: str) -> None:
        self.op_name = op_name
        self.sample_id = sample_id
        self.message = message
        where = f" on sample {sample_id}" if sample_id is not None else ""
        super().__init__(f"operator {op_name}{where}: {message}")

    def __reduce__(self):  # rebuilt from its parts: the operator is named once, not again
        return (OperatorError, (self.op_name, self.sample_id, self.message))


@contextmanager
def wrap_op_error(op_name: str, blocks: Sequence[Block] | None = None) -> Iterator[None]:
    """Attach the operator's name to exceptions that do not already say where they came from."""
    try:
        yield
    except (ZephonError, KeyboardInterrupt, GeneratorExit):
        raise
    except Exception as e:
        if getattr(e, "dataset", None) is not None:  # data errors already say where
            raise
        sample = None
        if blocks:
            first = next((b for b in blocks if len(b)), None)
            if first is not None and len(first) == 1:
                sample = first.ids()[0]
        if isinstance(e, (ValueError, TypeError, KeyError)):
            # keep the type users catch, but say which operator raised it
            e.args = (f"[{op_name}] {e.args[0] if e.args else ''}",) + tuple(e.args[1:])
            raise
        raise OperatorError(op_name, sample, f"{type(e).__name__}: {e}") from e
