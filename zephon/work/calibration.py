"""How many tokens a dataset's records hold on average, to a stated precision, cheaply.

Token-aware mixtures need each dataset's mean tokens per record. Tokenizing records to count
them is the expensive part, and record lengths vary a lot (log-normal, CV near 1), so the plain
mean of a tokenized sample needs tens of thousands of records for 1% precision. Tokens follow
the text's length closely, though, and the length costs no tokenizer: so the estimate is a
*two-phase regression estimator* (survey sampling's double sampling):

- phase A: read many records, measure only the UTF-8 length of the tokenized field (x);
- phase B: tokenize a subsample of them (t), fit t ~ a + b·x (the intercept absorbs BOS/EOS);
- mean tokens = mean_B(t) + b · (mean_A(x) − mean_B(x)).

Its variance is that of the residuals over phase B plus b² times that of x over phase A, so a
few hundred tokenized records and a few thousand measured ones give 1%.

Records are read in *clusters* (runs of consecutive rows: one row-group decode or one span of a
JSONL file serves a cluster), spread over shards spaced across the catalog and over positions
drawn from a seed of the dataset's identity, and the variance is computed over clusters, so
records that resemble their neighbours do not make the estimate look more precise than it is.
Rounds add clusters until the confidence interval is within the requested precision or the
sample caps are reached. Everything is deterministic: the same dataset, operators and
``TokenEstimation`` give the same sample and the same figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

CLUSTER_ROWS = 32  # consecutive rows tokenized together (phase B, or the only phase)
SCAN_ROWS = 512  # consecutive rows whose length is measured together (phase A)
# clusters hold about this much text: 32 records of 2 KB, fewer of longer ones (one book of
# 130 KB is a cluster of its own), so that a dataset of long documents is not tokenized by the
# megabyte to learn what a few of them tell
CLUSTER_BYTES = 64 * 1024
WHOLE_BYTES = 8 << 20  # a dataset this small (and within calibration_samples) is measured whole


def cluster_rows(mean_bytes: float | None) -> tuple[int, int]:
    """(rows of a tokenized cluster, rows of a scanned cluster) for records of ``mean_bytes``
    on average (None: unknown, the defaults)."""
    if not mean_bytes or mean_bytes <= 0:
        return CLUSTER_ROWS, SCAN_ROWS
    rows = max(1, min(CLUSTER_ROWS, int(CLUSTER_BYTES / mean_bytes)))
    return rows, rows * (SCAN_ROWS // CLUSTER_ROWS)
FIRST_CLUSTERS = 8  # clusters of each phase in the first round
MAX_ROUNDS = 6


def z_of(confidence: float) -> float:
    """Two-sided normal quantile (enough precision for a stopping rule)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2)


def t_of(confidence: float, df: int) -> float:
    """Two-sided Student t quantile for ``df`` degrees of freedom (Hill's expansion around the
    normal one, within 1% from df=3): a variance from a handful of clusters is itself
    uncertain, and the normal quantile would call such an estimate precise when it is not
    (four clusters once claimed ±0.9% for a figure 4.6% off)."""
    z = z_of(confidence)
    if df < 1:
        return math.inf
    if df <= 2:  # exact for one and two degrees of freedom
        p = 0.5 + confidence / 2
        if df == 1:
            return math.tan(math.pi * (p - 0.5))
        a = 4 * p * (1 - p)
        return (2 * p - 1) * math.sqrt(2 / a)
    z2 = z * z
    return z * (1 + (z2 + 1) / (4 * df) + (5 * z2 * z2 + 16 * z2 + 3) / (96 * df ** 2)
                + (3 * z2 ** 3 + 19 * z2 * z2 + 17 * z2 - 15) / (384 * df ** 3))


@dataclass
class Cluster:
    shard_id: int
    start: int
    rows: int


