"""The WorkSource interface and the WorkChunk it produces."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zephon.work.read_config import ComponentOrder, MixtureReadConfig, MixtureReadMode

__all__ = ["ComponentOrder", "MixtureReadConfig", "MixtureReadMode", "SampleId", "WorkChunk",
           "WorkSource"]

SampleId = tuple[int, int, int]  # (dataset_id, shard_id, sample_idx)
"""A sample pointer: ``(dataset_id, shard_id, sample_idx)``; ``dataset_id`` is the dataset's
position in the work source's ``datasets``."""


@dataclass(frozen=True, eq=False, init=False)
class WorkChunk:
    """A bundle of sample pointers for one lane, column-wise and already in read order.

    ``dataset_id[i], shard_id[i], sample_idx[i]`` is the i-th pointer to read. ``chunk_id``
    counts the lane's chunks (0, 1, 2, ...); ``global_index`` is the chunk's place in the
    global curriculum. ``components`` regroups the pointers by component name on demand (for
    code written against the reference API); the engine uses the arrays.

    The reference's form ``WorkChunk(components={name: [(dataset_id, shard_id, sample_idx),
    ...]}, seed=None, target_mixture=None, source_exhausted=())`` builds the same thing: the
    components are interleaved by smooth weighted round robin over their counts, each in its
    listed order (how the reference reads a chunk).

    Args:
        dataset_id: Each pointer's dataset (its position in the work source's datasets).
        shard_id: Each pointer's shard.
        sample_idx: Each pointer's row within its shard.
        lane_id: The lane the chunk belongs to.
        chunk_id: The chunk's number within its lane.
        global_index: The chunk's place in the global curriculum.
        seed: The chunk's seed (for read orders that shuffle; None is 0).
        target_mixture: The mixture the chunk was drawn for, by component name (normalised).
        component_names: The component name of each dataset id.
        components: Instead of the arrays: ``{name: [(dataset_id, shard_id, sample_idx), ...]}``.
        source_exhausted: Names of the components whose data ran out in this chunk.

    Raises:
        TypeError: Both or neither of the arrays and ``components``.
        ValueError: Arrays of different lengths, repeated names, or weights that do not sum
            to more than 0.
    """

    dataset_id: np.ndarray
    shard_id: np.ndarray
    sample_idx: np.ndarray
    lane_id: int = 0
    chunk_id: int = 0
    global_index: int = 0
    seed: int = 0
    target_mixture: dict[str, float] | None = None
    component_names: tuple[str, ...] = field(default=(), repr=False)

    source_exhausted: tuple[str, ...] = ()

    def __init__(self, dataset_id: Any = None, shard_id: Any = None, sample_idx: Any = None,
                 lane_id: int = 0, chunk_id: int = 0, global_index: int = 0,
                 seed: int | None = 0, target_mixture: Mapping[str, float] | None = None,
                 component_names: tuple[str, ...] = (), *,
                 components: Mapping[str, Any] | None = None,
                 source_exhausted: Any = ()) -> None:
        if isinstance(dataset_id, Mapping):  # the reference's positional components
            components, dataset_id = dataset_id, None
        if components is not None:
            if dataset_id is not None or shard_id is not None or sample_idx is not None:
                raise TypeError("WorkChunk: pass components= or the pointer arrays, not both")
            dataset_id, shard_id, sample_idx, component_names = _from_components(components)
        elif dataset_id is None or shard_id is None or sample_idx is None:
            raise TypeError("WorkChunk needs dataset_id, shard_id and sample_idx (or components=)")
        exhausted = tuple(source_exhausted or ())
        if len(set(exhausted)) != len(exhausted):
            raise ValueError(f"WorkChunk: source_exhausted names repeat: {list(exhausted)}")
        if target_mixture is not None:
            total = float(sum(target_mixture.values()))
            if total <= 0:
                raise ValueError("WorkChunk: target_mixture weights must sum to > 0")
            target_mixture = {str(k): float(v) / total for k, v in target_mixture.items()}
        for name, value in (("dataset_id", dataset_id), ("shard_id", shard_id),
                            ("sample_idx", sample_idx), ("lane_id", int(lane_id)),
                            ("chunk_id", int(chunk_id)), ("global_index", int(global_index)),
                            ("seed", 0 if seed is None else int(seed)),
                            ("target_mixture", target_mixture),
                            ("component_names", tuple(component_names)),
                            ("source_exhausted", exhausted)):
            object.__setattr__(self, name, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        for name in ("dataset_id", "shard_id", "sample_idx"):
            arr = np.ascontiguousarray(getattr(self, name), dtype=np.int64)
            arr.flags.writeable = False  # chunks are shared by reference; nobody may edit them
            object.__setattr__(self, name, arr)
        if not (self.dataset_id.shape == self.shard_id.shape == self.sample_idx.shape):
            raise ValueError("dataset_id, shard_id and sample_idx must have the same length")

    def __len__(self) -> int:
        return int(self.dataset_id.shape[0])

    def _name(self, dataset_id: int) -> str:
        if 0 <= dataset_id < len(self.component_names):
            return self.component_names[dataset_id]
        return str(dataset_id)

    @property
    def components(self) -> dict[str, list[SampleId]]:
        """Component name -> its pointers in read order (every component, maybe empty)."""
        out: dict[str, list[SampleId]] = {n: [] for n in self.component_names}
        for d, s, i in zip(self.dataset_id.tolist(), self.shard_id.tolist(),
                           self.sample_idx.tolist()):
            out.setdefault(self._name(d), []).append((d, s, i))
        return out

    def counts(self) -> dict[str, int]:
        """Pointers per component name."""
        n = max(len(self.component_names), int(self.dataset_id.max()) + 1 if len(self) else 0)
        bins = np.bincount(self.dataset_id, minlength=n)
        return {self._name(d): int(bins[d]) for d in range(n)}

    def pointers(self) -> list[SampleId]:
        """All pointers as tuples, in read order."""
        return list(zip(self.dataset_id.tolist(), self.shard_id.tolist(),
                        self.sample_idx.tolist()))

    def read_order(self, config: Any = None) -> np.ndarray:
        """Positions of the pointers in the order ``config`` reads them.

        Args:
            config: A ``MixtureReadConfig`` (or a dict of it); None: the stored order.

        Returns:
            The positions (int64).
        """
        from zephon.work.read_config import coerce, read_order

        order = read_order(self.dataset_id, self.seed, coerce(config))
        return np.arange(len(self), dtype=np.int64) if order is None else order

    def iter_samples(self, config: Any = None):
        """The pointers as tuples in the order ``config`` reads them.

        Args:
            config: A ``MixtureReadConfig``; None: the stored order.

        Returns:
            pointers (Iterator[SampleId]): ``(dataset_id, shard_id, sample_idx)`` tuples.
        """
        order = self.read_order(config)
        return zip(self.dataset_id[order].tolist(), self.shard_id[order].tolist(),
                   self.sample_idx[order].tolist())

    def sample_at(self, index: int, config: Any = None) -> SampleId:
        """The ``index``-th pointer in the order ``config`` reads them.

        Args:
            index: The position in that order.
            config: A ``MixtureReadConfig``; None: the stored order.

        Returns:
            ``(dataset_id, shard_id, sample_idx)``.
        """
        i = int(self.read_order(config)[index])
        return int(self.dataset_id[i]), int(self.shard_id[i]), int(self.sample_idx[i])

    def reordered(self, config: Any = None) -> WorkChunk:
        """This chunk with its pointers stored in the order ``config`` reads them.

        Args:
            config: A ``MixtureReadConfig``; None: the stored order (the chunk itself).

        Returns:
            The chunk.
        """
        from zephon.work.read_config import coerce, read_order

        order = read_order(self.dataset_id, self.seed, coerce(config))
        if order is None:
            return self
        return WorkChunk(self.dataset_id[order], self.shard_id[order], self.sample_idx[order],
                         self.lane_id, self.chunk_id, self.global_index, self.seed,
                         self.target_mixture, self.component_names,
                         source_exhausted=self.source_exhausted)


def _from_components(components: Mapping[str, Any]) -> tuple:
    """Pointer arrays in SWRR read order from ``{name: [(dataset, shard, sample), ...]}``, and
    the component name of each dataset id (where a component reads a single dataset)."""
    from zephon._ext import kernel

    names = list(components)
    lists = [np.asarray(list(components[n]), dtype=np.int64).reshape(-1, 3) for n in names]
    counts = np.asarray([len(x) for x in lists], dtype=np.int64)
    flat = np.concatenate(lists) if lists else np.empty((0, 3), dtype=np.int64)
    order = kernel("curriculum").swrr_interleave(counts)
    src = np.empty(len(flat), dtype=np.int64)  # the k-th visit of c reads c's k-th pointer
    src[np.argsort(order, kind="stable")] = np.arange(len(flat), dtype=np.int64)
    flat = flat[src]
    by_id: dict[int, str] = {}
    for n, x in zip(names, lists):
        ds = np.unique(x[:, 0]).tolist()
        if len(ds) == 1:
            by_id[int(ds[0])] = n
    width = max(by_id, default=-1) + 1
    return (flat[:, 0], flat[:, 1], flat[:, 2],
            tuple(by_id.get(d, str(d)) for d in range(width)))


class WorkSource(ABC):
    """Turns a curriculum into chunks of sample pointers, one lane at a time.

    The user's instance acts as lane 0 of 1 (the whole curriculum); the engine calls
    ``clone_for_lane`` once per lane and pulls each clone with ``next_chunk``. Subclass it for a
    curriculum of your own: ``next_chunk`` and ``datasets_by_id`` are required; with
    ``state_dict`` / ``load_state_dict`` that hold the lane's position, a restore starts from the
    state saved before the oldest chunk it needs, without them it replays the lane's chunks from
    the first (no records are re-read).
    """

    _lane_id: int = 0
    _canonical_replicas: int = 1
    _is_clone: bool = False
    _lane: int = 0  # the reference's names for the lane and the lane count
    _canon: int = 1

    @abstractmethod
    def next_chunk(self) -> WorkChunk | None:
        """The next chunk of this lane, or None when the curriculum is exhausted."""

    @property
    @abstractmethod
    def datasets_by_id(self) -> Mapping[int, Any]:
        """dataset_id -> dataset."""

    def component_ids(self) -> dict[str, int]:
        """Component (dataset) name -> dataset id."""
        return {ds.name: i for i, ds in self.datasets_by_id.items()}

    @property
    def lane_id(self) -> int:
        """The lane this source yields (0 for the user's instance)."""
        return self._lane_id

    @property
    def canonical_replicas(self) -> int:
        """The number of lanes the curriculum is split into (1 for the user's instance)."""
        return self._canonical_replicas

    def clone_for_lane(self, lane_id: int, canonical_replicas: int) -> WorkSource:
        """A copy bound to one lane that yields only that lane's chunks.

        Args:
            lane_id: The lane, in ``[0, canonical_replicas)``.
            canonical_replicas: The number of lanes.

        Returns:
            The clone, positioned at the lane's first chunk.

        Raises:
            RuntimeError: This is already a clone.
            ValueError: A bad lane or lane count.
        """
        if self._is_clone:
            raise RuntimeError("a lane clone cannot be cloned again; clone the original source")
        if isinstance(canonical_replicas, bool) or not isinstance(canonical_replicas, int) \
                or canonical_replicas < 1:
            raise ValueError(f"canonical_replicas must be an int >= 1, got {canonical_replicas!r}")
        if isinstance(lane_id, bool) or not isinstance(lane_id, int) \
                or not 0 <= lane_id < canonical_replicas:
            raise ValueError(f"lane_id must be in [0, {canonical_replicas}), got {lane_id!r}")
        clone = self._copy_for_lane()
        clone._lane_id = lane_id
        clone._canonical_replicas = canonical_replicas
        clone._lane, clone._canon = lane_id, canonical_replicas  # the reference's names
        clone._is_clone = True
        return clone

    def continues_after_exhaustion(self) -> frozenset[str]:
        """Names of the components that go on yielding after they first run out (they repeat);
        the engine asks once, before cloning. The default: none."""
        return frozenset()

    def _copy_for_lane(self) -> WorkSource:
        """A fresh copy positioned at the lane's first chunk (subclasses may share more)."""
        return copy.deepcopy(self)

    def state_dict(self) -> dict[str, Any]:
        """The lane's position, JSON-serializable. The base class holds no position (lane layout
        only); override it with ``load_state_dict`` to let restores skip the replay."""
        return {"lane_id": self._lane_id, "canonical_replicas": self._canonical_replicas,
                "chunk_size_hint": self.chunk_size_hint()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Return to a position saved by ``state_dict``.

        Args:
            state: A dict from ``state_dict``.

        Raises:
            RuntimeError: The state belongs to another lane layout.
        """
        diffs = [f"{k}: checkpoint {state.get(k)!r}, this source {v!r}"
                 for k, v in (("lane_id", self._lane_id),
                              ("canonical_replicas", self._canonical_replicas))
                 if state.get(k) != v]
        if diffs:
            raise RuntimeError("cannot restore a work-source checkpoint of another lane layout ("
                               + "; ".join(diffs) + "); clone_for_lane first")

    def chunk_size_hint(self) -> int | None:
        """Pointers per chunk, if the source knows (None otherwise)."""
        return None

    def supports_indexing(self) -> bool:
        """Whether ``sample_id_at`` works (map-style access); False here."""
        return False

    def sample_id_at(self, index: int) -> SampleId:
        """The ``index``-th sample of the curriculum, for sources that support indexing.

        Args:
            index: The position in the curriculum.

        Returns:
            ``(dataset_id, shard_id, sample_idx)``.

        Raises:
            TypeError: The source does not support indexing.
        """
        raise TypeError(f"{type(self).__name__} does not support indexing")

    @property
    def total_samples(self) -> float:
        """Samples in the curriculum; ``inf`` when it has no end."""
        return float("inf")

    def __len__(self) -> int:
        total = self.total_samples
        if total == float("inf"):
            raise TypeError(f"{type(self).__name__} is unbounded and has no len()")
        return int(total)
