"""StaticMixtureWorkSource: a fixed mixture of datasets as a random-access chunk stream.

Chunk ``j`` of lane ``l`` is a pure function of the configuration: the lane router names its
global chunk ``g``, the quota schedule gives each dataset's stream range in ``g``, the dataset
orders turn ranges into pointers, and the round robin kernel interleaves them. Nothing depends
on which chunks were generated before, so a lane computes only its own chunks, a checkpoint is
just the next chunk id, and restore is O(1) in training progress.

Differences from the reference (deliberate): no epoch tail is dropped (a pass ending mid-quota
continues with the next epoch's order in the same chunk); the default ``stop_after_passes=1``
ends exactly when the last dataset completes its pass, and "stop" before the first chunk
whose quota a stop dataset cannot supply (right after its last sample if that chunk holds
it); a dataset smaller than its per-chunk quota wraps
instead of being refused; lanes never generate each other's chunks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, Union

import numpy as np

from zephon._ext import kernel
from zephon.work import config as cfg
from zephon.work.base import WorkChunk, WorkSource
from zephon.work.hashing import TAG_CHUNK_SEED, derive_key
from zephon.work.lanes import LaneRouter
from zephon.work.mixture import MixtureSpec
from zephon.work.mixture_state import mixture_state, read_mixture_state
from zephon.work.order import DatasetOrder
from zephon.work.plan import CurriculumPlan
from zephon.work.quotas import QuotaSchedule, RedistributedQuotas
from zephon.work.token_estimation import (
    TokenEstimation,
    check_ratio,
    mean_bytes_per_sample,
    token_sample_weights,
)


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()


class StaticMixtureWorkSource(WorkSource):
    """Datasets mixed in fixed proportions, cut into chunks of ``chunk_size`` pointers.

    Chunk ``j`` of a lane is a pure function of the configuration, so a lane computes only its
    own chunks and a checkpoint is the next chunk id. Every sample of every dataset is visited
    once per pass: no epoch tail is dropped.

    Args:
        datasets: The datasets (unique names).
        mixture: A ``MixtureSpec`` or ``{dataset name: weight}`` naming every dataset.
        chunk_size: Pointers per chunk; each chunk holds every dataset in proportion.
        seed: Seed of every order (shards, rows, blocks, lane routing).
        shuffle_shards: Visit each dataset's shards in a seeded order (rows within a shard stay
            in order, which keeps reads sequential).
        shuffle_within_shard: Also permute the rows inside each shard (costly for Parquet).
        shuffle_block_size: Shuffle each dataset's sequence in blocks of this many pointers:
            an int, ``"auto"`` (8 x the largest shard) or ``"global"`` (the whole dataset);
            None: no block shuffle.
        exhausted_policy: ``"stop"`` (the source ends when this dataset cannot supply its next
            chunk's quota), ``"repeat"`` (it starts a new pass) or ``"redistribute"`` (after
            its pass its share goes to the datasets still in the mixture; the source ends when
            none is left), for all datasets or per name.
        reshuffle_on_repeat: A new order for every pass (default True), for all or per name.
        max_repeats: Passes after the first that a repeating dataset may make, for all or per
            name; the source ends when one would exceed it.
        stop_after_passes: End once every dataset has completed this many passes (the default,
            1, when neither ``exhausted_policy`` nor ``max_repeats`` is given); None: no such
            end.
        lane_assignment: How chunks go to lanes: ``"permute"`` (each block of
            ``canonical_replicas`` chunks through a seeded permutation of the lanes) or
            ``"modulo"`` (chunk g to lane g mod lanes).
        token_estimation: A ``TokenEstimation`` makes the weights token shares instead of
            sample shares.

    Raises:
        ValueError: Empty or repeated datasets, a mixture that does not name exactly the
            datasets, or a bad knob.
    """

    def __init__(self, datasets: Iterable[Any], mixture: Union[MixtureSpec, Mapping[str, float]],
                 chunk_size: int = 16384, seed: int = 0, shuffle_shards: bool = True,
                 shuffle_within_shard: bool = False,
                 shuffle_block_size: Union[None, int, str] = None,
                 exhausted_policy: Union[None, str, Mapping[str, str]] = None,
                 reshuffle_on_repeat: Union[bool, Mapping[str, bool]] = _UNSET,
                 max_repeats: Union[None, int, Mapping[str, int | None]] = None,
                 stop_after_passes: int | None = _UNSET,
                 lane_assignment: str = "permute",
                 token_estimation: TokenEstimation | None = None) -> None:
        if isinstance(datasets, (str, bytes)) or not isinstance(datasets, Iterable):
            raise ValueError("datasets must be a list of datasets")
        self._datasets = list(datasets)
        if not self._datasets:
            raise ValueError("datasets must not be empty")
        names = [str(ds.name) for ds in self._datasets]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"dataset names must be unique, repeated: {dupes}")
        self._names = tuple(names)
        self._shards = [_shard_table(ds) for ds in self._datasets]
        self._mixture = MixtureSpec.coerce(mixture)
        self._mixture.check_names(names)
        passes_explicit = stop_after_passes is not _UNSET
        reshuffle_explicit = reshuffle_on_repeat is not _UNSET
        block_spec = cfg.check_block_spec(shuffle_block_size)
        self._knobs = cfg.Knobs(
            chunk_size=cfg.check_int("chunk_size", chunk_size, 1),
            seed=cfg.check_seed(seed),
            shuffle_shards=cfg.check_flag("shuffle_shards", shuffle_shards),
            shuffle_within_shard=cfg.check_flag("shuffle_within_shard", shuffle_within_shard),
            block_spec=block_spec,
            block_sizes=cfg.resolve_block_sizes(block_spec, [c for _, c in self._shards]),
            termination=cfg.resolve_termination(names, exhausted_policy, max_repeats,
                                                stop_after_passes, passes_explicit),
            reshuffle=cfg.resolve_reshuffle(reshuffle_on_repeat, names, reshuffle_explicit),
            lane_assignment=cfg.check_lane_assignment(lane_assignment),
        )
        self._explicit = {name for name, given in (
            ("exhausted_policy", exhausted_policy is not None),
            ("max_repeats", max_repeats is not None),
            ("stop_after_passes", passes_explicit),
            ("reshuffle_on_repeat", reshuffle_explicit)) if given}
        if token_estimation is not None and not isinstance(token_estimation, TokenEstimation):
            raise ValueError("token_estimation must be a TokenEstimation or None")
        self._token_estimation = token_estimation
        self._token_ratios: dict[str, float] | None = None
        if token_estimation is not None:
            pinned = token_estimation.pinned_ratios(names)
            if set(pinned) == set(names):  # nothing to measure: primed already
                self._token_ratios = pinned
        self._next_chunk_id = 0
        self._plan: CurriculumPlan | None = None
        self._routers: dict[int, LaneRouter] = {}
        # Quota schedules are pure and only memoise, so lane clones share them: a schedule
        # with a rare component is walked step by step once per process, not once per lane.
        self._shared_quotas: dict[tuple, QuotaSchedule] = {}

    # -- configuration ---------------------------------------------------------------------

    @property
    def datasets(self) -> list[Any]:
        """The datasets, in dataset-id order."""
        return list(self._datasets)

    @property
    def datasets_by_id(self) -> dict[int, Any]:
        """Dataset id -> dataset."""
        return dict(enumerate(self._datasets))

    def component_ids(self) -> dict[str, int]:
        """Dataset name -> dataset id."""
        return {n: i for i, n in enumerate(self._names)}

    @property
    def mixture(self) -> MixtureSpec:
        """The target mixture."""
        return self._mixture

    @property
    def chunk_size(self) -> int:
        """Pointers per chunk."""
        return self._knobs.chunk_size

    @property
    def seed(self) -> int:
        """The curriculum's seed."""
        return self._knobs.seed

    @property
    def lane_assignment(self) -> str:
        """``"permute"`` or ``"modulo"``."""
        return self._knobs.lane_assignment

    @property
    def resolved_block_sizes(self) -> dict[str, int | None]:
        """Each dataset's block-shuffle size after ``"auto"`` / ``"global"`` are resolved (None:
        no block shuffle)."""
        return dict(zip(self._names, self._knobs.block_sizes))

    def chunk_size_hint(self) -> int:
        """Pointers per chunk (``chunk_size``)."""
        return self._knobs.chunk_size

    # -- token-aware mixtures --------------------------------------------------------------

    @property
    def token_estimation(self) -> TokenEstimation | None:
        """The ``TokenEstimation`` of a token-aware source, else None."""
        return self._token_estimation

    @property
    def token_ratios(self) -> dict[str, float] | None:
        """Tokens per stored byte of each dataset once known (None before priming or without
        token estimation)."""
        return None if self._token_ratios is None else dict(self._token_ratios)

    def datasets_to_measure(self) -> list[str]:
        """Datasets whose tokens per byte the priming step must measure (empty when primed)."""
        if self._token_estimation is None or self._token_ratios is not None:
            return []
        pinned = self._token_estimation.pinned_ratios(self._names)
        return [n for n in self._names if n not in pinned]

    def set_token_ratios(self, ratios: Mapping[str, float]) -> None:
        """Prime a token-aware source with measured tokens per byte (pinned primer values win).

        The pipeline does this itself before the first batch; call it only to supply figures of
        your own.

        Args:
            ratios: Dataset name -> tokens per stored byte.

        Raises:
            RuntimeError: The source is not token-aware, or chunks were already drawn.
            ValueError: Unknown, missing or invalid ratios.
        """
        if self._token_estimation is None:
            raise RuntimeError("set_token_ratios needs a source built with token_estimation=...")
        if self._next_chunk_id:
            raise RuntimeError("token ratios must be set before the first chunk is drawn")
        unknown = [n for n in ratios if n not in self._names]
        if unknown:
            raise ValueError(f"token ratios for unknown dataset(s) {unknown}")
        merged = {n: check_ratio(v, f"tokens per byte of {n!r}") for n, v in ratios.items()}
        merged.update(self._token_estimation.pinned_ratios(self._names))
        missing = [n for n in self._names if n not in merged]
        if missing:
            raise ValueError(f"token ratios missing for dataset(s) {missing}")
        self._token_ratios = {n: merged[n] for n in self._names}
        self._plan = None

    def _sample_weights(self) -> list[Fraction]:
        exact = self._mixture.exact
        if self._token_estimation is None:
            return [exact[n] for n in self._names]
        if self._token_ratios is None:
            raise RuntimeError("token-aware work source is not primed yet: tokens per byte of "
                               f"{self.datasets_to_measure()} must be measured (set_token_ratios)")
        return token_sample_weights(self._names, exact, self._token_ratios,
                                    {n: mean_bytes_per_sample(ds)
                                     for n, ds in zip(self._names, self._datasets)})

    # -- the stream ------------------------------------------------------------------------

    def _get_plan(self) -> CurriculumPlan:
        if self._plan is None:
            k, kn = kernel("curriculum"), self._knobs
            orders = [DatasetOrder(i, ids, counts, seed=kn.seed, shuffle_shards=kn.shuffle_shards,
                                   shuffle_within_shard=kn.shuffle_within_shard,
                                   block_size=kn.block_sizes[i], reshuffle=kn.reshuffle[i],
                                   kernel=k)
                      for i, (ids, counts) in enumerate(self._shards)]
            mode, limits = kn.termination.sample_limits([o.total for o in orders])
            weights = self._sample_weights()
            leave = kn.termination.redistributed([o.total for o in orders])
            key = (tuple(weights), kn.chunk_size, leave)
            quotas = self._shared_quotas.get(key) or self._shared_quotas.setdefault(key, (
                RedistributedQuotas(weights, kn.chunk_size, leave)
                if any(n is not None for n in leave) else QuotaSchedule(weights, kn.chunk_size)))
            self._plan = CurriculumPlan(orders, quotas, mode, limits, k)
        return self._plan

    def _router(self, lanes: int) -> LaneRouter:
        r = self._routers.get(lanes)
        if r is None:
            r = self._routers[lanes] = LaneRouter(self._knobs.lane_assignment, lanes,
                                                  self._knobs.seed, kernel("curriculum"))
        return r

    def lane_chunk(self, lane_id: int, canonical_replicas: int, chunk_id: int) -> WorkChunk | None:
        """Chunk ``chunk_id`` of lane ``lane_id`` of ``canonical_replicas`` (None past the end).

        Args:
            lane_id: The lane.
            canonical_replicas: The number of lanes.
            chunk_id: The chunk's number within the lane.

        Returns:
            The chunk, or None past the end of the curriculum.
        """
        lanes = cfg.check_int("canonical_replicas", canonical_replicas, 1)
        lane = cfg.check_int("lane_id", lane_id, 0)
        if lane >= lanes:
            raise ValueError(f"lane_id must be < canonical_replicas={lanes}, got {lane}")
        cid = cfg.check_int("chunk_id", chunk_id, 0)
        g = self._router(lanes).global_index(lane, cid)
        gc = self._get_plan().chunk(g)
        if gc is None:
            return None
        return WorkChunk(gc.dataset_id, gc.shard_id, gc.sample_idx, lane_id=lane, chunk_id=cid,
                         global_index=g,
                         seed=derive_key(self._knobs.seed, TAG_CHUNK_SEED, g) >> 1,
                         target_mixture=(self._mixture.weights if self._token_estimation else None),
                         component_names=self._names)

    def next_chunk(self) -> WorkChunk | None:
        """This lane's next chunk, or None at the end (which leaves the position alone)."""
        chunk = self.lane_chunk(self._lane_id, self._canonical_replicas, self._next_chunk_id)
        if chunk is not None:  # a terminal None leaves the position alone
            self._next_chunk_id += 1
        return chunk

    def num_chunks(self) -> int | None:
        """This lane's chunks in total (the last may be short), or None if unbounded."""
        n_global = self._get_plan().num_chunks
        if n_global is None:
            return None
        return self._router(self._canonical_replicas).chunks_of_lane(self._lane_id, n_global)

    @property
    def total_samples(self) -> float:
        """Pointers this lane yields in total (``inf`` when unbounded)."""
        plan = self._get_plan()
        if plan.num_chunks is None:
            return float("inf")
        n = self.num_chunks() or 0
        last = plan.num_chunks - 1
        short = self.chunk_size - plan.chunk_length(last)
        owner, _ = self._router(self._canonical_replicas).lane_of(last)
        return n * self.chunk_size - (short if owner == self._lane_id else 0)

    # -- lanes, pickling and checkpoints ---------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        # Plans hold kernel modules and caches: rebuild them on the other side (cheap).
        state = dict(self.__dict__)
        state.update(_plan=None, _routers={}, _shared_quotas={})
        return state

    def _copy_for_lane(self) -> StaticMixtureWorkSource:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._plan = None  # caches are per instance: lanes may run in different threads
        clone._routers = {}
        clone._next_chunk_id = 0
        return clone

    def state_dict(self) -> dict[str, Any]:
        """This lane's position (the next chunk id) and the configuration it belongs to."""
        state = super().state_dict()
        state.update(mixture_state(self._names, self._knobs, self._mixture,
                                   self._token_estimation is not None, self.token_ratios,
                                   self._dataset_totals(), self._next_chunk_id))
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue exactly where ``state`` was taken; the checkpoint's curriculum wins.

        Args:
            state: A dict from ``state_dict``.
        """
        super().load_state_dict(state)
        read = read_mixture_state(state, self._names, self._knobs, self._explicit,
                                  self._token_estimation is not None, self._dataset_totals())
        self._knobs, self._mixture = read.knobs, read.mixture
        self._next_chunk_id = read.next_chunk_id
        if self._token_estimation is not None:
            self._token_ratios = read.token_ratios
        self._plan = None
        self._routers = {}

    def _dataset_totals(self) -> dict[str, int]:
        return {n: int(c.sum()) for n, (_, c) in zip(self._names, self._shards)}

    def __repr__(self) -> str:
        lane = f", lane={self._lane_id}/{self._canonical_replicas}" if self._is_clone else ""
        return (f"StaticMixtureWorkSource({list(self._names)}, {self._mixture!r}, "
                f"chunk_size={self.chunk_size}, seed={self.seed}{lane})")


def _shard_table(ds: Any) -> tuple[np.ndarray, np.ndarray]:
    ids = np.asarray(ds.ids(), dtype=np.int64)
    counts = np.asarray(ds.counts(), dtype=np.int64)
    if ids.shape != counts.shape or ids.ndim != 1:
        raise ValueError(f"dataset {ds.name!r}: ids() and counts() must be aligned 1-d arrays")
    if counts.size and counts.min() < 0:
        raise ValueError(f"dataset {ds.name!r} reports a negative row count")
    if int(counts.sum()) <= 0:
        raise ValueError(f"dataset {ds.name!r} is empty: a mixture component needs samples")
    return ids, counts

