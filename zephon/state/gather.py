"""Multi-rank checkpoints: every rank contributes its lanes, every rank gets the merged dict.

Through ``options(aggregate_store="torch://")`` (torch.distributed's key-value store,
``zephon/state/store_gather.py``) when set; else through ``torch.distributed`` when a process group is
initialised (``all_gather_object``, gloo or nccl), else through ``options(aggregate_dir=...)``
(a shared folder or fsspec URL). With
neither, a rank's checkpoint holds its own lanes and ``merge_checkpoints`` joins them later.
Inside a DataLoader worker (``to_torch_dataset``) a checkpoint holds that worker's lanes: the
loader (torchdata's ``StatefulDataLoader``) keeps one per worker and hands each back to its worker.
"""

from __future__ import annotations

import json
import os
import sys
import time

from zephon.state.checkpoint import merge_checkpoints
from zephon.state.store_gather import gather_store


def _dist():
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def gather(local: dict, opts, topology, round_no: int) -> dict:
    """The merged checkpoint of all ranks (collective: every rank must call it)."""
    if topology.world_size <= 1 or topology.loader_share is not None:
        return local  # in a DataLoader worker: no collectives (its loader keeps each worker's)
    store = opts.get("aggregate_store")
    if store:  # chosen explicitly: the torch store, even when a process group exists
        return gather_store(local, str(store), str(opts.get("run_id")), topology,
                            float(opts.get("aggregate_timeout_s")), round_no)
    dist = _dist()
    if dist is not None:
        parts: list = [None] * dist.get_world_size()
        dist.all_gather_object(parts, local)
        return merge_checkpoints(parts)
    directory = opts.get("aggregate_dir")
    if not directory:
        return local  # no coordination available: this rank's lanes only
    return _gather_dir(local, str(directory), str(opts.get("run_id")), topology,
                       float(opts.get("aggregate_timeout_s")), round_no)


def _gather_dir(local: dict, directory: str, run_id: str, topology, timeout: float,
                round_no: int) -> dict:
    import fsspec

    fs, root = fsspec.core.url_to_fs(directory)
    base = f"{root.rstrip('/')}/{run_id}"
    here = f"{base}/round-{round_no:08d}"
    fs.makedirs(here, exist_ok=True)
    rank, world = topology.global_rank, topology.world_size
    mine = f"{here}/rank-{rank:05d}.json"
    tmp = f"{mine}.tmp-{os.getpid()}"
    with fs.open(tmp, "w") as f:
        f.write(json.dumps(local))
    fs.mv(tmp, mine)  # atomic on local filesystems; object stores write whole objects
    old = f"{base}/round-{round_no - 2:08d}/rank-{rank:05d}.json"
    if round_no >= 2 and fs.exists(old):
        fs.rm(old)
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        present = {p.rsplit("/", 1)[-1] for p in fs.ls(here, detail=False)}
        missing = [r for r in range(world) if f"rank-{r:05d}.json" not in present]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"checkpoint aggregation in {directory} (run_id={run_id!r}, round {round_no}) "
                f"timed out after {timeout:.0f}s: ranks {missing} did not contribute")
        time.sleep(delay)
        delay = min(delay * 2, 5.0)
    parts = []
    for r in range(world):
        with fs.open(f"{here}/rank-{r:05d}.json", "r") as f:
            parts.append(json.loads(f.read()))
    return merge_checkpoints(parts)
