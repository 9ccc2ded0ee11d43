"""Per-lane mixture balancing for ``ensure_mixture`` (spec 5.9).

Records arrive tagged with a component id (0, 1, ...) and a weight (token count, or 1 per
sample). Each component has a FIFO buffer; smooth weighted round robin over the target
components decides which component the output wants next: the one with the largest deficit
``share * total_target_weight_emitted - weight_emitted_from_it`` (lowest id on ties). Rules:

- After each arrival, emit while the wanted component has a buffered record (and, at the
  rate ``obsolete_drain_rate`` per target emission, the oldest record of a component that is
  not in the target - a share of output reserved for them).
- When ``max_buffer_size`` records are buffered, emit best-available records (largest deficit
  among buffered target components, else the oldest obsolete record) until
  ``int(drain_target_ratio * max_buffer_size)`` remain; the mixture then drifts toward the
  input for a persistently scarce component, by design.
- ``max_buffer_size=None`` is strict mode: nothing is drained early; at ``flush`` whatever
  cannot be emitted on target is dropped (returned, for tombstones).
- ``flush`` otherwise emits everything left, best-available first, and resets the state.

Shares are fixed-point integers (total 2**20) and weights integers (``weight_scale`` times
the given weight, rounded), so the kernel and its twin decide identically on every machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from zephon._ext import kernel

SHARE_SCALE = 1 << 20
MAX_WEIGHT = 1 << 40
STATE_VERSION = 1


def quantize_shares(weights: Sequence[float]) -> np.ndarray:
    """Largest-remainder integer shares summing to 2**20; every positive weight gets >= 1."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or len(w) == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("target weights must be finite, non-negative, with a positive sum")
    raw = w / w.sum() * SHARE_SCALE
    shares = np.floor(raw).astype(np.int64)
    order = np.lexsort((np.arange(len(w)), -(raw - shares)))   # largest remainder, lowest id
    shares[order[: SHARE_SCALE - int(shares.sum())]] += 1
    tiny = (w > 0) & (shares == 0)
    if tiny.any():
        shares[tiny] = 1
        shares[int(np.argmax(shares))] -= int(tiny.sum())
    return shares


def _target_list(target: Mapping[int, float] | Sequence[float]) -> list[float]:
    if isinstance(target, Mapping):
        if not target:
            raise ValueError("target mixture is empty")
        ids = [int(k) for k in target]
        if min(ids) < 0:
            raise ValueError("component ids must be >= 0")
        out = [0.0] * (max(ids) + 1)
        for k, v in target.items():
            out[int(k)] = float(v)
        return out
    return [float(v) for v in target]


class MixerFlush(NamedTuple):
    emitted: np.ndarray   # record ids, in order
    dropped: np.ndarray   # record ids dropped by strict mode, in arrival order


