"""The realised-mixture check: delivered shares against the target, said once when they stray.

Runs in the training process on what is actually handed to the caller (``Observer.delivered``),
so it sees every effect upstream: drops counted by operators, a dataset exhausted or repeating,
an ``ensure_mixture`` buffer that overflowed, token estimates that were off. Shares are taken
in the unit the target is in — tokens for a token mixture (a token-aware source, or
``ensure_mixture`` weighing by tokens), records otherwise — over tumbling windows of
``window`` units; a window whose share of some dataset is off by more than ``tolerance``
(absolute) gives one warning per run. The final, partial window is not judged (the end of a
stream drains buffers in whatever order is left). Per batch it costs one small vector add.

A token window is only as fine as the records in it: 1M tokens hold five or six books of 35k
tokens, so a dataset of long documents swings by several points from one window to the next
with nothing wrong. So a token window is stretched (up to ``MAX_STRETCH`` times) until it
should hold ``min_records`` records of every dataset that has delivered any (their mean
tokens per record so far tells), and a dataset is only called off target when its window
*and* the running mean of its windows (weight ``SMOOTHING`` on the newest) are both off: a
skew that stays (drops, an exhausted dataset, a full buffer) is said in its first window, a
swing of a few long records is not.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from zephon.ops.ensure_mixture import EnsureMixtureOp

DEFAULT_TOLERANCE = 0.05
DEFAULT_WINDOW = {"tokens": 1 << 20, "records": 10_000}
MIN_RECORDS = 50  # records of each dataset a token window should hold before it is judged
MAX_STRETCH = 16  # a token window grows to at most this many times ``window``
SMOOTHING = 0.5  # weight of the newest window in the running mean of window shares


class MixtureCheck:
    def __init__(self, names: Sequence[str], target: Mapping[int, float], unit: str,
                 tolerance: float, window: int, hints: Callable[[int, float, float], str],
                 min_records: int = MIN_RECORDS) -> None:
        if unit not in DEFAULT_WINDOW:
            raise ValueError(f"mixture unit must be 'tokens' or 'records', got {unit!r}")
        if tolerance < 0 or window < 1:
            raise ValueError("mixture_tolerance must be >= 0 and mixture_window >= 1")
        self.names = list(names)
        total = float(sum(target.values()))
        self.target = np.zeros(len(self.names))
        for d, w in target.items():
            if 0 <= int(d) < len(self.names):
                self.target[int(d)] = float(w) / total
        self.unit = unit
        self.tolerance = float(tolerance)
        self.window = int(window)
        self.hints = hints
        self.counts = np.zeros(len(self.names), dtype=np.int64)
        self.total = 0  # sum of ``counts``, kept as a Python int: a numpy sum per batch cost more
        self.warned = False
        self.windows = 0  # windows judged so far
        self.min_records = int(min_records)
        # records and tokens delivered per dataset over the run: mean tokens per record
        self.run_records = np.zeros(len(self.names), dtype=np.int64)
        self.run_tokens = np.zeros(len(self.names), dtype=np.int64)
        self.smoothed: np.ndarray | None = None  # running mean of the judged windows' shares

    def add(self, records: np.ndarray | None, tokens: np.ndarray | None,
            n_records: int | None = None) -> None:
        """Counts of one delivered unit per dataset (either may be None when unknown);
        ``n_records``: the records' sum, when the caller knows it."""
        part = tokens if self.unit == "tokens" else records
        if part is None or self.warned:
            return
        self.counts += part
        self.total += n_records if n_records is not None and part is records \
            else int(part.sum())
        if self.unit == "tokens" and records is not None:
            self.run_records += records
            self.run_tokens += tokens
        if self.total >= self.window and self._fine_enough():
            self._judge()

    def add_rows(self, records: np.ndarray, tokens: np.ndarray | None,
                 n_records: np.ndarray) -> None:
        """``add`` for each row of these (units delivered in this order), with the same
        judgments, in a few numpy calls per window rather than per unit."""
        part = tokens if self.unit == "tokens" else records
        if part is None or self.warned:
            return
        totals = n_records if part is records else part.sum(axis=1)
        k, i = len(totals), 0
        while i < k and not self.warned:
            reached = np.cumsum(totals[i:]) >= self.window - self.total
            j = i + int(np.argmax(reached)) if reached.any() else k
            self._take(part, records, tokens, totals, i, min(j + 1, k))
            if j < k and self._fine_enough():
                self._judge()
            i = j + 1

    def _take(self, part, records, tokens, totals, i: int, j: int) -> None:
        self.counts += part[i:j].sum(axis=0)
        self.total += int(totals[i:j].sum())
        if self.unit == "tokens" and records is not None:
            self.run_records += records[i:j].sum(axis=0)
            self.run_tokens += tokens[i:j].sum(axis=0)

    def _fine_enough(self) -> bool:
        """Whether the window holds enough records of each dataset to be judged (always for
        a record window, and once it has been stretched ``MAX_STRETCH`` times)."""
        if self.unit != "tokens" or self.total >= self.window * MAX_STRETCH:
            return True
        seen = (self.run_records > 0) & (self.target > 0)
        if not seen.any():
            return True
        mean = self.run_tokens[seen] / self.run_records[seen]
        return bool((self.target[seen] * self.total / mean >= self.min_records).all())

    def _judge(self) -> None:
        counts, self.counts = self.counts, np.zeros_like(self.counts)
        self.total = 0
        self.windows += 1
        shares = counts / counts.sum()
        self.smoothed = shares if self.smoothed is None else \
            SMOOTHING * shares + (1 - SMOOTHING) * self.smoothed
        off = np.abs(shares - self.target)
        off[np.abs(self.smoothed - self.target) <= self.tolerance] = 0.0  # a passing swing
        # the furthest off; of equal ones the short one, whose loss is usually the story
        d = int(np.argmax(off + 1e-9 * (shares < self.target)))
        if off[d] <= self.tolerance:
            return
        self.warned = True
        name = self.names[d]
        warnings.warn(
            f"zephon: realised mixture off target: {name!r} made {shares[d]:.3f} of the last "
            f"{counts.sum():,} delivered {self.unit} against a target of {self.target[d]:.3f} "
            f"(tolerance {self.tolerance}; window {self.windows}). "
            + self.hints(d, float(shares[d]), float(self.target[d]))
            + " Pipeline.options(mixture_tolerance=..., mixture_window=...) tune this check "
            "(0 turns it off); metrics_snapshot()['datasets'] has the running shares.",
            RuntimeWarning, stacklevel=3)


