"""Validation and normalisation of the StaticMixtureWorkSource knobs.

Every user-facing argument is checked here and turned into a per-dataset tuple, so the rest of
the curriculum never has to interpret scalars-or-mappings again.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

BlockSpec = Union[None, int, str]
POLICIES = ("stop", "repeat", "redistribute")
LANE_ASSIGNMENTS = ("modulo", "permute")


@dataclass(frozen=True)
class Termination:
    """When the source ends, per dataset (all tuples aligned with the datasets)."""

    policies: tuple[str, ...]  # "stop" | "repeat" | "redistribute"
    max_repeats: tuple[int | None, ...]  # restarts allowed after the first pass
    passes: int | None  # stop_after_passes floor, or None

    def sample_limits(self, totals: Sequence[int]) -> tuple[str, tuple[int | None, ...]]:
        """("all" | "any", per-dataset sample counts that end the stream).

        "all": the stream ends right after the sample that brings the last dataset to its
        limit. "any": it ends right after the first dataset reaches its limit. A limit of None
        never ends the stream; all None means an infinite stream.
        """
        if self.passes is not None:
            return "all", tuple(self.passes * n for n in totals)
        limits = []
        for pol, cap, n in zip(self.policies, self.max_repeats, totals):
            if pol == "stop":
                limits.append(n)
            elif pol == "redistribute":  # leaves the mixture after its pass (redistributed)
                limits.append(None)
            else:
                limits.append(None if cap is None else (cap + 1) * n)
        return "any", tuple(limits)

    def redistributed(self, totals: Sequence[int]) -> tuple[int | None, ...]:
        """Per dataset: the samples after which its share goes to the others ("redistribute"),
        else None."""
        if self.passes is not None:
            return (None,) * len(totals)
        return tuple(n if p == "redistribute" else None for p, n in zip(self.policies, totals))


def check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def check_seed(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"seed must be an integer, got {value!r}")
    return int(value)


def check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def check_lane_assignment(value: Any) -> str:
    if value not in LANE_ASSIGNMENTS:
        raise ValueError(f"lane_assignment must be one of {LANE_ASSIGNMENTS}, got {value!r}")
    return str(value)


def check_block_spec(value: Any) -> BlockSpec:
    """shuffle_block_size: None, a positive int, "auto" or "global" (bool is rejected)."""
    if value is None or value in ("auto", "global"):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ValueError("shuffle_block_size must be None, a positive int, 'auto' or 'global', "
                         f"got {value!r}")
    return int(value)


def resolve_block_sizes(spec: BlockSpec, counts: Sequence[Sequence[int]]) -> tuple[int | None, ...]:
    """Per-dataset block size, clamped to the dataset total; None means no block shuffle."""
    totals = [int(sum(c)) for c in counts]
    if spec is None:
        return tuple(None for _ in totals)
    if spec == "global":
        return tuple(totals)
    if spec == "auto":
        largest = max((int(x) for c in counts for x in c), default=0)
        if largest <= 0:
            raise ValueError("shuffle_block_size='auto' needs at least one non-empty shard")
        spec = 8 * largest
    return tuple(min(int(spec), n) for n in totals)


def _per_dataset(name: str, value: Any, names: Sequence[str], default: Any) -> list[Any]:
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in names]
        if unknown:
            raise ValueError(f"{name} names unknown dataset(s) {unknown}; datasets are {list(names)}")
        return [value.get(n, default) for n in names]
    return [value for _ in names]


def resolve_reshuffle(value: Any, names: Sequence[str], explicit: bool) -> tuple[bool, ...]:
    vals = _per_dataset("reshuffle_on_repeat", value if explicit else True, names, True)
    return tuple(check_flag("reshuffle_on_repeat", v) for v in vals)


def resolve_termination(names: Sequence[str], exhausted_policy: Any, max_repeats: Any,
                        stop_after_passes: Any, passes_explicit: bool) -> Termination:
    """The spec's table: nothing -> repeat with a one-pass floor; "repeat" only -> infinite;
    "stop" -> end at the first exhaustion; stop_after_passes=N -> repeat with an N-pass floor.

    Datasets a policy mapping leaves out repeat (the default behaviour); max_repeats=N allows
    the first pass plus N more, and the stream ends right after the last of them.
    """
    if exhausted_policy is None:
        policies = ["repeat"] * len(names)
    else:
        policies = _per_dataset("exhausted_policy", exhausted_policy, names, "repeat")
        for p in policies:
            if p not in POLICIES:
                raise ValueError(f"exhausted_policy must be 'stop', 'repeat' or 'redistribute' "
                                 f"(or a mapping of them), got {p!r}")
    caps: list[int | None] = [None] * len(names)
    if max_repeats is not None:
        raw = _per_dataset("max_repeats", max_repeats, names, None)
        caps = [None if v is None else check_int("max_repeats", v, 0) for v in raw]
        ignored = [n for n, p, c in zip(names, policies, caps) if p != "repeat" and c is not None]
        if ignored:
            warnings.warn(f"max_repeats is ignored for non-repeating dataset(s) {ignored}",
                          UserWarning, stacklevel=4)
            caps = [c if p == "repeat" else None for p, c in zip(policies, caps)]
    if passes_explicit:
        passes = None if stop_after_passes is None else check_int("stop_after_passes",
                                                                 stop_after_passes, 1)
        if passes is not None and (any(p != "repeat" for p in policies) or max_repeats is not None):
            raise ValueError("stop_after_passes requires every dataset to repeat: it cannot be "
                             "combined with exhausted_policy='stop' or with max_repeats")
    else:
        passes = 1 if exhausted_policy is None and max_repeats is None else None
    return Termination(tuple(policies), tuple(caps), passes)


@dataclass(frozen=True)
class Knobs:
    """Everything besides datasets and weights that fixes the curriculum (all validated)."""

    chunk_size: int
    seed: int
    shuffle_shards: bool
    shuffle_within_shard: bool
    block_spec: BlockSpec
    block_sizes: tuple[int | None, ...]  # resolved per dataset, frozen into checkpoints
    termination: Termination
    reshuffle: tuple[bool, ...]
    lane_assignment: str

    def to_state(self, names: Sequence[str]) -> dict[str, Any]:
        t = self.termination
        return {
            "chunk_size": self.chunk_size,
            "seed": self.seed,
            "shuffle_shards": self.shuffle_shards,
            "shuffle_within_shard": self.shuffle_within_shard,
            "shuffle_block_size": self.block_spec,
            "block_sizes": dict(zip(names, self.block_sizes)),
            "exhausted_policy": dict(zip(names, t.policies)),
            "max_repeats": dict(zip(names, t.max_repeats)),
            "stop_after_passes": t.passes,
            "reshuffle_on_repeat": dict(zip(names, self.reshuffle)),
            "lane_assignment": self.lane_assignment,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], names: Sequence[str]) -> Knobs:
        try:
            blocks = tuple(None if state["block_sizes"][n] is None
                           else check_int("block size", state["block_sizes"][n], 1) for n in names)
            policies = tuple(state["exhausted_policy"][n] for n in names)
            if any(p not in POLICIES for p in policies):
                raise ValueError(f"bad exhausted_policy {policies}")
            caps = tuple(None if state["max_repeats"][n] is None
                         else check_int("max_repeats", state["max_repeats"][n], 0) for n in names)
            passes = state["stop_after_passes"]
            term = Termination(policies, caps,
                               None if passes is None else check_int("stop_after_passes", passes, 1))
            return cls(
                chunk_size=check_int("chunk_size", state["chunk_size"], 1),
                seed=check_seed(state["seed"]),
                shuffle_shards=check_flag("shuffle_shards", state["shuffle_shards"]),
                shuffle_within_shard=check_flag("shuffle_within_shard",
                                                state["shuffle_within_shard"]),
                block_spec=check_block_spec(state["shuffle_block_size"]),
                block_sizes=blocks,
                termination=term,
                reshuffle=tuple(check_flag("reshuffle_on_repeat", state["reshuffle_on_repeat"][n])
                                for n in names),
                lane_assignment=check_lane_assignment(state["lane_assignment"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RuntimeError(f"malformed work-source checkpoint: {exc!r}") from exc