class MixtureBalancer:
    """Per-lane ensure_mixture buffer; see the module docstring for the rules."""

    def __init__(self, target: Mapping[int, float] | Sequence[float],
                 max_buffer_size: int | None = 1000, drain_target_ratio: float = 0.8,
                 obsolete_drain_rate: float = 0.1, weight_scale: int = 1) -> None:
        if max_buffer_size is not None and (not isinstance(max_buffer_size, (int, np.integer))
                                            or max_buffer_size < 1):
            raise ValueError(f"max_buffer_size must be a positive integer or None, "
                             f"got {max_buffer_size!r}")
        if not 0.0 <= drain_target_ratio <= 1.0:
            raise ValueError("drain_target_ratio must be in [0, 1]")
        if not 0.0 <= obsolete_drain_rate <= 1.0:
            raise ValueError("obsolete_drain_rate must be in [0, 1]")
        if not isinstance(weight_scale, (int, np.integer)) or weight_scale < 1:
            raise ValueError("weight_scale must be a positive integer")
        self.target = _target_list(target)
        self.max_buffer_size = None if max_buffer_size is None else int(max_buffer_size)
        self.drain_target_ratio = float(drain_target_ratio)
        self.obsolete_drain_rate = float(obsolete_drain_rate)
        self.weight_scale = int(weight_scale)
        strict = self.max_buffer_size is None
        self._core = kernel("shuffle").MixCore(
            quantize_shares(self.target), -1 if strict else self.max_buffer_size,
            0 if strict else int(self.drain_target_ratio * self.max_buffer_size),
            int(round(self.obsolete_drain_rate * SHARE_SCALE)))

    @property
    def config(self) -> dict[str, Any]:
        return {"target": list(self.target), "max_buffer_size": self.max_buffer_size,
                "drain_target_ratio": self.drain_target_ratio,
                "obsolete_drain_rate": self.obsolete_drain_rate, "weight_scale": self.weight_scale}

    def set_target(self, target: Mapping[int, float] | Sequence[float]) -> None:
        """Change the target mixture (e.g. at a chunk with a new target); deficits restart."""
        self.target = _target_list(target)
        self._core.set_shares(quantize_shares(self.target))

    def _weights(self, weights, n: int) -> np.ndarray:
        w = np.asarray(weights).reshape(-1)
        if len(w) != n:
            raise ValueError("weights must have one entry per record")
        if np.issubdtype(w.dtype, np.integer) or w.dtype == np.bool_:
            w = w.astype(np.int64) * self.weight_scale
        else:
            w = np.rint(w.astype(np.float64) * self.weight_scale)
            if not np.all(np.isfinite(w)):
                raise ValueError("weights must be finite")
        if n and (w.min() < 0 or w.max() >= MAX_WEIGHT):
            raise ValueError(f"weights must be in [0, {MAX_WEIGHT}) after scaling")
        return np.ascontiguousarray(w, dtype=np.int64)

    def push(self, component_ids, weights, record_ids) -> np.ndarray:
        """Buffer records; returns the record ids emitted now, in order."""
        comps = np.ascontiguousarray(component_ids, dtype=np.int64).reshape(-1)
        rids = np.ascontiguousarray(record_ids, dtype=np.int64).reshape(-1)
        if len(rids) != len(comps):
            raise ValueError("component_ids and record_ids must have equal lengths")
        if len(comps) and (comps.min() < 0 or comps.max() >= 1 << 16):
            raise ValueError("component ids must be in [0, 65536)")
        return self._core.push(comps, self._weights(weights, len(comps)), rids)

    def flush(self) -> MixerFlush:
        """End of stream: (emitted, dropped); the balancer is fresh afterwards."""
        return MixerFlush(*self._core.flush())

    @property
    def pending(self) -> int:
        return int(self._core.buffered)

    def has_pending(self) -> bool:
        return self.pending > 0

    def emitted_weight(self) -> np.ndarray:
        """Scaled weight emitted per component since the last flush."""
        return np.asarray(self._core.export()["emitted_weight"], dtype=np.int64)

    def realized_shares(self) -> np.ndarray:
        """Share of emitted weight per component (for warn_tolerance checks)."""
        e = self.emitted_weight().astype(np.float64)
        return e / e.sum() if e.sum() > 0 else e

    def get_state(self) -> dict[str, Any]:
        """JSON-serialisable: per-component buffers of [record_id, weight, arrival_seq],
        integer shares and deficits, emitted weights, obsolete credit and sequence counter."""
        return {"version": STATE_VERSION, "target": list(self.target), **self._core.export()}

    @classmethod
    def from_state(cls, config: dict[str, Any], state: dict[str, Any]) -> MixtureBalancer:
        mb = cls(**config)
        if state.get("version") != STATE_VERSION:
            raise ValueError("mixture state does not match this version")
        try:
            mb.target = [float(x) for x in state["target"]]
            clean = {
                "shares": [int(x) for x in state["shares"]],
                "deficit": [int(x) for x in state["deficit"]],
                "emitted_weight": [int(x) for x in state["emitted_weight"]],
                "buffers": [[[int(r), int(w), int(s)] for r, w, s in b] for b in state["buffers"]],
                "obsolete_credit": int(state["obsolete_credit"]), "seq": int(state["seq"]),
            }
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed mixture state: {e}") from None
        if not (len(clean["deficit"]) == len(clean["emitted_weight"]) == len(clean["shares"])
                and len(clean["buffers"]) <= len(clean["shares"])
                and sum(clean["shares"]) == SHARE_SCALE and min(clean["shares"]) >= 0):
            raise ValueError("malformed mixture state: inconsistent component arrays")
        mb._core.load(clean)
        return mb

    def __reduce__(self):
        return (MixtureBalancer.from_state, (self.config, self.get_state()))
