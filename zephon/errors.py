"""The base of Zephon's own errors, and the checkpoint error every layer may raise.

They live here, below ``state`` and ``ops``, so the checkpoint code (``zephon.state``) can refuse
a document without importing the operators that sit above it. ``zephon.ops.errors`` hands them
on under their old path.
"""

from __future__ import annotations


class ZephonError(RuntimeError):
    """Base of errors raised by the engine on behalf of an operator."""


class CheckpointError(ZephonError, ValueError):
    """A checkpoint that is malformed, tampered with or incompatible with this pipeline.

    ``field`` is the path of the offending entry (``lanes[3].base.ops[2].held.chunk_offset[17]``).
    It is a ``ValueError`` and (through ``ZephonError``) a ``RuntimeError`` because restore used
    to raise both for the cases it already caught, and callers catch those.

    Args:
        field: The path of the offending entry ("" for the document as a whole).
        message: What is wrong with it.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"checkpoint {field}: {message}" if field else f"checkpoint: {message}")

    def __reduce__(self):
        return (CheckpointError, (self.field, self.message))
