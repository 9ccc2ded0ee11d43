"""Mixture weights: validation, normalisation and their exact rational form."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, Union


def exact_weight(value: Any, what: str = "weight") -> Fraction:
    """A positive, finite weight as an exact fraction.

    Floats are read through their shortest decimal form, so ``0.1`` is exactly 1/10 and
    ``{a: .1, b: .3}`` splits a chunk exactly like ``{a: 1, b: 3}``.
    """
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, Fraction)):
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    if isinstance(value, numbers.Integral):
        frac = Fraction(int(value))
    elif isinstance(value, Fraction):
        frac = value
    else:
        f = float(value)
        if not math.isfinite(f):
            raise ValueError(f"{what} must be finite, got {value!r}")
        frac = Fraction(repr(f))
    if frac <= 0:
        raise ValueError(f"{what} must be > 0, got {value!r}")
    return frac


class MixtureSpec:
    """Relative sampling weights per component (dataset name), normalised to sum to one.

    ``MixtureSpec({"code": .25, "web": .75}) == MixtureSpec({"code": 1, "web": 3})``.

    Args:
        weights: Dataset name -> positive weight.

    Raises:
        ValueError: Not a mapping, empty, or a bad name or weight.
    """

    def __init__(self, weights: Mapping[str, float]) -> None:
        if not isinstance(weights, Mapping):
            raise ValueError(f"MixtureSpec needs a mapping name -> weight, got {type(weights).__name__}")
        if not weights:
            raise ValueError("MixtureSpec needs at least one component")
        raw: dict[str, Fraction] = {}
        for name, w in weights.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"mixture component names must be non-empty strings, got {name!r}")
            raw[name] = exact_weight(w, f"weight of {name!r}")
        total = sum(raw.values())
        self._exact = {n: w / total for n, w in raw.items()}

    @classmethod
    def coerce(cls, mixture: Union[MixtureSpec, Mapping[str, float]]) -> MixtureSpec:
        """A ``MixtureSpec`` from a spec or a mapping of weights.

        Args:
            mixture: The spec, or ``{name: weight}``.

        Returns:
            The spec.
        """
        return mixture if isinstance(mixture, MixtureSpec) else cls(mixture)

    @property
    def names(self) -> tuple[str, ...]:
        """The component names, in declaration order."""
        return tuple(self._exact)

    @property
    def weights(self) -> dict[str, float]:
        """Normalised weights as floats, in declaration order."""
        return {n: float(w) for n, w in self._exact.items()}

    @property
    def exact(self) -> dict[str, Fraction]:
        """Normalised weights as exact fractions (they sum to exactly 1)."""
        return dict(self._exact)

    def check_names(self, names: Iterable[str]) -> None:
        """ValueError unless the components are exactly ``names``.

        Args:
            names: The work source's dataset names.

        Raises:
            ValueError: A dataset without a weight or a weight for an unknown component.
        """
        names = list(names)
        missing = [n for n in names if n not in self._exact]
        extra = [n for n in self._exact if n not in names]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"no weight for dataset(s) {missing}")
            if extra:
                parts.append(f"weight(s) for unknown component(s) {extra}")
            raise ValueError("mixture components must equal the dataset names: " + "; ".join(parts))

    def __getitem__(self, name: str) -> float:
        return float(self._exact[name])

    def __len__(self) -> int:
        return len(self._exact)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MixtureSpec) and self._exact == other._exact

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._exact.items())))

    def __repr__(self) -> str:
        inner = ", ".join(f"{n!r}: {float(w):.6g}" for n, w in self._exact.items())
        return f"MixtureSpec({{{inner}}})"
