"""Records that leave a pipeline without being delivered whole: counted and said.

The rule of the project: every record that enters a pipeline is delivered, held in a buffer a
checkpoint names, or counted here under a reason the user chose (a drop, a skip, a truncation).
An operator that removes records or tokens calls ``count(op, reason, dataset_ids, tokens)``
with the dataset of every record concerned (vectorised: one call per block, never per record).

Counts are kept per process (``LOCAL``) and travel to the training process with the operator
counters (``metrics.Registry.take_delta``); there ``Ledger`` adds them up, warns once per
operator and reason the first time something is counted, and renders them in
``metrics_snapshot()["losses"]``.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

import numpy as np

log = logging.getLogger("zephon")

# reason -> what it means, for messages (operators may count other reasons; these are ours)
REASONS = {
    "oversized": "longer than the operator's max_length",
    "truncated": "cut to max_length (the tokens past it are counted)",
    "bad_record": "skipped as a bad record (on_bad_record='skip')",
    "filtered": "removed by a filter (a map_transform or map_batch returning None, filter(), "
                "or an operator that emitted fewer records than it took in)",
    "not_emitted": "taken in by a stateful operator that never emitted them",
    "empty": "had no tokens",
    "short_batch": "the last, short batch of a lane, dropped by batch(drop_last=True)",
    "discarded_tokens": "tokens left over at the end of a stream that could not fill a row",
    "no_answer": "conversations without an answered user query (expand_chat)",
    "unanswered_turns": "kept, with trailing user turns that had no answer cut off (expand_chat)",
    "off_target": "surplus that strict ensure_mixture (max_buffer_size=None) could not place",
}


class Losses:
    """(operator, reason, dataset id) -> [records, tokens], for one process."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, int], list[int]] = {}

    def count(self, op: str, reason: str, dataset_ids: Any, tokens: Any = None) -> None:
        """``dataset_ids``: one entry per record concerned; ``tokens``: the tokens each lost
        (None: none counted). A truncation counts the record and the tokens cut off."""
        ids = np.asarray(dataset_ids, dtype=np.int64).reshape(-1)
        if not len(ids):
            return
        n = int(ids.max()) + 1
        recs = np.bincount(ids, minlength=n)
        toks = (np.bincount(ids, weights=np.asarray(tokens, dtype=np.float64).reshape(-1),
                            minlength=n) if tokens is not None else np.zeros(n))
        for d in np.flatnonzero(recs):
            c = self.counts.setdefault((op, reason, int(d)), [0, 0])
            c[0] += int(recs[d])
            c[1] += int(round(toks[d]))

    def count_records(self, op: str, reason: str, per_dataset: np.ndarray) -> None:
        """``per_dataset[d]`` records of dataset ``d`` lost (no tokens counted)."""
        for d in np.flatnonzero(per_dataset > 0):
            c = self.counts.setdefault((op, reason, int(d)), [0, 0])
            c[0] += int(per_dataset[d])

    def count_tokens(self, op: str, reason: str, dataset_ids: Any, tokens: Any) -> None:
        """Tokens lost without losing their records (e.g. a packer's leftover at the end):
        the records are not counted, only the tokens."""
        ids = np.asarray(dataset_ids, dtype=np.int64).reshape(-1)
        if not len(ids):
            return
        toks = np.bincount(ids, weights=np.asarray(tokens, dtype=np.float64).reshape(-1))
        for d in np.flatnonzero(toks):
            c = self.counts.setdefault((op, reason, int(d)), [0, 0])
            c[1] += int(round(toks[d]))

    def take_delta(self) -> list[tuple[str, str, int, int, int]]:
        out = [(op, reason, d, r, t) for (op, reason, d), (r, t) in self.counts.items()]
        self.counts = {}
        return out

    def merge(self, delta: list) -> None:
        for op, reason, d, r, t in delta:
            c = self.counts.setdefault((op, reason, int(d)), [0, 0])
            c[0] += int(r)
            c[1] += int(t)