def plan_clusters(ids: np.ndarray, counts: np.ndarray, n_shards: int, n_clusters: int,
                  seed: int, taken: set[tuple[int, int]], rows: int) -> list[Cluster]:
    """``n_clusters`` new clusters of ``rows`` consecutive rows over ``n_shards`` shards spaced
    evenly across the catalog, round-robin, at seeded positions not ``taken`` yet (``taken`` is
    updated)."""
    ids, counts = np.asarray(ids, np.int64), np.asarray(counts, np.int64)
    n_shards = max(1, min(len(ids), n_shards))
    picks = np.unique(np.linspace(0, len(ids) - 1, n_shards).round().astype(np.int64))
    rng = np.random.default_rng(seed + 7919 * len(taken))
    out: list[Cluster] = []
    free = {int(p): max(1, -(-int(counts[p]) // rows)) for p in picks}
    used = {int(p): sum(1 for s, _ in taken if s == int(ids[p])) for p in picks}
    order = [int(p) for p in picks]
    i = 0
    while len(out) < n_clusters and any(used[p] < free[p] for p in order):
        p = order[i % len(order)]
        i += 1
        if used[p] >= free[p]:
            continue
        slots = free[p]
        sid = int(ids[p])
        slot = int(rng.integers(0, slots))
        while (sid, slot) in taken:  # probe forward to the next free slot of this shard
            slot = (slot + 1) % slots
        taken.add((sid, slot))
        used[p] += 1
        start = slot * rows
        out.append(Cluster(sid, start, min(rows, int(counts[p]) - start)))
    return out


def free_slots(ids: np.ndarray, counts: np.ndarray, n_shards: int, taken: set[tuple[int, int]],
               rows: int) -> int:
    """Clusters of ``rows`` not yet taken in the ``n_shards`` shards ``plan_clusters`` uses."""
    ids, counts = np.asarray(ids, np.int64), np.asarray(counts, np.int64)
    n_shards = max(1, min(len(ids), n_shards))
    picks = np.unique(np.linspace(0, len(ids) - 1, n_shards).round().astype(np.int64))
    total = sum(max(1, -(-int(counts[p]) // rows)) for p in picks)
    used = sum(1 for s, _ in taken if s in {int(ids[p]) for p in picks})
    return total - used


@dataclass
class Sample:
    """Per-cluster measurements. ``x_a``: lengths of the scanned records (phase A); ``x_b`` and
    ``t_b``: lengths and tokens of the tokenized ones (phase B). ``population``: records in the
    dataset (finite-population correction); ``x_mean``: the mean length over the whole dataset
    when it is known without scanning (then there is no phase A)."""

    population: int
    x_mean: float | None = None
    x_a: list[np.ndarray] = field(default_factory=list)
    x_b: list[np.ndarray] = field(default_factory=list)
    t_b: list[np.ndarray] = field(default_factory=list)

    @property
    def n_a(self) -> int:
        return int(sum(len(x) for x in self.x_a))

    @property
    def n_b(self) -> int:
        return int(sum(len(x) for x in self.x_b))


@dataclass
class Estimate:
    mean_tokens: float
    rel_half_width: float  # confidence half-width / estimate
    n_a: int
    n_b: int
    var_a: float  # relative variance contributed by each phase
    var_b: float


def _cluster_var(resid_sums: np.ndarray, n: float, population: int) -> float:
    """Variance of a mean over ``n`` records from per-cluster sums of residuals (clusters as
    the sampling units), with the finite-population correction."""
    m = len(resid_sums)
    if m < 2:
        return math.inf
    nbar = n / m
    fpc = max(0.0, 1.0 - n / population) if population else 1.0
    return float(fpc * (resid_sums ** 2).sum() / (m * (m - 1) * nbar * nbar))


def estimate(sample: Sample, confidence: float, with_lengths: bool) -> Estimate:
    """Mean tokens per record: ratio to a known mean length, two-phase regression on scanned
    lengths, or (no lengths to lean on) the plain cluster mean."""
    t = [np.asarray(c, np.float64) for c in sample.t_b]
    n_b = float(sum(len(c) for c in t))
    if not n_b:
        return Estimate(0.0, math.inf, sample.n_a, 0, math.inf, math.inf)
    t_sums = np.array([c.sum() for c in t])
    mean_t = float(t_sums.sum() / n_b)
    if not with_lengths:
        var = _cluster_var(t_sums - mean_t * np.array([len(c) for c in t]), n_b,
                           sample.population)
        return _finish(mean_t, 0.0, var, confidence, sample, False)
    xb = [np.asarray(c, np.float64) for c in sample.x_b]
    x_sums = np.array([c.sum() for c in xb])
    if sample.x_mean is not None:  # ratio estimator: tokens per byte times the known mean
        ratio = float(t_sums.sum() / x_sums.sum()) if x_sums.sum() > 0 else 0.0
        var = _cluster_var(t_sums - ratio * x_sums, n_b, sample.population)
        return _finish(ratio * sample.x_mean, 0.0, var, confidence, sample, False)
    all_t, all_x = np.concatenate(t), np.concatenate(xb)
    mean_xb = float(all_x.mean())
    sxx = ((all_x - mean_xb) ** 2).sum()
    slope = float(((all_x - mean_xb) * (all_t - mean_t)).sum() / sxx) if sxx > 0 else 0.0
    n_a = float(sample.n_a)
    xa_sums = np.array([c.sum() for c in sample.x_a], np.float64)
    mean_xa = float(xa_sums.sum() / n_a)
    var_xa = _cluster_var(xa_sums - mean_xa * np.array([len(c) for c in sample.x_a]), n_a,
                          sample.population)
    resid = np.array([(tc - mean_t - slope * (xc - mean_xb)).sum() for tc, xc in zip(t, xb)])
    var_e = _cluster_var(resid, n_b, sample.population)
    return _finish(mean_t + slope * (mean_xa - mean_xb), slope * slope * var_xa, var_e,
                   confidence, sample, True)


def _finish(mu: float, var_a: float, var_b: float, confidence: float, sample: Sample,
            with_a: bool) -> Estimate:
    """The estimate with its relative half-width, at the Student quantile for the clusters
    the variances came from (Welch–Satterthwaite when both phases contribute)."""
    if not mu > 0:
        return Estimate(mu, math.inf, sample.n_a, sample.n_b, math.inf, math.inf)
    va, vb = var_a / mu ** 2, var_b / mu ** 2
    df_b = len(sample.t_b) - 1
    df_a = len(sample.x_a) - 1 if with_a else 0
    parts = [(v, d) for v, d in ((va, df_a), (vb, df_b)) if v > 0]
    if not math.isfinite(va + vb):
        q = math.inf
    elif not parts:
        q = z_of(confidence)
    elif any(d < 1 for _, d in parts):
        q = math.inf
    else:
        df = sum(v for v, _ in parts) ** 2 / sum(v * v / d for v, d in parts)
        q = t_of(confidence, max(1, int(df)))
    return Estimate(mu, q * math.sqrt(va + vb), sample.n_a, sample.n_b, va, vb)


def next_round(est: Estimate, precision: float, confidence: float, n_a: int, n_b: int,
               max_a: int, max_b: int) -> tuple[int, int]:
    """Records to add to phases A and B so that the next estimate should meet ``precision``
    (0, 0 when it does already or the caps are reached). Each phase aims at what the variance
    budget leaves once the other phase's share (at most half) is taken out: a phase that is
    already precise enough (the tokenized phase, usually) is not grown."""
    if est.rel_half_width <= precision:
        return 0, 0
    spread = math.sqrt(est.var_a + est.var_b) if math.isfinite(est.var_a + est.var_b) else 0.0
    q = est.rel_half_width / spread if spread > 0 else z_of(confidence)  # Student or normal
    if not (math.isfinite(est.var_a) and math.isfinite(est.var_b) and math.isfinite(q)):
        return min(n_a, max_a - n_a), min(n_b, max_b - n_b)  # too few clusters to tell: double
    target = (precision / q) ** 2
    budget_a = target - min(est.var_b, target / 2)
    budget_b = target - min(est.var_a, target / 2)

    def grow(n: int, var: float, budget: float, cap: int) -> int:
        if var <= budget:
            return 0
        want = int(math.ceil(n * var / budget * 1.1))  # 10% over: the next round should do
        return max(0, min(want - n, cap - n, 8 * n))

    return grow(n_a, est.var_a, budget_a, max_a), grow(n_b, est.var_b, budget_b, max_b)
