"""What a ``StaticMixtureWorkSource`` checkpoint holds, and how one is read back.

A lane's checkpoint is its next chunk id plus the configuration that id belongs to: dataset
names and sizes, exact mixture weights, allocation (samples or tokens) and the tokens per byte a
token-aware source was primed with, and the termination and shuffle knobs. Reading it back is
where the mistakes show (another source's checkpoint, datasets renamed or reordered, a
termination argument passed now that says otherwise), so each is refused with what differs;
a dataset that changed size only warns, since the stream can go on, differently.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, NamedTuple

from zephon.work import config as cfg
from zephon.work.mixture import MixtureSpec
from zephon.work.token_estimation import check_ratio

__all__ = ["MixtureState", "mixture_state", "read_mixture_state"]

TERMINATION_ARGS = ("exhausted_policy", "max_repeats", "stop_after_passes", "reshuffle_on_repeat")
STATE_KIND = "zephon.static_mixture"
STATE_VERSION = 1


class MixtureState(NamedTuple):
    """What a checkpoint sets on the source that reads it."""

    knobs: cfg.Knobs
    mixture: MixtureSpec
    token_ratios: dict[str, float] | None
    next_chunk_id: int


def mixture_state(names: tuple[str, ...], knobs: cfg.Knobs, mixture: MixtureSpec,
                  token_aware: bool, token_ratios: dict[str, float] | None,
                  totals: dict[str, int], next_chunk_id: int) -> dict[str, Any]:
    """The checkpoint fields of a source at ``next_chunk_id`` (``totals``: rows per dataset)."""
    state = knobs.to_state(names)
    state.update({
        "kind": STATE_KIND,
        "version": STATE_VERSION,
        "names": list(names),
        "weights": mixture.weights,
        "weights_exact": {n: str(w) for n, w in mixture.exact.items()},
        "allocation": "tokens" if token_aware else "samples",
        "token_ratios": token_ratios,
        "dataset_totals": totals,
        "next_chunk_id": next_chunk_id,
    })
    return state


def read_mixture_state(state: Mapping[str, Any], names: tuple[str, ...], knobs: cfg.Knobs,
                       explicit: set[str], token_aware: bool,
                       totals: dict[str, int]) -> MixtureState:
    """``state`` checked against the source reading it (its ``names``, ``knobs``, the
    termination arguments given ``explicit``ly, ``totals``: rows per dataset now).

    Raises:
        RuntimeError: Not a StaticMixtureWorkSource checkpoint, other datasets or order, another
            allocation, an explicit termination argument that contradicts it, or a malformed
            field.
    """
    if state.get("kind") != STATE_KIND or state.get("version") != STATE_VERSION:
        raise RuntimeError(f"not a StaticMixtureWorkSource checkpoint (kind "
                           f"{state.get('kind')!r}, version {state.get('version')!r})")
    saved = list(state.get("names") or [])
    if saved != list(names):
        raise RuntimeError(_name_diff(saved, list(names)))
    allocation = "tokens" if token_aware else "samples"
    if state.get("allocation") != allocation:
        raise RuntimeError(f"checkpoint allocates {state.get('allocation')}, this source "
                           f"allocates {allocation} (token_estimation differs)")
    read_knobs = cfg.Knobs.from_state(state, names)
    mine = knobs.to_state(names)
    clash = [f"{a}: checkpoint {state[a]!r}, passed {mine[a]!r}" for a in TERMINATION_ARGS
             if a in explicit and state[a] != mine[a]]
    if clash:
        raise RuntimeError("explicit termination arguments contradict the checkpoint: "
                           + "; ".join(clash))
    changed = [n for n in names if (state.get("dataset_totals") or {}).get(n) != totals[n]]
    if changed:  # stacklevel 3: the caller of the source's load_state_dict
        warnings.warn(f"dataset(s) {changed} changed size since the checkpoint: the remaining "
                      "stream will differ from the uninterrupted one", UserWarning, stacklevel=3)
    try:
        mixture = MixtureSpec({n: Fraction(state["weights_exact"][n]) for n in names})
        ratios = state.get("token_ratios")
        if ratios is not None:
            ratios = {n: check_ratio(ratios[n], f"tokens per byte of {n!r}") for n in names}
        next_id = cfg.check_int("next_chunk_id", state["next_chunk_id"], 0)
    except (KeyError, TypeError, ValueError) as exc:
        raise RuntimeError(f"malformed work-source checkpoint: {exc!r}") from exc
    return MixtureState(read_knobs, mixture, ratios, next_id)


def _name_diff(ckpt: list[str], mine: list[str]) -> str:
    missing = [n for n in ckpt if n not in mine]
    extra = [n for n in mine if n not in ckpt]
    if missing or extra:
        return (f"checkpoint datasets {ckpt} differ from this source's {mine}: missing "
                f"{missing}, extra {extra}")
    return f"dataset order differs: checkpoint {ckpt}, this source {mine}"
