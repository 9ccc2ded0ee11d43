"""Operator API: the classes built-in and user operators are made of."""

from zephon.ops.base import (
    Accumulator,
    BaseOp,
    CountingAccumulator,
    LaneAccumulator,
    MissingFieldMode,
    OpContext,
    OpTraits,
    PackingAlgorithm,
    PassthroughAccumulator,
    ReadyBatch,
    SpanSource,
    SpecialTokensMode,
    StageInfo,
)
from zephon.ops.errors import OperatorError, ZephonError

__all__ = [
    "Accumulator", "BaseOp", "CountingAccumulator", "LaneAccumulator", "MissingFieldMode",
    "OpContext", "OpTraits", "OperatorError", "PackingAlgorithm", "PassthroughAccumulator",
    "ReadyBatch", "SpanSource", "SpecialTokensMode", "StageInfo", "ZephonError",
]
