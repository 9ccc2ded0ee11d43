"""Compilation: the operator chain becomes a plan of a worker stage and a serial stage.

The worker stage is the longest stateless prefix (fetch, decode, map, tokenize): a pure function
of each block, so it can run anywhere, in any number of processes. Everything from the first
stateful operator on (shuffle, mixture, packing, batch, user accumulators) runs per lane, in
order, in one place: that is what makes the stream independent of worker count.
"""

from __future__ import annotations

from dataclasses import dataclass

from zephon.ops.base import BaseOp


@dataclass
class Plan:
    worker_ops: list[BaseOp]
    serial_ops: list[BaseOp]
    has_batch: bool

    @property
    def ops(self) -> list[BaseOp]:
        return self.worker_ops + self.serial_ops


def compile_plan(ops: list[BaseOp]) -> Plan:
    split = len(ops)
    for i, op in enumerate(ops):
        if op.is_serial():
            split = i
            break
    has_batch = any(op.op_name == "batch" for op in ops)
    return Plan(list(ops[:split]), list(ops[split:]), has_batch)