LOCAL = Losses()
MIN_DRAWN_FOR_SHARE = 1000  # records drawn before a filtered share is judged mid-stream


def count(op: str, reason: str, dataset_ids: Any, tokens: Any = None) -> None:
    LOCAL.count(op, reason, dataset_ids, tokens)


def count_tokens(op: str, reason: str, dataset_ids: Any, tokens: Any) -> None:
    LOCAL.count_tokens(op, reason, dataset_ids, tokens)


def records_by_dataset(blocks: Any) -> np.ndarray:
    """Records per dataset id in ``blocks`` (a block, a list of them, or None): a packed row
    counts the documents that start in it (``comp_samples``), any other row one record of its
    dataset."""
    if blocks is None:
        return np.zeros(0, dtype=np.int64)
    if not isinstance(blocks, (list, tuple)):
        blocks = [blocks]
    total = np.zeros(0, dtype=np.int64)
    for b in blocks:
        if b is None or not len(b):
            continue
        comp = b.meta.get("comp_samples")
        if comp is not None:
            here = np.asarray(comp, dtype=np.int64).sum(axis=0)
        else:
            here = np.bincount(np.asarray(b.meta["dataset_id"], dtype=np.int64))
        if len(here) > len(total):
            here[:len(total)] += total
            total = here
        else:
            total[:len(here)] += here
    return total


