"""Small stand-ins for a work source and datasets, importable by worker processes.

``FakeWorkSource`` cuts the records of its datasets into chunks (dataset-interleaved, seeded
order) and routes chunk k to lane k % lanes; ``FakeDataset.read_table`` builds rows from their
index (text, ragged token ids, a float), so every engine can be checked against inline.

Run as a script (``python engine_fakes.py <scenario>``) it plays one exit scenario of the
cleanup tests: it prints the engine's shared-memory prefix and process ids, then does what the
scenario says, and finally waits for a line on stdin so the test can look around before it
exits.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time

import numpy as np
import pyarrow as pa


class FakeChunk:
    def __init__(self, dataset_id, shard_id, sample_idx, lane_id: int, chunk_id: int) -> None:
        self.dataset_id = dataset_id
        self.shard_id = shard_id
        self.sample_idx = sample_idx
        self.lane_id = lane_id
        self.chunk_id = chunk_id

    def __len__(self) -> int:
        return len(self.sample_idx)


class FakeDataset:
    def __init__(self, name: str, shards: int, per_shard: int, text_words: int = 6,
                 row_group_rows: int | None = None) -> None:
        self.name = name
        self.shards = shards
        self.per_shard = per_shard
        self.text_words = text_words
        self.row_group_rows = row_group_rows

    def row_group_starts(self, shard_id: int):
        """Row groups as a Parquet shard would have them (the engine then splits micro-batches
        by row-group owner: zephon/engine/process/ownership.py); None: no row groups."""
        if self.row_group_rows is None:
            return None
        return np.append(np.arange(0, self.per_shard, self.row_group_rows), self.per_shard)

    def read_table(self, shard_id: int, rows) -> pa.Table:
        rows = np.asarray(rows, dtype=np.int64)
        ids = shard_id * self.per_shard + rows
        lengths = (ids % 5 + 1).astype(np.int32)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
        # a record's tokens are a function of the record alone (never of which other rows
        # the same read returned), like a real dataset's
        within = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1], lengths)
        values = (np.repeat(ids, lengths) + within).astype(np.int32)
        text = [f"{self.name} doc {i} " + "w" * int(i % self.text_words) for i in ids.tolist()]
        return pa.table({"id": ids, "text": text,
                         "tokens": pa.ListArray.from_arrays(offsets, values),
                         "score": ids.astype(np.float64) / 7.0})

    def read_payloads(self, shard_id: int, rows) -> list:
        return self.read_table(shard_id, rows).to_pylist()


class FakeWorkSource:
    def __init__(self, datasets: list[FakeDataset], chunk_size: int = 50, seed: int = 0) -> None:
        self.datasets = datasets
        self.datasets_by_id = dict(enumerate(datasets))
        self.chunk_size = chunk_size
        d, s, x = [], [], []
        for i, ds in enumerate(datasets):
            for shard in range(ds.shards):
                d.append(np.full(ds.per_shard, i))
                s.append(np.full(ds.per_shard, shard))
                x.append(np.arange(ds.per_shard))
        order = np.random.default_rng(seed).permutation(sum(len(a) for a in x)) if seed else None
        self.all = [np.concatenate(a).astype(np.int64) for a in (d, s, x)]
        if order is not None:
            self.all = [a[order] for a in self.all]

    def component_ids(self) -> dict[str, int]:
        return {ds.name: i for i, ds in self.datasets_by_id.items()}

    def lane_chunk(self, lane_id: int, lanes: int, chunk_id: int) -> FakeChunk | None:
        k = chunk_id * lanes + lane_id
        a = k * self.chunk_size
        if a >= len(self.all[0]):
            return None
        b = a + self.chunk_size
        return FakeChunk(*(v[a:b] for v in self.all), lane_id=lane_id, chunk_id=chunk_id)


def make_source(records: int = 600, shards: int = 3, datasets: int = 2, chunk: int = 50,
                seed: int = 5, row_group_rows: int | None = None) -> FakeWorkSource:
    per = records // (shards * datasets)
    return FakeWorkSource([FakeDataset(f"ds{i}", shards, per, row_group_rows=row_group_rows)
                           for i in range(datasets)], chunk_size=chunk, seed=seed)


# -- user functions for map_transform (module level: pickled by reference) --------------------


def add_length(p: dict) -> dict:
    p["n_chars"] = len(p["text"])
    return p


def drop_sevens(p: dict) -> dict | None:
    return None if p["id"] % 7 == 3 else p


def busy(p: dict, loops: int = 20000) -> dict:
    acc = 0
    for i in range(loops):
        acc = (acc * 31 + i) % 1000003
    p["busy"] = acc
    return p


def boom_at_57(p: dict) -> dict:
    if p["id"] == 57:
        raise ValueError(f"cannot handle record {p['id']}")
    return p


class KillOnce:
    """SIGKILLs the worker that sees record ``at`` — once, so the redone block succeeds."""

    def __init__(self, marker: str, at: int) -> None:
        self.marker = marker
        self.at = at
        self.__name__ = "kill_once"

    def __call__(self, p: dict) -> dict:
        if p["id"] == self.at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return p


class KillAlways:
    """SIGKILLs every worker that sees record ``at``: a block no retry can get through."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.__name__ = "kill_always"

    def __call__(self, p: dict) -> dict:
        if p["id"] == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        return p


