"""Which lanes this rank owns: canonical_replicas, data-parallel group, mapping strategy."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

from zephon.option_values import check_int, parse_env_int
from zephon.options import INT_OPTIONS, RuntimeOptions

# key of ``RuntimeOptions.explicit`` set by the torch adapter in a DataLoader worker: (worker id,
# number of workers). Not a user option: the worker iterates every n-th of the rank's lanes
LOADER_SHARE = "_dataloader_share"


@dataclass(frozen=True)
class Topology:
    canonical_replicas: int
    dp_degree: int
    dp_group_id: int
    world_size: int
    global_rank: int
    mapping_strategy: str
    owned_lanes: tuple[int, ...]
    loader_share: tuple[int, int] | None = None  # (worker, workers) inside a DataLoader worker


def _dist_identity() -> tuple[int, int, str]:
    """(world_size, rank, source) from torch.distributed, else RANK/WORLD_SIZE, else 1/0."""
    try:
        import sys

        if "torch" in sys.modules:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                return dist.get_world_size(), dist.get_rank(), "torch.distributed"
    except Exception:  # torch absent or broken: fall through to the environment
        pass
    ws, rank = os.environ.get("WORLD_SIZE"), os.environ.get("RANK")
    if ws and rank:
        return parse_env_int(ws, "WORLD_SIZE", 1), parse_env_int(rank, "RANK", 0), "environment"
    return 1, 0, "default"


def _explicit(opts: RuntimeOptions, name: str) -> int | None:
    """An explicitly set count, checked again here: ``explicit`` can be filled without going
    through ``options()``, and ``x or default`` must not turn a 0 into the default."""
    return check_int(opts.explicit.get(name), f"options({name}=...)", INT_OPTIONS[name])


def lanes_for_group(L: int, G: int, g: int, strategy: str) -> tuple[int, ...]:
    if strategy == "interleaved":
        return tuple(range(g, L, G))
    base, extra = divmod(L, G)
    start = g * base + min(g, extra)
    return tuple(range(start, start + base + (1 if g < extra else 0)))


def resolve_topology(opts: RuntimeOptions) -> Topology:
    world, rank, _ = _dist_identity()
    world_size = _explicit(opts, "world_size") or world
    global_rank = _explicit(opts, "global_rank")
    if global_rank is None:
        global_rank = rank
    dp_degree = _explicit(opts, "dp_degree") or world_size
    dp_group_id = _explicit(opts, "dp_group_id")
    if dp_group_id is None:
        dp_group_id = global_rank if dp_degree == world_size else global_rank % dp_degree
    L = _explicit(opts, "canonical_replicas") or dp_degree
    strategy = opts.explicit.get("mapping_strategy") or "contiguous"
    if strategy not in ("contiguous", "interleaved"):
        raise ValueError(f"mapping_strategy must be 'contiguous' or 'interleaved', got {strategy!r}")
    if not 0 <= dp_group_id < dp_degree:
        raise ValueError(f"dp_group_id {dp_group_id} out of range for dp_degree {dp_degree}")
    if dp_degree > L:
        raise ValueError(f"dp_degree {dp_degree} exceeds canonical_replicas {L}: a lane cannot be split")
    if L % dp_degree:
        warnings.warn(f"canonical_replicas={L} is not divisible by dp_degree={dp_degree}: "
                      "groups own unequal lane counts", stacklevel=3)
    lanes = lanes_for_group(int(L), int(dp_degree), int(dp_group_id), strategy)
    share = opts.explicit.get(LOADER_SHARE)
    if share is not None:  # interleaved, so the DataLoader's rotation over its workers is ours
        lanes = lanes[share[0]::share[1]]
    return Topology(int(L), int(dp_degree), int(dp_group_id), int(world_size), int(global_rank),
                    strategy, lanes, share)