def missing(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Per dataset, the records of ``before`` that ``after`` lacks (never negative: records an
    operator made more of are no loss)."""
    n = max(len(before), len(after))
    lost = np.zeros(n, dtype=np.int64)
    lost[:len(before)] += before
    lost[:len(after)] -= after
    np.maximum(lost, 0, out=lost)
    return lost


def count_removed(op: str, before: Any, after: Any, reason: str = "filtered") -> None:
    """The engine's check on an operator that does not keep its own count
    (``OpTraits.keeps_count``): the records of ``before`` missing from ``after``, by dataset."""
    lost = missing(records_by_dataset(before), records_by_dataset(after))
    if lost.any():
        LOCAL.count_records(op, reason, lost)


class EmittedCheck:
    """Records a stateful operator took in and never emitted, counted by dataset each time its
    buffer is empty (then in - out, by dataset, is exact) and at the end of the stream."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.taken = np.zeros(0, dtype=np.int64)
        self.given = np.zeros(0, dtype=np.int64)
        self.counted = np.zeros(0, dtype=np.int64)

    @staticmethod
    def _add(total: np.ndarray, more: np.ndarray) -> np.ndarray:
        if len(more) > len(total):
            more = more.copy()
            more[:len(total)] += total
            return more
        total[:len(more)] += more
        return total

    def push(self, block: Any, out: Any, held: int) -> None:
        self.taken = self._add(self.taken, records_by_dataset(block))
        self.given = self._add(self.given, records_by_dataset(out))
        if held == 0:
            self.settle()

    def settle(self) -> None:
        lost = missing(missing(self.taken, self.given), self.counted)
        if lost.any():
            LOCAL.count_records(self.op, "not_emitted", lost)
            self.counted = self._add(self.counted, lost)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside zephon (the user's
    loop), however deep in the engine it is raised."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


class Ledger:
    """The training process's view: every process's counts, named by dataset, and said."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.losses = Losses()
        self.warned: set[tuple[str, str]] = set()
        self.said: set[str] = set()

    def merge(self, delta: list) -> None:
        if not delta:
            return
        self.losses.merge(delta)
        for op, reason, *_ in delta:
            if (op, reason) not in self.warned:
                self.warned.add((op, reason))
                warnings.warn(f"zephon: {self.describe(op, reason)}", RuntimeWarning,
                              stacklevel=user_stacklevel())

    def records(self, reason: str | None = None) -> int:
        """Records counted (under ``reason``, or all)."""
        return sum(r for (_, why, _), (r, _) in self.losses.counts.items()
                   if reason is None or why == reason)

    def check_filtered(self, delivered: int, warn_ratio: float | None,
                       raise_ratio: float | None, final: bool = False) -> None:
        """Warn (once) or raise when filters removed more than a share of the records drawn
        (delivered + counted); before the end of the stream, only once 1,000 were drawn."""
        filtered = self.records("filtered")
        if not filtered:
            return
        drawn = delivered + self.records()
        if drawn <= 0 or (drawn < MIN_DRAWN_FOR_SHARE and not final):
            return
        share = filtered / drawn
        said = (f"filters removed {filtered:,} of the {drawn:,} records drawn so far "
                f"({share:.1%})")
        if raise_ratio is not None and share > raise_ratio:
            from zephon.errors import DataError

            raise DataError(f"zephon: {said}, more than filter_raise_ratio={raise_ratio:g}; by "
                            f"operator and dataset: {self.describe_reason('filtered')}")
        if warn_ratio is not None and share > warn_ratio and "filter_share" not in self.said:
            self.said.add("filter_share")
            warnings.warn(f"zephon: {said}, more than filter_warn_ratio={warn_ratio:g} "
                          f"(options(filter_warn_ratio=...) moves the threshold; "
                          f"{self.describe_reason('filtered')})", RuntimeWarning,
                          stacklevel=user_stacklevel())

    def describe_reason(self, reason: str) -> str:
        return "; ".join(self.describe(op, why, final=True)
                         for op, why in sorted({(o, r) for (o, r, _) in self.losses.counts})
                         if why == reason)

    def _name(self, d: int) -> str:
        return self.names[d] if 0 <= d < len(self.names) else f"dataset {d}"

    def describe(self, op: str, reason: str, final: bool = False) -> str:
        parts = []
        for (o, r, d), (recs, toks) in sorted(self.losses.counts.items()):
            if (o, r) == (op, reason):
                what = _count(recs, "record") if recs else ""
                if toks:
                    what += (", " if what else "") + _count(toks, "token")
                parts.append(f"{self._name(d)}: {what}")
        meaning = REASONS.get(reason, reason)
        if final:
            return f"{op} '{reason}' ({meaning}): " + "; ".join(parts)
        return (f"operator {op} counted records or tokens as '{reason}' ({meaning}) so far — "
                + "; ".join(parts) + ". metrics_snapshot()['losses'] keeps the running counts")

    def snapshot(self) -> dict[str, Any]:
        """{dataset: {reason: {"records", "tokens", "operators"}}} and totals."""
        per: dict[str, dict[str, dict[str, Any]]] = {}
        total_r = total_t = 0
        for (op, reason, d), (recs, toks) in sorted(self.losses.counts.items()):
            entry = per.setdefault(self._name(d), {}).setdefault(
                reason, {"records": 0, "tokens": 0, "operators": []})
            entry["records"] += recs
            entry["tokens"] += toks
            if op not in entry["operators"]:
                entry["operators"].append(op)
            total_r += recs
            total_t += toks
        return {"by_dataset": per, "records": total_r, "tokens": total_t}

    def summary(self, passes: dict[int, float] | None = None) -> str | None:
        """One line for the end of a pass, None when nothing was counted. ``passes``: how many
        times over each dataset was read (records drawn / its records), where known: a dataset
        read 34 times skips its one bad line 34 times, and the line says why the count is 34."""
        if not self.losses.counts:
            return None
        line = "zephon: not delivered whole in this run — " + " | ".join(
            self.describe(op, reason, final=True) for op, reason in sorted(self.warned))
        lossy = sorted({d for (_, _, d) in self.losses.counts})
        again = [f"{self._name(d)} {passes[d]:.1f} times" for d in lossy
                 if passes and passes.get(d, 0.0) >= 1.05]
        if again:
            line += (" (read over again: " + ", ".join(again) + "; what a pass loses is "
                     "counted in every pass)")
        return line
