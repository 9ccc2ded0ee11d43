"""``zephon.ops.accumulators``: the accumulator classes under the reference library's module
path (they live in ``zephon.ops.base``), so operators written for it import unchanged."""

from zephon.ops.base import Accumulator, CountingAccumulator, PassthroughAccumulator, ReadyBatch

__all__ = ["Accumulator", "CountingAccumulator", "PassthroughAccumulator", "ReadyBatch"]
