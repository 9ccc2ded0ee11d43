"""Compilation: the operator chain becomes a plan of a worker stage and a serial stage.

The worker stage is the longest stateless prefix (fetch, decode, map, tokenize): a pure function
of each block, so it can run anywhere, in any number of processes. Everything from the first
stateful operator on (shuffle, mixture, packing, batch, user accumulators) runs per lane, in
order, in one place: that is what makes the stream independent of worker count.

Everything the plan knows of an operator comes from its ``OpTraits``.
"""

from __future__ import annotations

from dataclasses import dataclass

from zephon.ops.base import Operator, StatefulOp, StatelessOp


@dataclass
class Plan:
    worker_ops: list[Operator]
    serial_ops: list[Operator]
    has_batch: bool
    # per serial operator: whether a later serial operator may hold the rows it releases, so
    # rows it builds need a recipe (``OpTraits.combines_records``); handed to its lanes
    recipes_needed: list[bool]

    @property
    def ops(self) -> list[Operator]:
        return self.worker_ops + self.serial_ops


def compile_plan(ops: list[Operator]) -> Plan:
    traits = [op.traits() for op in ops]
    for op, t in zip(ops, traits):
        face = StatefulOp if t.requires_serial_state else StatelessOp
        if not isinstance(op, face):
            raise TypeError(f"operator {op.op_name}: its traits say it is "
                            f"{'stateful' if t.requires_serial_state else 'stateless'}, so it "
                            f"must be a {face.__name__}")
    split = next((i for i, t in enumerate(traits) if t.requires_serial_state), len(ops))
    serial = traits[split:]
    needed = [any(t.requires_serial_state for t in serial[i + 1:]) for i in range(len(serial))]
    has_batch = any(t.forms_batches for t in traits)
    return Plan(list(ops[:split]), list(ops[split:]), has_batch, needed)
