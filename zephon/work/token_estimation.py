"""Token-aware mixtures: weights in tokens, turned into static per-sample weights.

``TokenEstimation`` carries the configuration of the (later) priming step that measures
tokens per byte per dataset. Once ratios are known (``set_token_ratios``), each dataset's
expected tokens per sample is ``tokens_per_byte * bytes_per_sample`` and its *sample* weight is
``token_weight / tokens_per_sample`` (normalised). Using the dataset's mean bytes per sample
(total bytes / total rows, i.e. the row-weighted mean of the per-shard averages) rather than
charging each draw its own shard's average keeps the sample weights constant, so per-chunk
quotas stay a closed-form function of the chunk index (random access, O(1) restore). Over a
pass the two agree: every shard is visited exactly once per pass.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Union

Primer = Union[str, Mapping[str, float], float]


def check_ratio(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what} must be a finite number > 0, got {value!r}")
    f = float(value)
    if not math.isfinite(f) or f <= 0:
        raise ValueError(f"{what} must be a finite number > 0, got {value!r}")
    return f


@dataclass(frozen=True)
class TokenEstimation:
    """Switches the mixture weights from samples to tokens: each dataset's mean tokens per
    record is estimated (from a small sample, in the node cache, or from ``index.json``) and the
    per-chunk sample quotas are set so that the tokens follow the weights.

    Args:
        primer: ``"measure"`` (estimate every dataset), a number (tokens per stored byte for
            every dataset) or ``{dataset name: tokens per byte}`` (those datasets are not
            measured).
        measure: ``payload -> token count`` to use instead of the pipeline's tokenizer.
        calibration_samples: At most this many records are tokenized per dataset (a
            dataset with no more records than this, and at most 8 MiB of text, is tokenized
            whole: its figure is exact).
        calibration_shards_min: Fewest shards the sample is drawn from.
        calibration_shards_max: Most shards the sample is drawn from.
        fallback_tokens_per_byte: The figure used (with a warning) when a dataset cannot be
            measured.
        precision: Relative half-width of the confidence interval at which sampling stops.
        confidence: The confidence level of that interval.
        max_scanned: At most this many records have their text length measured (Parquet).

    Raises:
        ValueError: A value out of range.
    """

    primer: Primer = "measure"
    measure: Callable[[Any], int] | None = None
    calibration_samples: int = 2048  # at most this many records are tokenized per dataset
    calibration_shards_min: int = 4
    calibration_shards_max: int = 16
    fallback_tokens_per_byte: float = 0.25
    # sampling stops once the estimate's confidence half-width is within ``precision`` of it
    # (zephon/work/calibration.py); ``max_scanned`` caps the records whose length is measured
    precision: float = 0.01
    confidence: float = 0.95
    max_scanned: int = 65536

    def __post_init__(self) -> None:
        primer = self.primer
        if isinstance(primer, str):
            if primer != "measure":
                raise ValueError(f"primer must be 'measure', a mapping or a number, got {primer!r}")
        elif isinstance(primer, Mapping):
            pinned = {}
            for k, v in primer.items():
                if not isinstance(k, str):
                    raise ValueError(f"primer keys must be dataset names, got {k!r}")
                pinned[k] = check_ratio(v, f"primer[{k!r}]")
            object.__setattr__(self, "primer", pinned)
        else:
            object.__setattr__(self, "primer", check_ratio(primer, "primer"))
        if self.measure is not None and not callable(self.measure):
            raise ValueError("measure must be a callable payload -> token count, or None")
        for name in ("precision", "confidence"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v < 1:
                raise ValueError(f"{name} must be a number between 0 and 1, got {v!r}")
        for name in ("calibration_samples", "calibration_shards_min", "calibration_shards_max",
                     "max_scanned"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.calibration_shards_max < self.calibration_shards_min:
            raise ValueError("calibration_shards_max must be >= calibration_shards_min")
        check_ratio(self.fallback_tokens_per_byte, "fallback_tokens_per_byte")

    def pinned_ratios(self, names: Sequence[str]) -> dict[str, float]:
        """Ratios fixed by the primer itself (no measuring needed for these datasets).

        Args:
            names: The work source's dataset names.

        Returns:
            Dataset name -> tokens per byte, for the pinned datasets.

        Raises:
            ValueError: The primer names an unknown dataset.
        """
        if isinstance(self.primer, str):
            return {}
        if isinstance(self.primer, Mapping):
            unknown = [k for k in self.primer if k not in names]
            if unknown:
                raise ValueError(f"primer names unknown dataset(s) {unknown}")
            return dict(self.primer)
        return {n: float(self.primer) for n in names}


def mean_bytes_per_sample(dataset: Any) -> float | None:
    """Total bytes / total rows from the catalog (for an in-memory dataset: of its payloads as
    JSON), or None when sizes are unknown."""
    raw = dataset.raw_bytes()
    if raw is None:
        return _memory_bytes_per_sample(dataset)
    rows = int(sum(int(c) for c in dataset.counts()))
    total = float(sum(float(b) for b in raw))
    return total / rows if rows and total > 0 else None


def token_sample_weights(names: Sequence[str], token_weights: Mapping[str, Fraction],
                         tokens_per_byte: Mapping[str, float],
                         bytes_per_sample: Mapping[str, float | None]) -> list[Fraction]:
    """Exact per-sample weights (summing to 1) that deliver tokens in the declared ratio."""
    known = [b for b in bytes_per_sample.values() if b]
    missing = [n for n in names if not bytes_per_sample.get(n)]
    if missing:
        warnings.warn(f"no byte sizes for dataset(s) {missing}: assuming the mean bytes per "
                      "sample of the others for token-aware allocation", UserWarning, stacklevel=3)
    fill = sum(known) / len(known) if known else 1.0
    rates = [float(token_weights[n]) / (tokens_per_byte[n] * (bytes_per_sample.get(n) or fill))
             for n in names]
    scale = sum(rates)
    # Floats are deterministic, so is this; limit_denominator keeps the fractions small and the
    # floor keeps a vanishing share positive.
    raw = [max(Fraction(r / scale).limit_denominator(10**12), Fraction(1, 10**12)) for r in rates]
    total = sum(raw)
    return [w / total for w in raw]


def _memory_bytes_per_sample(dataset: Any) -> float | None:
    """Mean UTF-8 size of an in-memory dataset's payloads as JSON (sorted keys; values JSON has
    no form for count by their text), computed once per dataset object; None otherwise."""
    memory = getattr(dataset, "_memory", None)
    if not memory:
        return None
    cached = getattr(dataset, "_mean_payload_bytes", None)
    if cached is None:
        import json

        total = rows = 0
        for shard in memory.values():
            for payload in shard:
                total += len(json.dumps(payload, sort_keys=True, default=str).encode())
                rows += 1
        cached = total / rows if rows and total > 0 else 0.0
        try:
            dataset._mean_payload_bytes = cached
        except AttributeError:
            pass
    return cached or None


def adopt_token_ratios(ws: Any, ratios: Any) -> None:
    """Give a token-aware ``StaticMixtureWorkSource`` the ratios its pipeline primed a copy of
    it with (``total_samples``, ``state_dict()``); ``forget_token_ratios`` undoes it."""
    if ratios is None or getattr(ws, "token_estimation", None) is None \
            or getattr(ws, "_token_ratios", True) is not None:
        return
    ws._token_ratios, ws._plan = {n: float(ratios[n]) for n in ws._names}, None
    ws._adopted_ratios = True


def forget_token_ratios(ws: Any) -> None:
    """The operators changed: ratios ``adopt_token_ratios`` gave are measured again."""
    if getattr(ws, "_adopted_ratios", False):
        ws._token_ratios, ws._plan, ws._adopted_ratios = None, None, False
