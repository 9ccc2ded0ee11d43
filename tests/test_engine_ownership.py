"""Row-group ownership (zephon/engine/process/ownership.py): with several worker processes, each
Parquet row group is read by one worker only, which hears of it ahead of its reads, and
micro-batches cut into parts by owner come back together in pointer order."""

from __future__ import annotations

from collections import defaultdict

import engine_fakes as F
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephon import Pipeline
from zephon.block import Block
from zephon.engine.lanes.pointer_blocks import lane_pointer_blocks
from zephon.engine.process.ownership import Ownership, merge
from zephon.io import Dataset
from zephon.ops.fetch import FetchOp
from zephon.work import MixtureSpec, StaticMixtureWorkSource

RG = 64  # rows per row group of the test shards


@pytest.fixture(scope="module")
def mixture_dir(tmp_path_factory):
    """Three datasets of 4 Parquet shards each, 64-row row groups, uneven shard sizes."""
    root = tmp_path_factory.mktemp("owned")
    for d, name in enumerate(("code", "web", "books")):
        (root / name).mkdir()
        for s in range(4):
            n = 150 + 37 * s + 11 * d
            ids = [f"{name}-{s}-{i}" for i in range(n)]
            table = pa.table({"id": ids, "text": [f"text of {x} " * (1 + i % 7)
                                                  for i, x in enumerate(ids)]})
            pq.write_table(table, root / name / f"part-{s}.parquet", row_group_size=RG)
    return root


def datasets(root) -> list[Dataset]:
    return [Dataset.from_path(n, root / n) for n in ("code", "web", "books")]


def pipeline(root, **opts) -> Pipeline:
    ws = StaticMixtureWorkSource(datasets(root), MixtureSpec({"code": 0.2, "web": 0.5,
                                                              "books": 0.3}), seed=7)
    return (Pipeline(ws).map_transform(F.record_pid).batch(16)
            .options(**{"micro_batch_size": RG, **opts}))


def test_row_group_starts_come_from_the_footer(mixture_dir):
    ds = datasets(mixture_dir)[1]
    starts = ds.row_group_starts(2)
    n = 150 + 37 * 2 + 11
    assert starts.tolist() == [*range(0, n, RG), n]
    assert Dataset.from_dict("m", {0: [{"a": 1}]}).row_group_starts(0) is None