def fail_on_third_batch(batch):
    if batch.ids[0] == (0, 0, 20):
        raise ValueError("cannot handle the third batch")
    return batch


class CountBatches:
    """A map_batch function that leaves a mark in a file per batch it sees (wherever it runs)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.__name__ = "count_batches"

    def __call__(self, batch):
        with open(self.path, "a") as f:
            f.write(".")
        return batch


class SlowDown:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.__name__ = "slow_down"

    def __call__(self, p: dict) -> dict:
        time.sleep(self.seconds)
        return p


def run_in_daemon(queue) -> None:
    """In a daemonic process (like a DataLoader worker): the engine must fall back to inline."""
    import warnings

    from zephon import Pipeline

    p = (Pipeline(make_source(records=600, chunk=50, seed=5)).map_transform(add_length)
         .map_transform(drop_sevens).batch(7)
         .options(canonical_replicas=2, micro_batch_size=25, num_workers=2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        it = iter(p)
        n = 1 if next(it, None) is not None else 0
        runner = p._runtime.kind  # the engine the session chose
        n += sum(1 for _ in it)
    queue.put((any("inline" in str(w.message) for w in caught), runner, n))


# -- exit scenarios (run in a child process by test_engine_cleanup) ----------------------------


def scenario(kind: str, coordinator: str = "auto") -> None:
    """A pipeline run ended as ``kind`` says, its serial stage coordinated by a coordinator
    process (``coordinator="process"``) or by this process (``"training"``, the default for a
    pipeline whose serial stage only batches)."""
    from zephon import Pipeline

    slow = kind in ("sigint", "sigkill")
    p = Pipeline(make_source(records=3000 if slow else 600)).map_transform(add_length)
    if kind == "exception":
        p = Pipeline(make_source(records=600, datasets=1, shards=1)).map_transform(boom_at_57)
    if slow:
        p = p.map_transform(SlowDown(0.002))
    elif kind in ("normal", "abandon"):  # still running when the pids below are read: a fast
        p = p.map_transform(SlowDown(0.002))  # run may have stopped its workers by then
    p = p.batch(10).options(num_workers=2, micro_batch_size=25, coordinator=coordinator)
    it = iter(p)
    next(it)
    engine = p._runtime.engine
    print(json.dumps({"prefix": engine.config.prefix, "pids": engine.pids()}), flush=True)
    if kind == "normal":
        for _ in it:
            pass
    elif kind == "exception":
        try:
            for _ in it:
                pass
        except Exception as e:
            print(f"raised {type(e).__name__}", flush=True)
    elif kind == "abandon":
        del it
        gc.collect()
    else:  # sigint / sigkill: keep consuming slowly until the test signals us
        print("running", flush=True)
        for _ in it:
            time.sleep(0.01)
    print("finished", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    scenario(*sys.argv[1:3])


def record_pid(p: dict) -> dict:
    """Which process fetched the record (a worker, with the process engine)."""
    p["pid"] = os.getpid()
    return p


def boom_on_every_fifth(p: dict) -> dict:
    """Fails on many records: which one an engine reports shows the order it met them in."""
    if p["id"] % 5 == 0:
        raise ValueError(f"cannot handle record {p['id']}")
    return p
