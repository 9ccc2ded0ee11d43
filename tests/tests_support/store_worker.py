"""Ranks of the aggregate_store tests (importable by spawned processes)."""

from __future__ import annotations

import json
import os


def build(store: str | None, **opts):
    from zephon import Pipeline
    from zephon.io import Dataset, InMemoryShard
    from zephon.work import StaticMixtureWorkSource

    ds = Dataset.from_dict("d", {0: InMemoryShard([{"text": f"t{i}"} for i in range(400)])})
    ws = StaticMixtureWorkSource([ds], {"d": 1.0}, chunk_size=20, seed=5)
    p = Pipeline(ws).options(num_workers=0, canonical_replicas=4, run_id="store-test", **opts)
    if store is not None:
        p.options(aggregate_store=store)
    return p.shuffle(buffer_size=8, seed=1).batch(4)


def take(p, steps: int) -> list:
    it = iter(p)
    return [[next(it).lane_ids[0], [r.payload["text"] for r in next(it).records]]
            for _ in range(steps)]


def with_group(rank: int, world: int, port: int, out_dir: str) -> None:
    """A gloo group: the checkpoints go through its store, not through a collective."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)

    def refuse(*a, **k):
        raise AssertionError("aggregate_store must not use a collective")

    dist.all_gather_object = refuse
    try:
        p = build("torch://")
        batches = take(p, 3)
        states = [p.checkpoint() for _ in range(4)]  # rounds 1..4: old rounds are dropped
        dist.barrier()  # every rank is done with its last checkpoint
        keys = []
        if rank == 0:  # what the group's store server holds of ours
            listing = dist.TCPStore("127.0.0.1", port, is_master=False).list_keys()
            keys = sorted(k for k in listing if "zephon/" in k)
        dist.barrier()  # the server (rank 0's) stays up until the listing is done
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"batches": batches, "states": states, "keys": keys}, f)
    finally:
        dist.destroy_process_group()


def without_group(rank: int, world: int, port: int, out_dir: str) -> None:
    """No process group: RANK/WORLD_SIZE from the environment, a store someone else serves."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    p = build(f"torch://127.0.0.1:{port}")
    batches = take(p, 2)
    state = p.checkpoint()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"batches": batches, "states": [state]}, f)
