"""Per-chunk quotas: how many samples each component contributes to global chunk k.

Everything is defined through the cumulative count ``cum_c(k)`` of component ``c`` in the
first ``k`` chunks; chunk ``k`` takes ``cum_c(k + 1) - cum_c(k)`` samples of ``c``. With exact
normalised weights ``w_c`` (fractions) and target ``T_c(k) = k * chunk_size * w_c``, every rule
here guarantees, for every ``k``:

- ``sum_c cum_c(k) == k * chunk_size`` (each chunk is exactly ``chunk_size`` long),
- ``cum_c(k)`` is ``floor(T_c(k))`` or ``ceil(T_c(k))`` (strictly within one sample),
- ``cum_c`` never decreases (no negative quota).

Rule 1, closed form (used when every component gets at least one sample per chunk on average,
``chunk_size * w_c >= 1``): Hamilton's largest remainder on the cumulative targets. Each
component gets ``floor(T_c(k))``; the ``R = k * chunk_size - sum floor(T_c(k))`` components with
the largest fractional parts (ties: earlier component) get one more. O(C log C) for any ``k``.
Monotone because ``floor(T_c(k + 1)) >= floor(T_c(k)) + 1 >= cum_c(k)`` when
``chunk_size * w_c >= 1``.

Rule 2, earliest deadline (used when some component is rarer than one sample per chunk, where
rule 1 could take back a sample it handed out early): step by step, each component first
keeps what it has and gets at least ``floor(T_c(k))``; the samples still missing go, one per
component, to the components whose next sample is due soonest (the first ``k`` with
``T_c(k) >= cum_c + 1``; ties: earlier component), never above ``ceil(T_c(k))``. This is
earliest-deadline-first scheduling of unit jobs with release times, which meets every
deadline whenever any schedule does, and a quota-satisfying house-monotone schedule always
exists (Balinski & Young), so the rule never gets stuck. All remainders vanish after
``P = D / gcd(D, chunk_size)`` chunks (``D`` the common denominator of the weights), so the
schedule is periodic: ``cum(k) = cum(k mod P) + (k div P) * T(P)``. States are memoised every
``_MEMO_EVERY`` steps as the walk proceeds, so sequential access is O(1) per chunk, random
access within the walked part of the period costs at most ``_MEMO_EVERY`` steps, and only the
first visit of a far point of a long period pays for the walk there (once per process: lane
clones share their schedule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

_MEMO_EVERY = 256


class QuotaSchedule:
    """Exact cumulative per-component counts for chunks of a fixed size."""

    def __init__(self, weights: Sequence[Fraction], chunk_size: int) -> None:
        if not weights or any(w <= 0 for w in weights) or sum(weights) != 1:
            raise ValueError("quota weights must be positive fractions summing to 1")
        if chunk_size <= 0:
            raise ValueError("chunk_size must be > 0")
        den = math.lcm(*(w.denominator for w in weights))
        self.chunk_size = int(chunk_size)
        self.num_components = len(weights)
        self._den = den
        self._num = tuple(int(w * den) for w in weights)  # sum(self._num) == den
        self.closed_form = all(self.chunk_size * n >= den for n in self._num)
        self.period = den // math.gcd(den, self.chunk_size)
        self._period_gain = tuple(self.period * self.chunk_size * n // den for n in self._num)
        self._memo: dict[int, tuple[int, ...]] = {0: (0,) * len(self._num)}
        self._memo_top = 0  # memos exist at every multiple of _MEMO_EVERY up to here
        self._cursor: tuple[int, tuple[int, ...]] = (0, self._memo[0])

    # -- public ---------------------------------------------------------------------------

    def cum(self, k: int) -> tuple[int, ...]:
        """Samples of each component in the first ``k`` chunks."""
        if k < 0:
            raise ValueError("chunk index must be >= 0")
        if self.closed_form:
            return self._largest_remainder(k)
        rounds, rest = divmod(k, self.period)
        base = self._edf(rest)
        if rounds == 0:
            return base
        return tuple(b + rounds * g for b, g in zip(base, self._period_gain))

    def quotas(self, k: int) -> list[int]:
        """Samples of each component in chunk ``k``."""
        lo, hi = self.cum(k), self.cum(k + 1)
        return [b - a for a, b in zip(lo, hi)]

    def target(self, c: int, k: int) -> Fraction:
        """The ideal (fractional) count of component ``c`` after ``k`` chunks."""
        return Fraction(k * self.chunk_size * self._num[c], self._den)

    def chunk_reaching(self, c: int, count: int) -> int:
        """The chunk in which component ``c`` draws its ``count``-th sample (``count >= 1``)."""
        if count < 1:
            raise ValueError("count must be >= 1")
        per_chunk = self.chunk_size * self._num[c]  # over self._den
        # T_c(k + 1) <= count - 1 forces cum_c(k + 1) < count: start just below the answer.
        k = max(0, (count - 1) * self._den // per_chunk - 1)
        while self.cum(k + 1)[c] < count:
            k += 1
        return k

    # -- rule 1 ---------------------------------------------------------------------------

    def _largest_remainder(self, k: int) -> tuple[int, ...]:
        scaled = [k * self.chunk_size * n for n in self._num]
        floors = [s // self._den for s in scaled]
        missing = k * self.chunk_size - sum(floors)
        if missing:
            rems = [s - f * self._den for s, f in zip(scaled, floors)]
            order = sorted(range(len(rems)), key=lambda c: (-rems[c], c))
            for c in order[:missing]:
                floors[c] += 1
        return tuple(floors)

    # -- rule 2 ---------------------------------------------------------------------------

    def _edf(self, k: int) -> tuple[int, ...]:
        # Start from the cursor or the nearest memo at or below k, whichever is closer.
        memo_k = min((k // _MEMO_EVERY) * _MEMO_EVERY, self._memo_top)
        start_k, state = self._cursor
        if not memo_k <= start_k <= k:
            start_k, state = memo_k, self._memo[memo_k]
        while start_k < k:
            state = self._edf_step(start_k, state)
            start_k += 1
            if start_k % _MEMO_EVERY == 0 and start_k > self._memo_top:
                self._memo[start_k] = state
                self._memo_top = start_k
        self._cursor = (k, state)
        return state

    def _edf_step(self, k: int, cum: tuple[int, ...]) -> tuple[int, ...]:
        """cum(k) -> cum(k + 1)."""
        den, cs = self._den, self.chunk_size
        scaled = [(k + 1) * cs * n for n in self._num]
        new = [max(c, s // den) for c, s in zip(cum, scaled)]
        missing = (k + 1) * cs - sum(new)
        if missing:
            # Candidates may still round up; their next sample is due at chunk
            # ceil((new + 1) * den / (cs * num)).
            cands = [c for c in range(len(new)) if new[c] * den < scaled[c]]
            cands.sort(key=lambda c: (-(-(new[c] + 1) * den // (cs * self._num[c])), c))
            if len(cands) < missing:  # cannot happen (see module docstring); fail loudly
                raise AssertionError("earliest-deadline quota schedule is infeasible")
            for c in cands[:missing]:
                new[c] += 1
        return tuple(new)


class RedistributedQuotas:
    """Quotas of a mixture whose ``"redistribute"`` datasets leave it after their pass: the
    schedule runs in segments. In the chunk where such a dataset cannot supply its quota, it
    gives what it has left and its shortfall goes to the datasets still in the mixture (largest
    remainder over their weights); from the next chunk on, their weights are renormalised
    without it. Chunks keep ``chunk_size`` samples, every sample of the pass is drawn, and
    ``cum``/``quotas``/``chunk_reaching`` answer as ``QuotaSchedule``'s do.

    ``end_position`` is set when the last datasets of the mixture all leave it (the stream then
    ends right after the last of their samples); None otherwise.
    """

    def __init__(self, weights: Sequence[Fraction], chunk_size: int,
                 leave_after: Sequence[int | None]) -> None:
        self.chunk_size = int(chunk_size)
        self.num_components = len(weights)
        self.end_position: int | None = None
        n = len(weights)
        active = [c for c in range(n) if weights[c] > 0]
        base = (0,) * n
        start = 0
        # segments: (first chunk, cum at it, active components, their schedule)
        self._segments: list[tuple[int, tuple[int, ...], list[int], QuotaSchedule]] = []
        while True:
            total = sum(weights[c] for c in active)
            sched = QuotaSchedule([weights[c] / total for c in active], self.chunk_size)
            self._segments.append((start, base, active, sched))
            due = []
            for j, c in enumerate(active):
                lim = leave_after[c]
                if lim is not None:
                    due.append((start + sched.chunk_reaching(j, lim - base[c] + 1), c))
            if not due:
                return
            b, d = min(due)
            lo, hi = self._seg_cum(len(self._segments) - 1, b), \
                self._seg_cum(len(self._segments) - 1, b + 1)
            counts = [h - x for x, h in zip(lo, hi)]
            left = leave_after[d] - lo[d]
            short, counts[d] = counts[d] - left, left
            rest = [c for c in active if c != d]
            if not rest:  # the last of the mixture: the stream ends after its last sample
                self._segments.append((b + 1, tuple(x + k for x, k in zip(lo, counts)), [],
                                       sched))
                self.end_position = self._last_position(b, lo, counts, d, left)
                return
            w = sum(weights[c] for c in rest)
            scaled = [short * weights[c] / w for c in rest]
            extra = [int(x) for x in scaled]
            order = sorted(range(len(rest)), key=lambda i: (-(scaled[i] - extra[i]), i))
            for i in order[: short - sum(extra)]:
                extra[i] += 1
            for c, e in zip(rest, extra):
                counts[c] += e
            base = tuple(x + k for x, k in zip(lo, counts))
            start, active = b + 1, rest

    def _last_position(self, b: int, lo, counts, d: int, left: int) -> int:
        from zephon._ext import kernel

        if left == 0:
            return b * self.chunk_size
        order = kernel("curriculum").swrr_interleave(np.asarray(counts, dtype=np.int64))
        return b * self.chunk_size + int(np.flatnonzero(order == d)[left - 1]) + 1

    def _seg(self, k: int) -> int:
        i = len(self._segments) - 1
        while self._segments[i][0] > k:
            i -= 1
        return i

    def _seg_cum(self, i: int, k: int) -> tuple[int, ...]:
        start, base, active, sched = self._segments[i]
        out = list(base)
        if active:
            for j, v in enumerate(sched.cum(k - start)):
                out[active[j]] += v
        return tuple(out)

    def cum(self, k: int) -> tuple[int, ...]:
        """Samples of each component in the first ``k`` chunks."""
        if k < 0:
            raise ValueError("chunk index must be >= 0")
        return self._seg_cum(self._seg(k), k)

    def quotas(self, k: int) -> list[int]:
        """Samples of each component in chunk ``k``."""
        lo, hi = self.cum(k), self.cum(k + 1)
        return [b - a for a, b in zip(lo, hi)]

    def chunk_reaching(self, c: int, count: int) -> int:
        """The chunk in which component ``c`` draws its ``count``-th sample (``count >= 1``)."""
        if count < 1:
            raise ValueError("count must be >= 1")
        for i, (start, base, active, sched) in enumerate(self._segments):
            nxt = self._segments[i + 1] if i + 1 < len(self._segments) else None
            if nxt is not None and nxt[1][c] < count:
                continue  # not within this segment (nor its last, special chunk)
            if c not in active:
                break
            k = start + sched.chunk_reaching(active.index(c), count - base[c])
            return k if nxt is None else min(k, nxt[0] - 1)
        raise ValueError(f"component {c} never draws sample {count}")