@pytest.mark.parametrize("micro", [RG, RG // 4], ids=["one-block-groups", "4-block-groups"])
def test_each_row_group_is_read_by_one_worker_and_the_stream_is_unchanged(mixture_dir, micro):
    """Row groups of one micro-batch and of four: each is read by one worker process only
    (before, a row group larger than 2 micro-batches had no owner and every worker decoded
    it)."""
    def strip(batches):
        return [(tuple(b.ids), [{k: v for k, v in r.items() if k != "pid"}
                                for r in b.block.payload_list()]) for b in batches]

    inline = strip(pipeline(mixture_dir, num_workers=0, micro_batch_size=micro))
    got = list(pipeline(mixture_dir, num_workers=2, micro_batch_size=micro))
    assert strip(got) == inline
    readers = defaultdict(set)  # (dataset, shard, row group) -> pids that fetched its rows
    for b in got:
        for (d, s, row), r in zip(b.ids, b.block.payload_list()):
            readers[(d, s, row // RG)].add(r["pid"])
    assert len(readers) > 30
    assert all(len(p) == 1 for p in readers.values()), \
        {k: v for k, v in readers.items() if len(v) > 1}
    assert len(set().union(*readers.values())) == 2  # both workers did their share


def test_parts_cover_the_micro_batch_by_owner(mixture_dir):
    ds = datasets(mixture_dir)
    ws = StaticMixtureWorkSource(ds, MixtureSpec({"code": 0.2, "web": 0.5, "books": 0.3}),
                                 seed=7)
    own = Ownership(ds, 3)
    split = 0
    owner_of: dict[tuple, set] = defaultdict(set)
    for block in lane_pointer_blocks(ws, 0, 1, RG):
        parts = own.split(block)
        split += len(parts) > 1
        offsets = np.concatenate([p.meta["chunk_offset"] for _, p in parts])
        assert sorted(offsets.tolist()) == block.meta["chunk_offset"].tolist()
        for worker, part in parts:
            m = part.meta
            for d, s, row in zip(m["dataset_id"], m["shard_id"], m["sample_idx"]):
                owner_of[(int(d), int(s), int(row) // RG)].add(worker)
    assert split > 10
    assert all(len(w) == 1 for w in owner_of.values())  # a row group keeps its owner
    per_worker = np.bincount([w for ws_ in owner_of.values() for w in ws_], minlength=3)
    assert per_worker.min() >= per_worker.max() - 2  # row groups (of equal size) spread evenly


def test_row_groups_read_in_order_alternate_between_owners(tmp_path):
    """One dataset read in order, in row groups of several micro-batches: consecutive row groups
    (within a shard, and the first ones of the next shards) go to alternate workers, each owner
    hears of its row group once, when the block that first reads it is looked at."""
    for s in range(3):
        pq.write_table(pa.table({"text": [f"{s}-{i}" for i in range(200)]}),
                       tmp_path / f"part-{s}.parquet", row_group_size=50)
    ds = [Dataset.from_path("d", tmp_path)]
    own = Ownership(ds, 2)
    blocks = [Block.from_pointers(np.zeros(25, np.int64), np.full(25, s, np.int64),
                                  np.arange(a, a + 25, dtype=np.int64), lane_id=0, chunk_id=0,
                                  chunk_offset=np.arange(25, dtype=np.int64))
              for s in (2, 0, 1) for a in range(0, 200, 25)]
    claims = [own.claim(b) for b in blocks]
    told = [(w, key) for c in claims for w, keys in c.items() for key in keys]
    assert [key for _, key in told] == [(0, s, g) for s in (2, 0, 1) for g in range(4)]
    assert [w for w, _ in told] == [0, 1] * 6
    assert all(not c for c in claims[1::2])  # the second block of a row group claims nothing
    for b in blocks:  # the parts follow the owners that were told
        ((w, part),) = own.split(b)
        key = (0, int(b.meta["shard_id"][0]), int(b.meta["sample_idx"][0]) // 50)
        assert (w, key) in told


def test_merge_puts_parts_back_in_pointer_order():
    def part(offsets, children=None):
        offsets = np.asarray(offsets, dtype=np.int64)
        n = len(offsets)
        meta = {"dataset_id": np.zeros(n, np.int64), "shard_id": np.zeros(n, np.int64),
                "sample_idx": offsets, "lane_id": np.zeros(n, np.int64),
                "chunk_id": np.zeros(n, np.int64), "chunk_offset": offsets}
        lineage = (np.asarray(children, dtype=np.int64).reshape(n, 1) if children is not None
                   else np.full((n, 1), -1, np.int64))
        text = [f"r{o}.{c}" for o, c in zip(offsets.tolist(), lineage[:, 0].tolist())]
        return Block(meta, pa.table({"text": text}), lineage)

    # part one: records 0, 3, 3 (two children of record 3), 4; part two: 1, 5; a part that
    # came back empty (all filtered) gives None
    merged = merge([part([0, 3, 3, 4], [-1, 0, 1, -1]), None, part([1, 5])])
    assert merged.payload.column("text").to_pylist() == ["r0.-1", "r1.-1", "r3.0", "r3.1",
                                                         "r4.-1", "r5.-1"]
    assert merged.meta["chunk_offset"].tolist() == [0, 1, 3, 3, 4, 5]
    assert merge([None, None]) is None


def test_a_fetch_in_shard_order_merges_to_the_ordered_fetch(mixture_dir):
    ds = datasets(mixture_dir)
    ws = StaticMixtureWorkSource(ds, MixtureSpec({"code": 0.2, "web": 0.5, "books": 0.3}),
                                 seed=7)
    ordered, loose = FetchOp(ds), FetchOp(ds).in_shard_order()
    mixed = 0
    for block in lane_pointer_blocks(ws, 0, 1, RG):
        want = ordered.process_block(block)
        got = loose.process_block(block)
        mixed += not np.array_equal(got.meta["dataset_id"], want.meta["dataset_id"])
        back = merge([got])
        assert back.payload.equals(want.payload)
        assert all(np.array_equal(back.meta[k], want.meta[k]) for k in want.meta)
    assert mixed > 5  # the shard-order fetch really returned another order


def test_explain_says_whether_row_groups_have_owners(mixture_dir):
    p = pipeline(mixture_dir, num_workers=2)
    assert "row-group owners: on" in p.explain()
    p.options(num_workers=1)
    assert "row-group owners: off (fewer than 2 worker processes)" in p.explain()
    assert "row-group owners" not in pipeline(mixture_dir, num_workers=0).explain()


def test_a_shard_gone_since_discovery_has_no_row_groups_and_its_read_names_it(tmp_path):
    from zephon.io.errors import ShardMissingError

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for s in range(2):
            pq.write_table(pa.table({"text": [f"{name}{s}-{i}" for i in range(100)]}),
                           tmp_path / name / f"part-{s}.parquet", row_group_size=32)
    ds = [Dataset.from_path(n, tmp_path / n) for n in ("a", "b")]
    (tmp_path / "b" / "part-1.parquet").unlink()
    assert ds[1].row_group_starts(1) is None
    assert ds[1].row_group_starts(0).tolist() == [0, 32, 64, 96, 100]
    ws = StaticMixtureWorkSource(ds, MixtureSpec({"a": 0.5, "b": 0.5}), seed=1)
    p = Pipeline(ws).batch(8).options(num_workers=2, micro_batch_size=32)
    with pytest.raises(ShardMissingError, match="part-1.parquet"):
        list(p)


class _LateLayout:
    """A dataset whose row groups become known only after a while (a remote shard that a worker
    downloads into the node cache)."""

    def __init__(self, known_after: int) -> None:
        self.calls = 0
        self.known_after = known_after

    def row_group_starts(self, shard_id: int):
        self.calls += 1
        return None if self.calls <= self.known_after else np.array([0, 16, 32])


def test_a_shard_of_unknown_layout_is_looked_up_again_now_and_then():
    from zephon.engine.process.ownership import ASK_AGAIN

    late = _LateLayout(known_after=2)
    own = Ownership([late], 2)
    block = Block.from_pointers(np.zeros(32, np.int64), np.zeros(32, np.int64),
                                np.arange(32, dtype=np.int64), lane_id=0, chunk_id=0,
                                chunk_offset=np.arange(32, dtype=np.int64))
    seen = [bool((own.owners(block) >= 0).all()) for _ in range(3 * ASK_AGAIN)]
    # asked at the 1st, (ASK_AGAIN + 1)th and (2 ASK_AGAIN + 1)th block: known at the third
    assert late.calls == 3
    assert seen.index(True) == 2 * ASK_AGAIN and all(seen[2 * ASK_AGAIN:])


def test_datasets_with_different_columns_keep_the_inline_column_order(tmp_path):
    """Three datasets, each with a column of its own: parts of a micro-batch would join their
    tables in another column order than the whole, so micro-batches then go out whole."""
    names = ("code", "web", "books")
    for name in names:
        (tmp_path / name).mkdir()
        for s in range(2):
            n = 120
            pq.write_table(pa.table({f"only_{name}": list(range(n)),
                                     "text": [f"{name}-{s}-{i}" for i in range(n)]}),
                           tmp_path / name / f"part-{s}.parquet", row_group_size=32)

    def stream(workers):
        ds = [Dataset.from_path(n, tmp_path / n) for n in names]
        ws = StaticMixtureWorkSource(ds, MixtureSpec({"code": 0.02, "web": 0.18, "books": 0.8}),
                                     seed=3)
        p = Pipeline(ws).batch(8).options(micro_batch_size=16, num_workers=workers)
        return [(tuple(b.ids), b.block.payload.column_names, b.block.payload_list())
                for b in p]

    inline = stream(0)
    assert len({tuple(cols) for _, cols, _ in inline}) > 1  # the column order varies
    assert stream(2) == inline


class _Conn:
    """The coordinator's end of a worker's pipe, scripted."""

    def __init__(self, msgs: list) -> None:
        self.msgs = list(msgs)

    def recv(self):
        return self.msgs.pop(0)

    def send(self, msg) -> None:
        raise AssertionError(f"a hint is not answered: {msg!r}")


def test_a_worker_decodes_the_row_groups_it_is_told_it_owns(mixture_dir, monkeypatch):
    """The worker side of ``WorkerPool.hint``: each named row group is decoded on the worker's
    read-ahead thread (its shard readers' own guesses are off); a hint that cannot be followed
    (no such shard, no such dataset) is dropped without a word: the read that needs the data
    reports errors."""
    import threading

    from zephon.engine.process.worker import _serve
    from zephon.io.ahead import read_ahead
    from zephon.io.formats.row_group_cache import row_group_cache

    row_group_cache().clear()
    monkeypatch.setattr(read_ahead, "enabled", False)
    decoded = []
    real = pq.ParquetFile.read_row_group

    def spy(self, i, **kw):
        decoded.append((i, threading.current_thread().name.startswith("zephon-read-ahead")))
        return real(self, i, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    _serve(_Conn([("decode_ahead", [(1, 2, 1), (0, 99, 0), (7, 0, 0), (2, 0, 2)]), ("stop",)]),
           [FetchOp(datasets(mixture_dir))], pool=None)
    read_ahead.drain()
    assert sorted(decoded) == [(1, True), (2, True)]


class _Plan:
    lanes = (0,)

    def __init__(self, blocks: int, error: Exception | None = None) -> None:
        self.blocks, self.error = blocks, error

    def pointer_blocks(self, lane: int):
        for k in range(self.blocks):
            yield Block.from_pointers(np.zeros(4, np.int64), np.zeros(4, np.int64),
                                      np.arange(4 * k, 4 * k + 4, dtype=np.int64),
                                      lane_id=0, chunk_id=0,
                                      chunk_offset=np.arange(4 * k, 4 * k + 4, dtype=np.int64))
        if self.error is not None:
            raise self.error


def _scheduler(plan, lookahead: int):
    from zephon.engine.scheduler import LaneScheduler

    class Sync(LaneScheduler):  # a worker that answers at once: the block is its own result
        def __init__(self) -> None:
            super().__init__(plan, window=2, deterministic=True, pull_ahead=lookahead)
            self.log: list[tuple[str, int]] = []

        def free_capacity(self) -> bool:
            return True

        def send(self, seq: int, block) -> None:
            self.log.append(("sent", int(block.meta["sample_idx"][0]) // 4))
            self.complete(seq, block)

        def wait(self) -> None:
            raise AssertionError("every result is in already")

        def seen(self, block) -> None:
            self.log.append(("seen", int(block.meta["sample_idx"][0]) // 4))

    return Sync()


def test_the_scheduler_looks_at_blocks_ahead_of_sending_them():
    sched = _scheduler(_Plan(10), lookahead=3)
    first = next(sched.prepared(0))
    assert first.block.meta["sample_idx"].tolist() == [0, 1, 2, 3]
    # blocks 0 and 1 went out (the window), and 3 more were looked at beyond them
    assert [k for what, k in sched.log if what == "seen"] == [0, 1, 2, 3, 4]
    assert [k for what, k in sched.log if what == "sent"] == [0, 1]
    rest = [int(p.block.meta["sample_idx"][0]) // 4 for p in sched.prepared(0)]
    assert rest == list(range(1, 10))
    seen = [k for what, k in sched.log if what == "seen"]
    assert seen == list(range(10))  # each block looked at once, in order
    for k in range(10):  # and always before it was sent
        assert sched.log.index(("seen", k)) < sched.log.index(("sent", k))
    plain = _scheduler(_Plan(10), lookahead=0)
    next(plain.prepared(0))
    assert [k for what, k in plain.log if what == "seen"] == [0, 1]


def test_a_feed_error_met_while_looking_ahead_is_raised_where_the_lane_reaches_it():
    def delivered(lookahead: int) -> list[int]:
        got = []
        with pytest.raises(ValueError, match="curriculum broke"):
            for p in _scheduler(_Plan(5, ValueError("curriculum broke")), lookahead).prepared(0):
                got.append(int(p.block.meta["sample_idx"][0]) // 4)
        return got

    # met 4 blocks early, raised where the scheduler without look-ahead (and inline) raises it
    assert delivered(4) == delivered(0) == [0, 1, 2, 3]


@pytest.mark.parametrize("opts", [dict(num_workers=0), dict(num_workers=2, runner="threads"),
                                  dict(num_workers=2)], ids=["inline", "threads", "process"])
def test_an_index_that_overcounts_a_shard_is_the_same_data_error_in_every_runner(tmp_path,
                                                                               opts):
    """Pointers past the file's last row (the index said 260 rows, the file has 200) once
    reached the owners' row-group lookup, an IndexError with workers; every runner names the
    shard instead."""
    import json

    from zephon.io import DataError, build_index

    root = tmp_path / "p"
    root.mkdir()
    for s in range(2):
        table = pa.table({"id": list(range(s * 1000, s * 1000 + 200))})
        pq.write_table(table, root / f"part-{s}.parquet", row_group_size=50)
    build_index("parquet", root, progress=False)
    doc = json.loads((root / "index.json").read_text())
    doc["shards"][0]["rows"] = 260
    (root / "index.json").write_text(json.dumps(doc))
    ws = StaticMixtureWorkSource([Dataset.from_path("web", root)], {"web": 1.0}, seed=1,
                                 chunk_size=100, shuffle_within_shard=True)
    p = Pipeline(ws).batch(8).options(micro_batch_size=32, **opts)
    with pytest.raises(DataError, match=r"part-0.parquet: shard holds 200 rows but 260") as e:
        for _ in p:
            pass
    assert e.value.dataset == "web"


def test_owners_leave_pointers_past_a_shards_rows_to_the_reader():
    class Shrunk:  # a dataset whose footer holds fewer rows than the pointers reach
        def row_group_starts(self, shard):
            return np.array([0, 50, 100], dtype=np.int64)

    own = Ownership([Shrunk()], 2)
    meta = {"dataset_id": np.zeros(3, np.int64), "shard_id": np.zeros(3, np.int64),
            "sample_idx": np.array([10, 60, 150]), "lane_id": np.zeros(3, np.int64),
            "chunk_id": np.zeros(3, np.int64), "chunk_offset": np.arange(3)}
    assert own.owners(Block(meta, None)).tolist() == [-1, -1, -1]
