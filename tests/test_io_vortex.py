"""Vortex files written by ``vortex-data`` itself, read through pipelines and compared field by
field with Vortex's own scan (values as spec addendum A.10 gives them)."""

from __future__ import annotations

import json
import threading

import fsspec
import numpy as np
import pyarrow as pa
import pytest
from format_checks import assert_stream_exact, flat, one_epoch

from zephon.io import DataError, Dataset, ShardPrefetcher, build_index
from zephon.io.inspector import DatasetInspector, inspect_main

vx = pytest.importorskip("vortex")


def _table(shard: int, n: int) -> pa.Table:
    rng = np.random.default_rng(shard)
    ids = np.arange(n) + 1000 * shard
    return pa.table({
        "id": pa.array(ids),
        "text": pa.array([f"doc {i} " + "é" * (i % 5) for i in ids.tolist()]),
        "score": pa.array(rng.random(n).astype(np.float32)),
        "tokens": pa.array([rng.integers(0, 50_000, 1 + i % 13).tolist() for i in range(n)],
                           pa.list_(pa.int32())),
        "blob": pa.array([bytes([i % 256]) * (i % 5) for i in range(n)], pa.binary()),
        "note": pa.array([None if i % 3 == 0 else f"n{i}" for i in range(n)]),
    })


def _write(root, shards: int = 4, n: int = 40) -> None:
    for s in range(shards):
        table = _table(s, n + s)
        # the second half compressed by Vortex's own compressor before writing
        data = vx.compress(vx.array(table)) if s % 2 else table
        vx.io.write(data, str(root / f"part-{s:03d}.vortex"))


def _as_python(value):
    """A.10 values as the Python values of Vortex's own ``to_pylist``."""
    if isinstance(value, np.ndarray):
        assert not value.flags.writeable
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _vortexs_own(root) -> list[dict]:
    return [r for f in sorted(root.glob("*.vortex"))
            for r in vx.open(str(f)).to_arrow().read_all().to_pylist()]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("vortex")
    _write(root)
    return root, _vortexs_own(root)


def _same(got: list[dict], expected: list[dict]) -> None:
    assert len(got) == len(expected)
    by_id = {r["id"]: r for r in expected}
    for rec in got:
        assert type(rec["id"]) is np.int64 and type(rec["score"]) is np.float32
        assert {k: _as_python(v) for k, v in rec.items()} == by_id[int(rec["id"])]
    assert sorted(int(r["id"]) for r in got) == sorted(by_id)


def test_records_are_vortexs_own(written):
    root, expected = written
    ds = Dataset.from_path("v", root)
    assert ds.fmt == "vortex" and ds.counts().tolist() == [40, 41, 42, 43]
    _same(flat(one_epoch(ds)), expected)
    assert [int(r["id"]) for r in ds.read_payloads(1, [5, 0, 5])] == [1005, 1000, 1005]


def test_streams_are_exact(written):
    assert_stream_exact(Dataset.from_path("v", written[0]), "id")


def test_remote_files_through_fsspec_prefetch_and_the_node_cache(written, tmp_path,
                                                                  monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(cache))
    root, expected = written
    fs = fsspec.filesystem("memory")
    fs.put(str(root), "/vx-remote", recursive=True)
    try:
        ds = Dataset.from_path("v", "memory://vx-remote")
        with ShardPrefetcher([ds]) as pre:
            pre.submit(0, ds.ids().tolist())
            pre.wait()
        assert len([p for p in (cache / "shards").iterdir()
                    if p.name.endswith(".vortex")]) == 4
        _same(flat(one_epoch(ds)), expected)
        assert_stream_exact(ds, "id", cuts=(3,))
    finally:
        fs.rm("/vx-remote", recursive=True)


def test_build_index_counts_remote_footers_without_downloading(written, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(cache))
    fs = fsspec.filesystem("memory")
    fs.put(str(written[0]), "/vx-index", recursive=True)
    try:
        build_index("vortex", "memory://vx-index", progress=False)
        assert not cache.exists() or not list((cache / "shards").glob("*.vortex"))
        ds = Dataset.from_path("v", "memory://vx-index")
        assert ds._catalog.from_index and ds.counts().tolist() == [40, 41, 42, 43]
    finally:
        fs.rm("/vx-index", recursive=True)


