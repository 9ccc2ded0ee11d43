"""How the pointers of a chunk are read: ``MixtureReadConfig`` (``options(mixture_config=...)``).

A chunk arrives with its pointers in smooth weighted round robin (SWRR) order over its
components, each component's pointers in the order the work source listed them: that is the
default configuration, and it costs nothing. Other configurations reorder a chunk's pointers
before the engine cuts it into blocks:

- ``within_component=SHUFFLE`` permutes each component's pointers (a keyed Feistel permutation,
  key from the seed and the component), keeping the positions the mixture gives each component;
- ``mode=WEIGHTED_RANDOM`` draws the component of every position at random in proportion to the
  components' counts in the chunk, an exhausted component leaving the draw.

The seed is ``config.seed``, or the chunk's own seed when it is None, so the order is a pure
function of the chunk and the configuration: it is part of the data, and a checkpoint refuses a
restore under another one. Unlike the reference (which stores the option but never reads it,
and compares modes by identity so a plain string misbehaves), strings are accepted and mean
their enum value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from zephon._ext import kernel
from zephon.work.hashing import derive_key

TAG_READ_SHUFFLE = 11
TAG_READ_RANDOM = 12


class MixtureReadMode(str, Enum):
    """How a chunk's components are interleaved: ``"weighted_round_robin"`` (the default:
    smooth weighted round robin over the components' counts) or ``"weighted_random"`` (each
    position's component drawn in proportion to the counts)."""
    WEIGHTED_ROUND_ROBIN = "weighted_round_robin"
    WEIGHTED_RANDOM = "weighted_random"


class ComponentOrder(str, Enum):
    """How a component's own pointers are ordered within a chunk: ``"as_is"`` (as the work
    source lists them) or ``"shuffle"`` (a keyed permutation)."""
    AS_IS = "as_is"
    SHUFFLE = "shuffle"


@dataclass(frozen=True)
class MixtureReadConfig:
    """How a chunk's pointers are read: ``options(mixture_config=MixtureReadConfig(...))``.

    The order is a pure function of the chunk and this configuration, so it is part of the
    data: a checkpoint refuses a restore under another one. Strings are accepted for the modes.

    Args:
        mode: A ``MixtureReadMode`` (or its value).
        seed: The seed of the random orders; None uses each chunk's own seed.
        precompute: Accepted for the reference's sake: orders are always computed whole.
        within_component: A ``ComponentOrder`` (or its value).

    Raises:
        ValueError: An unknown mode or a seed that is not an int.
    """

    mode: MixtureReadMode = MixtureReadMode.WEIGHTED_ROUND_ROBIN
    seed: int | None = None
    precompute: bool = False
    within_component: ComponentOrder = ComponentOrder.AS_IS

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "mode", MixtureReadMode(self.mode))
            object.__setattr__(self, "within_component", ComponentOrder(self.within_component))
        except ValueError as e:
            raise ValueError(f"MixtureReadConfig: {e}") from None
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"MixtureReadConfig: seed must be an int or None, got {self.seed!r}")

    @property
    def is_default(self) -> bool:
        """Reads chunks as they are stored (nothing to reorder)."""
        return (self.mode is MixtureReadMode.WEIGHTED_ROUND_ROBIN
                and self.within_component is ComponentOrder.AS_IS)

    def describe(self) -> dict[str, Any]:
        """The configuration as a plain dict (for ``explain()`` and checkpoints)."""
        return {"mode": self.mode.value, "seed": self.seed,
                "within_component": self.within_component.value}


def coerce(config: Any) -> MixtureReadConfig | None:
    """None, a ``MixtureReadConfig`` or a mapping of its fields -> a config (None = default)."""
    if config is None:
        return None
    if isinstance(config, MixtureReadConfig):
        return config
    if isinstance(config, dict):
        return MixtureReadConfig(**config)
    raise TypeError(f"mixture_config must be a MixtureReadConfig, got {type(config).__name__}")


def read_order(components: np.ndarray, chunk_seed: int, config: MixtureReadConfig | None
               ) -> np.ndarray | None:
    """Positions of a chunk (its per-pointer component ids, in stored order) in the order
    ``config`` reads them; None when that is the stored order."""
    if config is None or config.is_default or len(components) == 0:
        return None
    k = kernel("curriculum")
    seed = chunk_seed if config.seed is None else config.seed
    ids, inv, counts = np.unique(components, return_inverse=True, return_counts=True)
    inv = inv.astype(np.int64).reshape(-1)
    by_comp = np.argsort(inv, kind="stable")  # each component's positions, component-major
    starts = np.concatenate(([0], np.cumsum(counts)))
    if config.within_component is ComponentOrder.SHUFFLE:
        for c in range(len(ids)):
            a, b = int(starts[c]), int(starts[c + 1])
            key = derive_key(seed, TAG_READ_SHUFFLE, int(ids[c]))
            by_comp[a:b] = by_comp[a:b][k.feistel_permute(np.arange(b - a, dtype=np.int64),
                                                         b - a, key)]
    if config.mode is MixtureReadMode.WEIGHTED_RANDOM:
        labels = weighted_random_labels(counts, derive_key(seed, TAG_READ_RANDOM))
    else:
        labels = inv  # the stored SWRR pattern
    # the j-th visit of component c reads that component's j-th pointer
    order = np.empty(len(components), dtype=np.int64)
    order[np.argsort(labels, kind="stable")] = by_comp
    return order


def weighted_random_labels(counts: np.ndarray, key: int) -> np.ndarray:
    """Component of each position: independent draws in proportion to ``counts``, a draw of a
    component that already has all its positions skipped (which is a draw among the others in
    proportion to their counts), until every component has its count."""
    k = kernel("curriculum")
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    cum = np.cumsum(counts)
    draws = np.empty(0, dtype=np.int64)
    while True:
        n = len(draws)
        h = k.hash_mix(key, np.arange(n, n + total, dtype=np.int64))
        u = (h % np.uint64(total)).astype(np.int64)
        draws = np.concatenate((draws, np.searchsorted(cum, u, side="right")))
        if (np.bincount(draws, minlength=len(counts)) >= counts).all():
            break
    order = np.argsort(draws, kind="stable")
    group_start = np.concatenate(([0], np.cumsum(np.bincount(draws, minlength=len(counts)))))
    rank = np.empty(len(draws), dtype=np.int64)
    rank[order] = np.arange(len(draws), dtype=np.int64) - group_start[draws[order]]
    return draws[rank < counts[draws]]
