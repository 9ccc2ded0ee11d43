"""Lance datasets written by ``pylance`` itself (several fragments, an append, deleted rows),
read through pipelines and compared field by field with Lance's own scanner, the version
pinned at discovery; remote through ``memory://`` and a moto S3 server."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import fsspec
import numpy as np
import pyarrow as pa
import pytest
from format_checks import assert_stream_exact, flat, one_epoch
from io_helpers import moto_s3, s3_client

from zephon.io import DataError, Dataset, ShardPrefetcher
from zephon.io.inspector import DatasetInspector, inspect_main

lance = pytest.importorskip("lance")


def _table(start: int, n: int) -> pa.Table:
    rng = np.random.default_rng(start)
    ids = np.arange(start, start + n)
    return pa.table({
        "id": pa.array(ids),
        "text": pa.array([f"doc {i} " + "é" * (i % 5) for i in ids.tolist()]),
        "score": pa.array(rng.random(n).astype(np.float32)),
        "tokens": pa.array([rng.integers(0, 50_000, 1 + i % 13).tolist() for i in range(n)],
                           pa.list_(pa.int32())),
        "emb": pa.array([rng.random(4).astype(np.float32).tolist() for _ in range(n)],
                        pa.list_(pa.float32(), 4)),
        "note": pa.array([None if i % 3 == 0 else f"n{i}" for i in range(n)]),
    })


def _write(root) -> None:
    lance.write_dataset(_table(0, 100), str(root), max_rows_per_file=30)
    lance.write_dataset(_table(100, 25), str(root), mode="append")
    lance.dataset(str(root)).delete("id % 10 = 3")


def _as_python(value):
    if isinstance(value, np.ndarray):
        assert not value.flags.writeable
        return value.tolist()
    return value.item() if isinstance(value, np.generic) else value


def _same(got: list[dict], expected: list[dict]) -> None:
    assert len(got) == len(expected)
    by_id = {r["id"]: r for r in expected}
    for rec in got:
        assert type(rec["id"]) is np.int64 and rec["emb"].shape == (4,)
        assert {k: _as_python(v) for k, v in rec.items()} == by_id[int(rec["id"])]
    assert sorted(int(r["id"]) for r in got) == sorted(by_id)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("lance") / "ds.lance"
    _write(root)
    return root, lance.dataset(str(root)).to_table().to_pylist()


def test_records_are_lances_own(written):
    root, expected = written
    ds = Dataset.from_path("l", root)
    assert ds.fmt == "lance" and ds.counts().tolist() == [27, 27, 27, 9, 22]
    _same(flat(one_epoch(ds)), expected)
    in_order = [r for s in ds.ids().tolist() for r in ds.read_payloads(s, range(ds.count(s)))]
    assert [int(r["id"]) for r in in_order] == [r["id"] for r in expected]
    with pytest.raises(IndexError):
        ds.read_payloads(3, [9])


def test_streams_are_exact(written):
    assert_stream_exact(Dataset.from_path("l", written[0]), "id")


def test_the_version_is_pinned_at_discovery(tmp_path):
    root = tmp_path / "ds.lance"
    _write(root)
    ds = Dataset.from_path("l", root)
    expected = lance.dataset(str(root)).to_table().to_pylist()
    lance.write_dataset(_table(500, 10), str(root), mode="append")
    lance.dataset(str(root)).delete("id < 50")
    _same([r for s in ds.ids().tolist() for r in ds.read_payloads(s, range(ds.count(s)))],
          expected)
    assert Dataset.from_path("l", root).total() == len(expected) + 10 - 45


def test_remote_datasets_through_fsspec_prefetch_and_the_node_cache(written, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))
    root, expected = written
    fs = fsspec.filesystem("memory")
    fs.put(str(root), "/lance-remote", recursive=True)
    try:
        ds = Dataset.from_path("l", "memory://lance-remote")
        with ShardPrefetcher([ds]) as pre:
            pre.submit(0, ds.ids().tolist())
            pre.wait()
        _same(flat(one_epoch(ds)), expected)
        assert_stream_exact(ds, "id", cuts=(3,))
    finally:
        fs.rm("/lance-remote", recursive=True)


def test_a_dataset_on_s3(written, tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))
    root, expected = written
    with moto_s3() as s3:
        bucket = f"b-{uuid.uuid4().hex[:12]}"
        client = s3_client(s3["endpoint"])
        client.create_bucket(Bucket=bucket)
        for f in root.rglob("*"):
            if f.is_file():
                client.put_object(Bucket=bucket, Key=f"ds/{f.relative_to(root)}",
                                  Body=f.read_bytes())
        ds = Dataset.from_path("l", f"s3://{bucket}/ds", storage_options=s3["storage_options"])
        assert ds.counts().tolist() == [27, 27, 27, 9, 22]
        _same(flat(one_epoch(ds)), expected)


def test_inspect_and_the_inspector(written, capsys):
    root, expected = written
    with DatasetInspector(Dataset.from_path("l", root)) as insp:
        assert int(insp.read(1, 0)["id"]) == expected[27]["id"]
    assert inspect_main([str(root), "--rows", "1"]) == 0
    assert "lance   5 shard(s), 112 rows" in capsys.readouterr().out


def test_bad_data_files_are_named(tmp_path):
    root = tmp_path / "ds.lance"
    lance.write_dataset(_table(0, 50), str(root), max_rows_per_file=25)
    data = sorted((root / "data").iterdir())[0]
    data.write_bytes(data.read_bytes()[:100])
    ds = Dataset.from_path("l", root)  # the manifest alone: no data file is read
    sid = next(s for s in ds.ids().tolist() if ds.shard_name(s).endswith(data.name))
    with pytest.raises(DataError, match=rf"dataset 'l', shard .*{data.name}: not a readable"):
        ds.read_payloads(sid, [0])
    assert len(ds.read_payloads(1 - sid, [0, 1])) == 2


# logical rows (deleted ones skipped) in the orders the pointer stream gives: one run, a run
# that does not start at 0, runs in reverse, a dense shuffle with repeats (read as the covering
# range), a sparse pick (``take_rows``), one row, none
_PATTERNS = [list(range(27)), list(range(7, 20)), list(range(20, 3, -1)),
             [5, 3, 4, 3, 9, 8, 6, 7, 5], [26, 0, 13, 0], [13], []]


@pytest.mark.parametrize("rows", _PATTERNS)
def test_reads_give_lances_own_rows_in_the_order_asked(written, rows):
    root, _ = written
    ds = Dataset.from_path("l", root)
    own = lance.dataset(str(root)).get_fragments()[1].to_table().to_pylist()  # 3 rows deleted
    assert ds.count(1) == len(own) == 27
    got = ds.read_table(1, rows)
    assert got.to_pylist() == [own[r] for r in rows]
    assert got.schema.names == list(own[0])
    assert ds.read_table(1, rows, columns=["note", "id"]).to_pylist() == \
        [{"note": own[r]["note"], "id": own[r]["id"]} for r in rows]


def test_announced_reads_run_ahead_on_the_read_ahead_threads(written, monkeypatch):
    root, expected = written
    ds = Dataset.from_path("l", root)
    assert ds.read_table(0, []).num_rows == 0  # opens the reader, which reads its schema
    threads = []
    for name in ("read_range", "take_rows"):
        def spy(self, *args, _read=getattr(lance.file.LanceFileReader, name), **kw):
            threads.append(threading.current_thread().name)
            return _read(self, *args, **kw)

        monkeypatch.setattr(lance.file.LanceFileReader, name, spy)
    rows = np.array([3, 4, 5, 1, 2])
    ds.read_ahead(0, rows)
    rows[:] = 0  # the caller's array changing after the hint changes nothing
    got = ds.read_payloads(0, [3, 4, 5, 1, 2])
    assert [int(r["id"]) for r in got] == [expected[i]["id"] for i in [3, 4, 5, 1, 2]]
    assert len(threads) == 1 and threads[0].startswith("zephon-read-ahead")
    ds.read_ahead(0, np.array([27, 1]))  # a bad row: the read that takes it raises
    with pytest.raises(IndexError, match="row index 27 out of range"):
        ds.read_table(0, [27, 1])
    assert len(threads) == 1


def test_one_reader_read_from_several_threads_at_once(written):
    root, expected = written
    ds = Dataset.from_path("l", root)
    rng = np.random.default_rng(1)
    asks = [np.arange(a, a + 20) % 27 if a % 2 else rng.permutation(27)[:9] for a in range(60)]
    ids = [r["id"] for r in expected[:27]]

    def read(rows):
        ds.read_ahead(0, rows)  # the read-ahead thread and this one use the reader together
        return ds.read_table(0, rows).column("id").to_pylist()

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(read, asks))
    assert got == [[ids[r] for r in rows] for rows in asks]


def test_dataset_path_is_the_pinned_manifest_and_a_manifest_reads_its_version(tmp_path):
    """Issue 32 item 6 (spec addendum A.11): ``dataset.path`` is the manifest discovery pinned;
    passing an older manifest reads that version."""
    root = tmp_path / "ds.lance"
    lance.write_dataset(_table(0, 40), str(root), max_rows_per_file=30)
    v1 = Dataset.from_path("l", root)
    assert v1.path is not None and v1.path.startswith(str(root) + "/_versions/")
    assert v1.path.endswith(".manifest") and v1.total() == 40
    old = v1.path
    lance.write_dataset(_table(100, 25), str(root), mode="append")
    newest = Dataset.from_path("l", root)
    assert newest.total() == 65 and newest.path != old
    again = Dataset.from_path("l", old)  # the first version, by its manifest
    assert again.fmt == "lance" and again.total() == 40 and again.path == old
    assert sorted(int(r["id"]) for r in flat(one_epoch(again))) == list(range(40))
    assert Dataset.from_path("l", newest.path).total() == 65
    with pytest.raises(FileNotFoundError, match="manifest"):
        Dataset.from_path("l", str(root / "_versions" / "999.manifest"))


def test_dataset_path_of_other_roots(tmp_path):
    from zephon.io import InMemoryShard

    (tmp_path / "part-0.jsonl").write_text('{"text": "a"}\n')
    assert Dataset.from_path("j", tmp_path).path == str(tmp_path)
    assert Dataset.from_dict("m", {0: InMemoryShard([{"x": 1}])}).path is None
