"""Accumulator checks of the validation harness (see harness.py).

A custom accumulator decides which records ``process_many`` sees together; these probes feed it
the synthetic records and check the contract the engine relies on:

- ``ACC_MIXES_LANES``: a ready group holds records of two lanes;
- ``ACC_LOST_RECORDS`` / ``ACC_DUPLICATED_RECORDS``: push + flush must release every record
  exactly once;
- ``ACC_PENDING_DATA_MISMATCH``: ``has_pending_data`` must say whether records are held;
- ``ACC_STATE_AFTER_RESET`` / ``ACC_RESET_TOUCHED_OTHER_LANES``: ``flush(reset=True, lane_id=l)``
  must leave lane ``l`` as new and the other lanes alone;
- ``ACC_NONDETERMINISTIC``: the same pushes must give the same groups;
- ``ACC_NOT_RESTORABLE``: pushing back the records it holds into a fresh accumulator must
  recreate its state (that is how a checkpoint restores it);
- ``ACC_RAISES`` / ``ACC_FACTORY_FAILED``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from zephon.ops.add_op import UserOp
from zephon.ops.base import OpContext, StageInfo
from zephon.types import SampleBatch, SampleRecord


def ident(elem: Any) -> tuple:
    if isinstance(elem, SampleBatch):
        return ("batch", tuple(elem.ids))
    m = elem.meta
    return (m.lane_id, m.chunk_id, m.chunk_offset, tuple(m.lineage), m.sample_id)


def lane_of(elem: Any) -> int:
    if isinstance(elem, SampleBatch):
        lanes = elem.lane_ids
        return lanes[0] if lanes else -1
    return elem.meta.lane_id if isinstance(elem, SampleRecord) else -1


def _groups(res: Any) -> list[list]:
    if not isinstance(res, list):
        raise TypeError(f"push_many/flush returned {type(res).__name__}, not a list of groups")
    return [list(g[0] if isinstance(g, tuple) else g) for g in res]


def probe_accumulator(op: UserOp, lanes: dict[int, list], add: Callable[..., None],
                      fresh: Callable[[list], list]) -> None:
    if not op.traits().requires_serial_state:
        return
    ctx = OpContext(StageInfo(0, "validation", 0), runner="validation")
    try:
        op.new_accumulator(ctx)
    except Exception as e:
        add("error", "ACC_FACTORY_FAILED", f"the accumulator factory raised "
            f"{type(e).__name__}: {e}")
        return
    try:
        _probe(op, ctx, lanes, add, fresh)
    except Exception as e:
        add("error", "ACC_RAISES", f"the accumulator raised {type(e).__name__}: {e}")


def _probe(op: UserOp, ctx: OpContext, lanes: dict[int, list], add: Callable[..., None],
           fresh: Callable[[list], list]) -> None:
    order = sorted(lanes)
    width = max(len(v) for v in lanes.values())
    feed = [lanes[lane][i] for i in range(width) for lane in order if i < len(lanes[lane])]
    pushes = [feed[i:i + 5] for i in range(0, len(feed), 5)]  # chunks that mix lanes
    lane_by = {ident(e): lane_of(e) for e in feed}

    def run(check: bool) -> list[list[tuple]]:
        acc = op.new_accumulator(ctx)
        pushed: Counter = Counter()
        out: list[list[tuple]] = []
        reported = False
        for chunk in pushes:
            elems = fresh(chunk)
            pushed.update(lane_of(e) for e in elems)
            out.extend([ident(e) for e in g] for g in _groups(acc.push_many(elems)))
            if check and not reported:
                held = pushed - Counter(lane_by.get(k, -1) for g in out for k in g)
                for lane in order:
                    if bool(acc.has_pending_data(lane)) != (held[lane] > 0):
                        add("error", "ACC_PENDING_DATA_MISMATCH", f"has_pending_data(lane_id="
                            f"{lane}) returned {acc.has_pending_data(lane)} while it held "
                            f"{held[lane]} record(s)")
                        reported = True
                        break
        out.extend([ident(e) for e in g] for g in _groups(acc.flush()))
        if check and acc.has_pending_data():
            add("error", "ACC_PENDING_DATA_MISMATCH", "has_pending_data() is still True after "
                "flush() released everything")
        return out

    groups = run(check=True)
    for g in groups:
        if len({lane_by.get(k, -1) for k in g}) > 1:
            add("error", "ACC_MIXES_LANES", "a ready group mixes records of several lanes")
            break
    given = Counter(ident(e) for e in feed)
    released = Counter(k for g in groups for k in g)
    if given - released:
        add("error", "ACC_LOST_RECORDS", f"{sum((given - released).values())} of {len(feed)} "
            "records pushed never came back from push_many/flush")
    if released - given:
        add("error", "ACC_DUPLICATED_RECORDS", "push_many/flush released records more often "
            "than they were pushed (or released records it was never given)")
    if run(check=False) != groups:
        add("error", "ACC_NONDETERMINISTIC", "the same pushes gave different groups")
    _probe_reset(op, ctx, lanes, add, fresh)
    _probe_restore(op, ctx, lanes[order[0]], add, fresh)


def _probe_reset(op: UserOp, ctx: OpContext, lanes: dict[int, list], add: Callable[..., None],
                 fresh: Callable[[list], list]) -> None:
    order = sorted(lanes)
    if len(order) < 2:
        return
    a, b = order[0], order[1]
    acc = op.new_accumulator(ctx)
    acc.push_many(fresh(lanes[a][:3] + lanes[b][:3]))
    flushed = _groups(acc.flush(reset=True, lane_id=a))
    if any(lane_of(e) != a for g in flushed for e in g):
        add("error", "ACC_RESET_TOUCHED_OTHER_LANES", f"flush(reset=True, lane_id={a}) released "
            "records of another lane")
        return
    if acc.has_pending_data(a):
        add("error", "ACC_STATE_AFTER_RESET", f"has_pending_data(lane_id={a}) is True after "
            f"flush(reset=True, lane_id={a})")
        return
    again = [[ident(e) for e in g] for g in _groups(acc.push_many(fresh(lanes[a])))]
    new = [[ident(e) for e in g] for g in _groups(op.new_accumulator(ctx).push_many(
        fresh(lanes[a])))]
    if again != new:
        add("error", "ACC_STATE_AFTER_RESET", f"after flush(reset=True, lane_id={a}) the lane "
            "does not behave like a new one: state was left behind")


def _longer(seq: list, copies: int = 3) -> list:
    """The lane's records repeated under new offsets: long enough for hidden state to show."""
    if not seq or not all(isinstance(e, SampleRecord) for e in seq):
        return seq
    n = max(e.meta.chunk_offset for e in seq) + 1
    out = []
    for c in range(copies):
        for e in seq:
            m = e.meta
            sid = (m.sample_id[0], m.sample_id[1], m.sample_id[2] + c * n)
            out.append(SampleRecord(replace(m, sample_id=sid, chunk_offset=m.chunk_offset + c * n),
                                    e.payload))
    return out


def _probe_restore(op: UserOp, ctx: OpContext, seq: list, add: Callable[..., None],
                   fresh: Callable[[list], list]) -> None:
    """A checkpoint restores an accumulator by pushing back the records it held."""
    def tail(acc: Any, rest: list) -> list[list[tuple]]:
        out = []
        for e in fresh(rest):
            out.extend([ident(x) for x in g] for g in _groups(acc.push_many([e])))
        out.extend([ident(x) for x in g] for g in _groups(acc.flush()))
        return out

    seq = _longer(seq)
    for k in range(1, len(seq)):
        acc = op.new_accumulator(ctx)
        released: set = set()
        for e in fresh(seq[:k]):
            released.update(ident(x) for g in _groups(acc.push_many([e])) for x in g)
        held = [e for e in seq[:k] if ident(e) not in released]
        expected = tail(acc, seq[k:])
        again = op.new_accumulator(ctx)
        early = _groups(again.push_many(fresh(held))) if held else []
        if early or tail(again, seq[k:]) != expected:
            add("error", "ACC_NOT_RESTORABLE", "a fresh accumulator given back the records this "
                "one held does not continue the same way; checkpoints restore accumulators that "
                "way, so its grouping must depend only on the records it holds")
            return