def test_an_untagged_index_of_vortex_files_is_not_taken_for_mds(written, tmp_path):
    root = tmp_path / "copy"
    fsspec.filesystem("file").put(str(written[0]), str(root), recursive=True)
    shards = [{"path": f"part-{s:03d}.vortex", "num_rows": 40 + s} for s in range(4)]
    (root / "index.json").write_text(json.dumps({"shards": shards}))
    ds = Dataset.from_path("v", root)
    assert ds.fmt == "vortex" and ds._catalog.from_index and ds.total() == 166


def test_inspect_and_the_inspector(written, capsys):
    root, expected = written
    with DatasetInspector(Dataset.from_path("v", root)) as insp:
        assert insp.read(2, 1)["text"] == expected[40 + 41 + 1]["text"]
    assert inspect_main([str(root), "--rows", "1"]) == 0
    assert "vortex  4 shard(s), 166 rows" in capsys.readouterr().out


def test_bad_files_are_named(written, tmp_path):
    data = (written[0] / "part-000.vortex").read_bytes()
    (tmp_path / "a.vortex").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"dataset 'v', shard .*a.vortex: not a readable Vortex"):
        Dataset.from_path("v", tmp_path)


# rows in the orders the pointer stream gives: one run, a run that does not start at 0, runs
# in reverse, a dense shuffle with repeats (read as the covering range), a sparse pick (an
# ``indices`` scan), one row, none
_PATTERNS = [list(range(43)), list(range(7, 30)), list(range(29, 3, -1)),
             [5, 3, 4, 3, 9, 8, 6, 7, 5], [41, 0, 20, 0], [13], []]


@pytest.mark.parametrize("rows", _PATTERNS)
def test_reads_give_vortexs_own_rows_in_the_order_asked(written, rows):
    root, _ = written
    ds = Dataset.from_path("v", root)
    f = root / "part-003.vortex"  # compressed by Vortex, 43 rows
    own = vx.open(str(f)).to_arrow().read_all().to_pylist()
    sid = next(s for s in ds.ids().tolist() if ds.shard_name(s).endswith(f.name))
    got = ds.read_table(sid, rows)
    assert got.to_pylist() == [own[r] for r in rows]
    types = {f.name: f.type for f in got.schema}
    assert types["text"] == pa.large_string() and types["blob"] == pa.large_binary()
    assert ds.read_table(sid, rows, columns=["note", "id"]).to_pylist() == \
        [{"note": own[r]["note"], "id": own[r]["id"]} for r in rows]


def test_reads_across_the_files_splits(tmp_path):
    n = 200_000  # several splits (Vortex cuts 65,536 rows)
    vx.io.write(pa.table({"id": np.arange(n), "half": np.arange(n) / 2}),
                str(tmp_path / "big.vortex"))
    assert len(vx.open(str(tmp_path / "big.vortex")).splits()) > 1
    ds = Dataset.from_path("v", tmp_path)
    rng = np.random.default_rng(0)
    for rows in (np.arange(65_000, 132_000), rng.permutation(np.arange(64_000, 67_000))[:2000],
                 rng.integers(0, n, 300)):
        got = ds.read_table(0, rows)
        assert got.column("id").to_numpy().tolist() == rows.tolist()
        assert got.column("half").to_numpy().tolist() == (rows / 2).tolist()


def test_announced_reads_run_ahead_on_the_read_ahead_threads(written, monkeypatch):
    from zephon.io.formats import vortex as vortex_format

    root, expected = written
    ds = Dataset.from_path("v", root)
    threads = []
    read = vortex_format.VortexShardReader._read

    def spy(self, rows, columns=None):
        threads.append(threading.current_thread().name)
        return read(self, rows, columns)

    monkeypatch.setattr(vortex_format.VortexShardReader, "_read", spy)
    rows = np.array([3, 4, 5, 1, 2])
    ds.read_ahead(1, rows)
    rows[:] = 0  # the caller's array changing after the hint changes nothing
    got = ds.read_payloads(1, [3, 4, 5, 1, 2])
    assert [int(r["id"]) for r in got] == [1003, 1004, 1005, 1001, 1002]
    assert len(threads) == 1 and threads[0].startswith("zephon-read-ahead")
    ds.read_ahead(1, np.array([41, 1]))  # a bad row: the read that takes it raises
    with pytest.raises(IndexError, match="row index 41 out of range"):
        ds.read_table(1, [41, 1])
    assert len(threads) == 2
