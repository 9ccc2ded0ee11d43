"""Operator API: the classes built-in and user operators are made of."""

from zephon.ops.accumulators import (
    Accumulator,
    CountingAccumulator,
    PassthroughAccumulator,
    ReadyBatch,
)
from zephon.ops.base import BaseOp, LaneAccumulator, OpContext, StageInfo
from zephon.ops.children import pack_meta, spawn_child, tombstone_meta
from zephon.ops.errors import CheckpointError, OperatorError, ZephonError
from zephon.ops.map_transform import UserFunctionError
from zephon.ops.modes import MissingFieldMode, PackingAlgorithm, SpanSource, SpecialTokensMode
from zephon.ops.pack_groups import DomainGroups
from zephon.ops.traits import OpTraits

__all__ = [
    "Accumulator", "BaseOp", "CheckpointError", "CountingAccumulator", "DomainGroups", "LaneAccumulator",
    "MissingFieldMode", "OpContext", "OpTraits", "OperatorError", "PackingAlgorithm",
    "PassthroughAccumulator", "ReadyBatch", "SpanSource", "SpecialTokensMode", "StageInfo",
    "UserFunctionError", "ZephonError", "pack_meta", "spawn_child", "tombstone_meta",
]
