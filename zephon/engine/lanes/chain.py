"""The serial part of a plan for one lane: accumulators driven in order."""

from __future__ import annotations

from zephon import accounting
from zephon.block import Block
from zephon.engine.observe import metrics
from zephon.engine.plan.stages import Plan
from zephon.ops.base import OpContext
from zephon.ops.errors import wrap_op_error


class LaneChain:
    """Pushes a lane's blocks through the plan's serial stage; stateless operators there
    apply block by block. Each stateful one gets a lane accumulator, told by the plan whether
    a later operator may hold its rows (the ``"recipes_needed"`` service)."""

    def __init__(self, plan: Plan, lane_id: int, ctx: OpContext) -> None:
        self.ops = plan.serial_ops
        self.lane_id = lane_id
        self.stages = [op.new_lane(lane_id, ctx.with_services(recipes_needed=needed))
                       if op.traits().requires_serial_state else None
                       for op, needed in zip(self.ops, plan.recipes_needed)]
        # the engine's count of what an operator removes, where it keeps none itself
        self.checks = [None if op.traits().keeps_count else
                       accounting.EmittedCheck(op.op_name) if stage is not None else True
                       for op, stage in zip(self.ops, self.stages)]

    def push(self, block: Block) -> list[Block]:
        return self._run(0, [block])

    def finish(self) -> list[Block]:
        """End of stream: flush each stage in order, routing what it releases downstream."""
        out: list[Block] = []
        for i, stage in enumerate(self.stages):
            if stage is None:
                continue
            with wrap_op_error(self.ops[i].op_name):
                flushed = stage.flush()
            _count_out(self.ops[i].op_name, flushed)
            check = self.checks[i]
            if check is not None:  # the end of the stream: nothing is held any more
                check.given = check._add(check.given, accounting.records_by_dataset(flushed))
                check.settle()
            if flushed:
                out.extend(self._run(i + 1, flushed))
        return out

    def _run(self, start: int, blocks: list[Block]) -> list[Block]:
        for i in range(start, len(self.ops)):
            op, stage = self.ops[i], self.stages[i]
            nxt: list[Block] = []
            with wrap_op_error(op.op_name, blocks):
                for b in blocks:
                    t0 = metrics.now()
                    check = self.checks[i]
                    if stage is not None:
                        out = stage.push(b)
                        if check is not None:
                            check.push(b, out, stage.held())
                    else:
                        r = op.process_block(b)
                        out = [r] if r is not None and len(r) else []
                        if check is not None and (r is None or len(r) != len(b)):
                            accounting.count_removed(op.op_name, b, out)
                    metrics.LOCAL.record(op.op_name, b, None, metrics.now() - t0)
                    _count_out(op.op_name, out)
                    nxt.extend(out)
            blocks = nxt
            if not blocks:
                break
        return blocks

    def held_by_op(self) -> dict[str, int]:
        return {op.op_name: s.held() for op, s in zip(self.ops, self.stages) if s is not None}

    def get_state(self) -> list:
        """Each accumulator's state (None for stateless operators)."""
        return [s.get_state() if s is not None else None for s in self.stages]

    def held(self) -> int:
        return sum(s.held() for s in self.stages if s is not None)


def _count_out(name: str, blocks: list[Block]) -> None:
    """Records and bytes an operator released. Arrow's ``nbytes`` costs microseconds per call,
    as much as a whole batch's other bookkeeping; when one push releases many blocks (batch
    splitting a worker's block, a shuffle draining) their bytes are estimated from the largest
    block's bytes per row, so the cost stays one call per push."""
    s = metrics.LOCAL.ops.setdefault(name, metrics.OpStats())
    if not blocks:
        return
    rows = sum(len(b) for b in blocks)
    s.records_out += rows
    if len(blocks) == 1:
        s.bytes_out += metrics.block_bytes(blocks[0])
        return
    probe = max(blocks, key=len)
    if len(probe):
        s.bytes_out += metrics.block_bytes(probe) * rows // len(probe)
