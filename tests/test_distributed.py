"""Real multi-process runs with torch.distributed (gloo): collective checkpoints, elastic resume."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402
from io_helpers import free_port  # noqa: E402
from tests_support import dist_worker  # noqa: E402

pytestmark = pytest.mark.slow


def _phase(tmp_path, name, world, corpus, tok, state, steps):
    out = tmp_path / name
    out.mkdir()
    state_file = None
    if state is not None:
        state_file = str(tmp_path / f"{name}-in.json")
        with open(state_file, "w") as f:
            json.dump(state, f)
    mp.start_processes(dist_worker.run, args=(world, free_port(), str(corpus), tok, state_file, steps,
                                              str(out)), nprocs=world, start_method="spawn")
    parts = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
    states = [p["state"] for p in parts]
    assert all(s == states[0] for s in states), "every rank gets the same merged checkpoint"
    assert sorted(states[0]["lanes"]) == ["0", "1", "2", "3"]
    per_lane: dict = {}
    for p in parts:
        for lane, ids in p["batches"]:
            per_lane.setdefault(lane, []).append(ids)
    return per_lane, states[0]


def test_collective_checkpoint_and_resume_on_other_rank_counts(tmp_path, corpus_dir,
                                                               tokenizer_path):
    ref: dict = {}
    for _, b in zip(range(4 * 6), dist_worker.build(str(corpus_dir), tokenizer_path)):
        ref.setdefault(b.lane_ids[0], []).append([list(x) for x in b.ids])
    got: dict = {}
    state = None
    for name, world, steps in (("a", 4, 3), ("b", 2, 3)):
        lanes, state = _phase(tmp_path, name, world, corpus_dir, tokenizer_path, state, steps)
        for lane, batches in lanes.items():
            got.setdefault(lane, []).extend(batches)
    assert got == ref
