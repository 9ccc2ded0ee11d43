"""Packing homogeneity: which components may share a packed row."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


class DomainGroups:
    """Named groups of mixture components: ``DomainGroups({"code": ["py", "js"], ...})``, for
    ``pack_flat(homogeneity="group", groups=...)``: each packed row holds one group only.

    Args:
        groups: Group name -> its dataset names (a dataset in at most one group).

    Raises:
        ValueError: A dataset in two groups.
    """

    def __init__(self, groups: Mapping[str, Sequence[str]]) -> None:
        self.groups = {str(g): list(m) for g, m in groups.items()}
        seen: dict[str, str] = {}
        for g, members in self.groups.items():
            for m in members:
                if m in seen:
                    raise ValueError(f"component {m!r} is in groups {seen[m]!r} and {g!r}")
                seen[m] = g

    def __repr__(self) -> str:
        return f"DomainGroups({self.groups!r})"


def resolve_groups(homogeneity: str, groups: Any, names: list[str]) -> np.ndarray:
    """Group id per component id: all 0 ("none"), the component itself ("full"), or by group."""
    if homogeneity not in ("none", "full", "group"):
        raise ValueError(f"homogeneity must be none|full|group, got {homogeneity!r}")
    if groups is not None and homogeneity != "group":
        raise ValueError("groups= needs homogeneity='group'")
    if homogeneity == "none":
        return np.zeros(len(names), dtype=np.int64)
    if homogeneity == "full":
        return np.arange(len(names), dtype=np.int64)
    if groups is None:
        raise ValueError("homogeneity='group' needs groups=")
    g = groups if isinstance(groups, DomainGroups) else DomainGroups(groups)
    out = np.full(len(names), -1, dtype=np.int64)
    for gid, (gname, members) in enumerate(sorted(g.groups.items())):
        for m in members:
            if m not in names:
                raise ValueError(f"packing group {gname!r} names unknown component {m!r}; "
                                 f"known: {names}")
            out[names.index(m)] = gid
    alone = [names[i] for i in np.flatnonzero(out < 0)]
    if alone:
        warnings.warn(f"components {alone} are in no packing group: each packs alone", stacklevel=4)
        for i in np.flatnonzero(out < 0):
            out[i] = len(g.groups) + int(i)
    return out


def group_of_components(group_map: np.ndarray, component_ids: np.ndarray) -> np.ndarray:
    return group_map[np.asarray(component_ids, dtype=np.int64)]
