"""Operator errors that name the operator and the record at fault."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from zephon.block import Block
from zephon.errors import CheckpointError, EngineError, OperatorError, ZephonError

__all__ = ["CheckpointError", "OperatorError", "ZephonError", "wrap_op_error"]


# errors that already say where they came from: passed on unchanged
SAYS_WHERE = (OperatorError, EngineError, CheckpointError)


@contextmanager
def wrap_op_error(op_name: str, blocks: Sequence[Block] | None = None) -> Iterator[None]:
    """Attach the operator's name to exceptions that do not already say where they came from."""
    try:
        yield
    except (*SAYS_WHERE, KeyboardInterrupt, GeneratorExit):
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