def build(spec: Any, names: list[str], observer: Any,
          refresh: Callable[[], None]) -> MixtureCheck | None:
    """The check for a pipeline (its ``PipelineSpec``): its target and unit from the last ``ensure_mixture``, else
    from the work source's mixture. Tolerance: ``options(mixture_tolerance=)``, else the
    ``ensure_mixture(warn_tolerance=)``, else ``ZEPHON_MIXTURE_TOLERANCE``, else 0.05. None when
    the tolerance is 0 or there is no mixture of two or more datasets to keep."""
    opts = spec.options
    tolerance, source = opts.resolve("mixture_tolerance")
    window = opts.resolve("mixture_window")[0]
    ws = spec.work_source
    mixer = next((op for op in reversed(spec.ops) if isinstance(op, EnsureMixtureOp)), None)
    if mixer is not None and mixer.target is None:  # a target per chunk: none to judge by
        return None
    if mixer is not None:
        target = dict(mixer.target)
        unit = mixer.unit  # None: weights of the user's own measure, which we cannot count
        if mixer.warn_tolerance is not None and source != "options":
            tolerance = mixer.warn_tolerance
    else:
        weights = dict(getattr(getattr(ws, "mixture", None), "weights", {}) or {})
        ids = ws.component_ids()
        target = {ids[n]: w for n, w in weights.items() if n in ids}
        unit = "tokens" if getattr(ws, "token_estimation", None) is not None else "records"
    tolerance = DEFAULT_TOLERANCE if tolerance is None else float(tolerance)
    if unit is None or tolerance <= 0 or len(target) < 2 or sum(target.values()) <= 0:
        return None
    window = DEFAULT_WINDOW[unit] if window is None else int(window)
    def hints(d: int, have: float, want: float) -> str:
        refresh()  # the counts other processes shipped so far reach the ledger
        return likely_cause(observer, ws, mixer, d, have, want)

    return MixtureCheck(names, target, unit, tolerance, window, hints)


def likely_cause(observer: Any, ws: Any, mixer: Any, d: int, have: float, want: float) -> str:
    """What most likely moved dataset ``d`` off its share, from what the run has counted."""
    name = observer.names[d]
    lost = [(op, reason, recs, toks) for (op, reason, ds), (recs, toks)
            in sorted(observer.ledger.losses.counts.items()) if ds == d]
    if lost and have < want:
        said = "; ".join(f"{op} counted {recs:,} records / {toks:,} tokens as '{reason}'"
                         for op, reason, recs, toks in lost)
        return f"Likely cause: records of {name!r} were not delivered whole ({said})."
    size = dataset_size(ws, d)
    if have < want and size:
        delivered = int(observer.records[d])
        if delivered >= size:
            return (f"Likely cause: {name!r} is exhausted or repeating ({delivered:,} records "
                    f"delivered from its {size:,}): it holds less than its share.")
    if mixer is not None:
        return ("Likely cause: the input holds too little of the short datasets for "
                f"ensure_mixture's buffer (max_buffer_size={mixer.max_buffer_size}), which "
                "then emits records off target: raise it, or change the weights.")
    if getattr(ws, "token_estimation", None) is not None:
        return ("Likely cause: the token estimates behind the mixture are off for this data; "
                "ensure_mixture() after tokenize corrects the delivered token shares.")
    return ("Likely cause: an operator removed or multiplied its records (a filter, a split); "
            "ensure_mixture() after it keeps the shares.")


def dataset_size(ws: Any, d: int) -> int | None:
    """Records of dataset ``d`` per pass, when the work source's datasets tell it."""
    by_id = getattr(ws, "datasets_by_id", None)
    ds = by_id.get(d) if isinstance(by_id, Mapping) else None
    return int(np.asarray(ds.counts()).sum()) if hasattr(ds, "counts") else None
