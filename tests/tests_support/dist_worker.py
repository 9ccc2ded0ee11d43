"""Worker for the torch.distributed tests (importable by spawned processes)."""

from __future__ import annotations

import json
import os


def build(corpus, tokenizer):
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import StaticMixtureWorkSource

    ds = [Dataset.from_path("code", os.path.join(corpus, "code")),
          Dataset.from_path("web", os.path.join(corpus, "web"))]
    ws = StaticMixtureWorkSource(ds, {"code": 0.25, "web": 0.75}, seed=11, chunk_size=80)
    return (Pipeline(ws).options(num_workers=0, canonical_replicas=4)
            .tokenize(tokenizer=tokenizer, field="text").shuffle(buffer_size=24, seed=2)
            .pack_flat(max_length=49, algorithm="best_fit", num_bins=3, pad_token_id=0)
            .batch(microbatch_size=2))


def run(rank: int, world: int, port: int, corpus: str, tokenizer: str, state_in: str | None,
        steps: int, out_dir: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        p = build(corpus, tokenizer)
        if state_in:
            with open(state_in) as f:
                p.restore(json.load(f))
        it = iter(p)
        mine = []
        for _ in range(steps * 4 // world):  # a global step is one batch per lane
            b = next(it)
            mine.append([b.lane_ids[0], [list(x) for x in b.ids]])
        state = p.checkpoint()  # collective: gathers every rank's lanes
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"batches": mine, "state": state}, f)
    finally:
        dist.destroy_process_group()
