"""options(aggregate_store="torch://"): multi-rank checkpoints through torch.distributed's
key-value store (addendum A.5), with real processes on this machine."""

from __future__ import annotations

import datetime
import json

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from io_helpers import free_port  # noqa: E402
from tests_support import store_worker  # noqa: E402

from zephon import Pipeline  # noqa: E402

pytestmark = pytest.mark.slow


def _results(out, world: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def _check_merged(results: list[dict]) -> dict:
    for states in zip(*(r["states"] for r in results)):
        assert all(s == states[0] for s in states), "every rank gets the same checkpoint"
        assert sorted(states[0]["lanes"]) == ["0", "1", "2", "3"]
        assert all(v is not None for v in states[0]["lanes"].values())
    return results[0]["states"][-1]


def test_checkpoints_go_through_the_store_of_a_gloo_group(tmp_path):
    mp.start_processes(store_worker.with_group, args=(2, free_port(), str(tmp_path)), nprocs=2,
                       start_method="spawn")
    results = _results(tmp_path, 2)
    state = _check_merged(results)
    # the store holds only the last two rounds of each rank (older rounds were dropped)
    rounds = {k.split("/round-")[1][:8] for k in results[0]["keys"]}
    assert rounds == {"00000003", "00000004"}, results[0]["keys"]
    # the merged checkpoint resumes each lane where its rank stopped
    ref = store_worker.build(None)
    it = iter(ref)
    full: dict = {}
    for _ in range(40):
        b = next(it)
        full.setdefault(b.lane_ids[0], []).append([r.payload["text"] for r in b.records])
    resumed: dict = {}
    for b in store_worker.build(None).restore(state):
        resumed.setdefault(b.lane_ids[0], []).append([r.payload["text"] for r in b.records])
    for lane, batches in resumed.items():
        assert full[lane][3:3 + len(batches)] == batches[: len(full[lane]) - 3]


def test_a_store_served_elsewhere_without_a_process_group(tmp_path):
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=60))
    mp.start_processes(store_worker.without_group, args=(2, server.port, str(tmp_path)),
                       nprocs=2, start_method="spawn")
    _check_merged(_results(tmp_path, 2))


@pytest.mark.parametrize("uri", ["s3://bucket/x", "torch://user:pw@host:1234",
                                 "torch://host:99999", "torch://host", "torch://host:12/path",
                                 "torch://host:12?timeout=3"])
def test_bad_store_uris_are_refused_when_set(uri):
    with pytest.raises(ValueError):
        store_worker.build(None).options(aggregate_store=uri)


def test_store_and_dir_are_exclusive_and_strings_only(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        store_worker.build(None).options(aggregate_dir=str(tmp_path), aggregate_store="torch://")
    p = store_worker.build("torch://")
    with pytest.raises(ValueError, match="not both"):
        p.options(aggregate_dir=str(tmp_path))
    with pytest.raises(TypeError):
        store_worker.build(None).options(aggregate_store=1234)


def test_an_unreachable_store_is_reported_when_the_run_starts():
    p: Pipeline = store_worker.build(f"torch://127.0.0.1:{free_port()}", world_size=2, global_rank=0,
                                     aggregate_timeout_s=1)
    with pytest.raises(RuntimeError, match="cannot reach the torch store"):
        next(iter(p))
