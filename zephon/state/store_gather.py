"""Multi-rank checkpoints through torch.distributed's key-value store
(``options(aggregate_store="torch://")`` or ``"torch://host:port"``).

The store server is the one a torch job already runs: the torchrun agent's, or the TCPStore
that ``init_process_group`` hosts on rank 0 at ``MASTER_ADDR:MASTER_PORT``. Zephon connects as
a client (no collective is issued, so a busy NCCL group is never touched) and uses the same
round protocol as ``aggregate_dir``: each rank writes its state under
``zephon/<run_id>/<restart>/round-<n>/rank-<r>``, waits for every rank's key, merges, and drops
its key of round n-2 (every rank has read that round once anyone reaches round n). ``<restart>``
is torchrun's ``TORCHELASTIC_RESTART_COUNT``, so a restarted job that keeps the agent's store
never reads the keys of its previous attempt. Values above 4 MiB are written in parts.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

from zephon.option_values import parse_store_uri
from zephon.state.checkpoint import merge_checkpoints

PART_BYTES = 4 << 20
_clients: dict[tuple[str, int, int], Any] = {}  # (host, port, pid) -> TCPStore client


def _address(uri: str) -> tuple[str, int]:
    addr = parse_store_uri(uri)
    if addr is not None:
        return addr
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not host or not port or not port.isdigit():
        raise RuntimeError("aggregate_store='torch://' reads MASTER_ADDR and MASTER_PORT, which "
                           "are not set: run under torchrun / init_process_group, or pass "
                           "torch://host:port")
    return host, int(port)


def client(uri: str, timeout_s: float) -> Any:
    """A TCPStore client of the store named by ``uri`` (one per process and address)."""
    import torch.distributed as dist

    host, port = _address(uri)
    key = (host, port, os.getpid())
    store = _clients.get(key)
    if store is None:
        try:
            store = dist.TCPStore(host, port, is_master=False,
                                  timeout=timedelta(seconds=timeout_s))
        except (RuntimeError, OSError) as e:
            raise RuntimeError(f"aggregate_store {uri!r}: cannot reach the torch store at "
                               f"{host}:{port} ({str(e).splitlines()[0]}); its server must "
                               "already run (torchrun, or init_process_group on rank 0)") from e
        _clients[key] = store
    return store


def _put(store: Any, key: str, value: bytes) -> None:
    parts = [value[i:i + PART_BYTES] for i in range(0, len(value), PART_BYTES)] or [b""]
    for i, p in enumerate(parts):
        store.set(f"{key}/part-{i}", p)
    store.set(f"{key}/parts", str(len(parts)))  # written last: the value is complete


def _take(store: Any, key: str) -> bytes:
    n = int(store.get(f"{key}/parts"))
    return b"".join(store.get(f"{key}/part-{i}") for i in range(n))


def _drop(store: Any, key: str) -> None:
    if store.check([f"{key}/parts"]):
        n = int(store.get(f"{key}/parts"))
        store.delete_key(f"{key}/parts")
        for i in range(n):
            store.delete_key(f"{key}/part-{i}")


def gather_store(local: dict, uri: str, run_id: str, topology, timeout: float,
                 round_no: int) -> dict:
    """Every rank's checkpoint through the store, merged (collective: all ranks call it)."""
    store = client(uri, timeout)
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    base = f"zephon/{run_id}/{restart}"
    rank, world = topology.global_rank, topology.world_size
    _put(store, f"{base}/round-{round_no:08d}/rank-{rank:05d}", json.dumps(local).encode())
    keys = [f"{base}/round-{round_no:08d}/rank-{r:05d}" for r in range(world)]
    try:
        store.wait([f"{k}/parts" for k in keys], timedelta(seconds=timeout))
    except RuntimeError as e:
        missing = [r for r, k in enumerate(keys) if not store.check([f"{k}/parts"])]
        raise RuntimeError(f"checkpoint aggregation through {uri!r} (run_id={run_id!r}, round "
                           f"{round_no}) timed out after {timeout:.0f}s: ranks {missing} did "
                           "not contribute") from e
    parts = [json.loads(_take(store, k)) for k in keys]
    if round_no >= 3:
        _drop(store, f"{base}/round-{round_no - 2:08d}/rank-{rank:05d}")
    return merge_checkpoints(parts)
