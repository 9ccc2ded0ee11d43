"""map_transform / map_batch: user functions over dict payloads or SampleBatch objects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from zephon.block import Block, carry_hidden
from zephon.ops.base import OpTraits, StatelessOp
from zephon.ops.errors import OperatorError
from zephon.state.fingerprint import settings
from zephon.types import SampleBatch


class MapTransformOp(StatelessOp):
    """``fn(payload) -> payload | None``; None drops the record. The user's payloads are copies,
    so a function that mutates its argument never touches the dataset's own objects."""

    def __init__(self, fn: Callable[[Any], Any], *, drop_none: bool = True,
                 parallelism: int | None = None, name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError("map_transform needs a callable")
        self.fn = fn
        self.drop_none = drop_none
        self.parallelism = parallelism
        self.name = name or f"map_transform[{getattr(fn, '__name__', 'fn')}]"

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, parallelism=self.parallelism or 1,
                        record_by_record=True)

    def fingerprint(self) -> dict:
        return settings(self, ("fn", "drop_none", "parallelism", "name"))

    def process_block(self, block: Block) -> Block:
        payloads = block.payload_list()
        fn = self.fn
        results = []
        keep = np.ones(len(payloads), dtype=bool)
        ids = None
        for i, p in enumerate(payloads):
            try:
                q = fn(p)
            except Exception as e:
                ids = ids or block.ids()
                raise UserFunctionError(self.op_name, ids[i], e) from e
            if q is None and self.drop_none:
                keep[i] = False
            else:
                results.append(q)
        base = block if keep.all() else block.filter(keep)
        return carry_hidden(base, base.with_payloads(results))


class FilterOp(StatelessOp):
    """``predicate(payload) -> bool``: records for which it is false are removed, and counted
    by the engine under ``"filtered"`` (``metrics_snapshot()["losses"]``)."""

    def __init__(self, predicate: Callable[[Any], Any], *, parallelism: int | None = None,
                 name: str | None = None) -> None:
        if not callable(predicate):
            raise TypeError("filter needs a callable")
        self.fn = predicate
        self.parallelism = parallelism
        self.name = name or f"filter[{getattr(predicate, '__name__', 'fn')}]"

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, parallelism=self.parallelism or 1,
                        record_by_record=True)

    def fingerprint(self) -> dict:
        return settings(self, ("fn", "parallelism", "name"))

    def process_block(self, block: Block) -> Block:
        payloads = block.payload_list()
        fn = self.fn
        keep = np.ones(len(payloads), dtype=bool)
        for i, p in enumerate(payloads):
            try:
                keep[i] = bool(fn(p))
            except Exception as e:
                raise UserFunctionError(self.op_name, block.ids()[i], e) from e
        return block if keep.all() else block.filter(keep)


class MapBatchOp(StatelessOp):
    """``fn(SampleBatch) -> SampleBatch | None`` after ``batch``; None drops the batch."""

    def __init__(self, fn: Callable[[SampleBatch], Any], *, drop_none: bool = True,
                 parallelism: int | None = None) -> None:
        self.fn = fn
        self.drop_none = drop_none
        self.parallelism = parallelism
        self.name = f"map_batch[{getattr(fn, '__name__', 'fn')}]"

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, parallelism=self.parallelism or 1)

    def fingerprint(self) -> dict:
        return settings(self, ("fn", "drop_none", "parallelism", "name"))

    def process_block(self, block: Block) -> Block | None:
        try:
            out = self.fn(SampleBatch._from_block(block))
        except Exception as e:
            ids = block.ids()
            raise UserFunctionError(self.op_name, ids[0] if ids else None, e) from e
        if out is None:
            return None
        if not isinstance(out, SampleBatch):
            raise TypeError(f"{self.op_name}: return a SampleBatch or None, got {type(out).__name__}")
        b = out.block
        b.is_batch = True
        return b


class UserFunctionError(OperatorError):
    """An exception raised by user code, with the operator and the record that triggered it
    (a failing group is re-run one record at a time to find it). The original exception is
    ``cause``; ``__cause__`` is that exception in the process where it was raised, and the
    worker's traceback (text) when it crossed from a worker process.

    Args:
        op_name: The operator's name.
        sample_id: ``(dataset_id, shard_id, sample_idx)`` of the record at fault, or None.
        cause: The exception user code raised.
    """

    def __init__(self, op_name: str, sample_id: Any, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(op_name, sample_id, f"{type(cause).__name__}: {cause}")

    def __reduce__(self):
        return (UserFunctionError, (self.op_name, self.sample_id, self.cause))
