"""Row-group ownership (zephon/engine/ownership.py): with several worker processes, each
small Parquet row group is read by one worker only, and micro-batches cut into parts by owner
come back together in pointer order."""

from __future__ import annotations

from collections import defaultdict

import engine_fakes as F
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from zephon import Pipeline
from zephon.block import Block
from zephon.engine.ownership import Ownership, merge
from zephon.engine.source import lane_pointer_blocks
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
            .options(micro_batch_size=RG, **opts))


def test_row_group_starts_come_from_the_footer(mixture_dir):
    ds = datasets(mixture_dir)[1]
    starts = ds.row_group_starts(2)
    n = 150 + 37 * 2 + 11
    assert starts.tolist() == [*range(0, n, RG), n]
    assert Dataset.from_dict("m", {0: [{"a": 1}]}).row_group_starts(0) is None


def test_each_row_group_is_read_by_one_worker_and_the_stream_is_unchanged(mixture_dir):
    def strip(batches):
        return [(tuple(b.ids), [{k: v for k, v in r.items() if k != "pid"}
                                for r in b.block.payload_list()]) for b in batches]

    inline = strip(pipeline(mixture_dir, num_workers=0))
    got = list(pipeline(mixture_dir, num_workers=2))
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
    own = Ownership(ds, 3, RG)
    split = 0
    for block in lane_pointer_blocks(ws, 0, 1, RG):
        parts = own.split(block)
        split += len(parts) > 1
        offsets = np.concatenate([p.meta["chunk_offset"] for _, p in parts])
        assert sorted(offsets.tolist()) == block.meta["chunk_offset"].tolist()
        for worker, part in parts:
            m = part.meta
            for d, s, row in zip(m["dataset_id"], m["shard_id"], m["sample_idx"]):
                group = int(row) // RG
                assert worker == (group + int(d) + int(s)) % 3
    assert split > 10


def test_large_row_groups_have_no_owner(mixture_dir):
    ds = datasets(mixture_dir)
    block = Block.from_pointers(np.zeros(8, np.int64), np.zeros(8, np.int64),
                                np.arange(8, dtype=np.int64), lane_id=0, chunk_id=0,
                                chunk_offset=np.arange(8, dtype=np.int64))
    # 64-row groups, micro-batches of 16: a row group would hold 4 micro-batches of one owner
    assert (Ownership(ds, 2, 16).owners(block) == -1).all()
    assert Ownership(ds, 2, 16).split(block) == [(None, block)]
    assert (Ownership(ds, 2, 32).owners(block) >= 0).all()


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
    ordered, loose = FetchOp(ds), FetchOp(ds)
    loose.restore_order = False
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
    from zephon.engine.ownership import ASK_AGAIN

    late = _LateLayout(known_after=2)
    own = Ownership([late], 2, 16)
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
