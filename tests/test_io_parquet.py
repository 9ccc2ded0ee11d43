"""Parquet datasets: row-group aware reads, the decoded row-group cache, errors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from io_helpers import records, write_parquet

from zephon.io import DataError, Dataset, ShardMissingError
from zephon.io.formats.row_group_cache import row_group_cache


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))
    row_group_cache().clear()


@pytest.fixture
def shards(tmp_path):
    out = []
    for s in range(3):
        recs = records(95, start=s * 1000)
        write_parquet(tmp_path / "d" / f"part-{s}.parquet", recs, row_group_size=10)
        out.append(recs)
    return out


def test_rows_in_requested_order(tmp_path, shards):
    ds = Dataset.from_path("pq", tmp_path / "d")
    assert ds.fmt == "parquet" and ds.counts().tolist() == [95, 95, 95]
    rows = np.array([94, 0, 13, 13, 57, 9, 10], dtype=np.int64)
    for sid in ds.ids():
        expected = [shards[sid][i] for i in rows]
        assert ds.read_table(sid, rows).to_pylist() == expected
        assert ds.read_payloads(sid, rows) == expected
        assert ds.read_table(sid, np.arange(5, 35)).to_pylist() == shards[sid][5:35]


def test_only_needed_row_groups_and_columns_are_decoded(tmp_path, shards, monkeypatch):
    ds = Dataset.from_path("pq", tmp_path / "d")
    decoded = []
    real = pq.ParquetFile.read_row_group

    def spy(self, i, columns=None, **kw):
        decoded.append((i, tuple(columns) if columns else None))
        return real(self, i, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    t = ds.read_table(1, [42, 47, 3], columns=["text"])
    assert t.column_names == ["text"]
    assert t.column("text").to_pylist() == [shards[1][i]["text"] for i in (42, 47, 3)]
    assert sorted(decoded) == [(0, ("text",)), (4, ("text",))]


def test_shuffle_within_shard_decodes_each_row_group_once(tmp_path, shards, monkeypatch):
    ds = Dataset.from_path("pq", tmp_path / "d")
    decoded = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group",
                        lambda self, i, **kw: decoded.append(i) or real(self, i, **kw))
    cache = row_group_cache()
    perm = np.random.default_rng(0).permutation(95)
    got = [ds.read_table(0, [int(i)]).to_pylist()[0] for i in perm]  # one sample per read
    assert got == [shards[0][i] for i in perm]
    assert sorted(decoded) == list(range(10))  # 10 row groups, each decoded once
    assert cache.hits >= 95 - 10


def test_row_group_cache_can_be_disabled(tmp_path, shards, monkeypatch):
    from zephon.io import StoreOptions

    ds = Dataset.from_path("pq", tmp_path / "d").with_store_options(
        StoreOptions(parquet_rg_cache={"enabled": False}))
    decoded = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group",
                        lambda self, i, **kw: decoded.append(i) or real(self, i, **kw))
    for _ in range(3):
        assert ds.read_table(2, [3]).to_pylist() == [shards[2][3]]
    assert decoded == [0, 0, 0]


def test_a_row_group_read_to_the_end_leaves_the_cache(tmp_path, shards, monkeypatch):
    """A forward pass frees each row group once all its rows are read: the next decode reuses
    that memory instead of faulting in fresh pages, and nothing stays held for the LRU."""
    from zephon.io.ahead import read_ahead

    monkeypatch.setattr(read_ahead, "enabled", False)  # no guesses landing in the cache
    ds = Dataset.from_path("pq", tmp_path / "d")
    cache = row_group_cache()
    ds.read_table(0, np.arange(0, 15))  # row group 0 whole, row group 1 in part
    assert cache._bytes > 0 and len(cache._items) == 1  # only the part-read row group stays
    got = ds.read_table(0, np.arange(15, 95))
    assert got.column("id").to_pylist() == [r["id"] for r in shards[0][15:95]]
    assert len(cache._items) == 0 and cache._bytes == 0
    # rows read twice count once: a row group is kept until every row was read
    ds.read_table(0, [20, 21, 20, 21])
    assert len(cache._items) == 1


def test_row_group_cache_is_lru_by_bytes():
    from zephon.io.formats.row_group_cache import RowGroupCache

    tables = {k: pa.table({"v": list(range(100))}) for k in "abc"}
    size = tables["a"].nbytes
    cache = RowGroupCache(limit_bytes=2 * size)
    cache.put(("a",), tables["a"])
    cache.put(("b",), tables["b"])
    assert cache.get(("a",)) is tables["a"]  # a is now the most recent
    cache.put(("c",), tables["c"])  # evicts b, the least recently used
    assert cache.get(("b",)) is None
    assert cache.get(("a",)) is tables["a"] and cache.get(("c",)) is tables["c"]
    cache.put(("huge",), pa.table({"v": list(range(10_000))}))  # larger than the limit
    assert cache.get(("huge",)) is None


def test_nulls_are_kept(tmp_path):
    recs = [{"a": 1, "b": None}, {"a": None, "b": "x"}]
    write_parquet(tmp_path / "d" / "x.parquet", recs)
    ds = Dataset.from_path("pq", tmp_path / "d")
    assert ds.read_payloads(0, [1, 0]) == recs[::-1]
    assert not ds.read_table(0, [0]).schema.metadata or \
        b"zephon.sparse" not in ds.read_table(0, [0]).schema.metadata


def test_unknown_column_is_named(tmp_path, shards):
    ds = Dataset.from_path("pq", tmp_path / "d")
    with pytest.raises(ValueError, match="nope"):
        ds.read_table(0, [1], columns=["nope"])


def test_empty_read_keeps_schema(tmp_path, shards):
    t = Dataset.from_path("pq", tmp_path / "d").read_table(0, [])
    assert t.num_rows == 0 and t.column_names == ["id", "text", "score"]


def test_corrupt_footer_names_the_shard(tmp_path, shards):
    path = tmp_path / "d" / "part-1.parquet"
    data = path.read_bytes()
    path.write_bytes(data[:-12])
    with pytest.raises(DataError, match="part-1.parquet.*footer") as e:
        Dataset.from_path("pq", tmp_path / "d")
    assert e.value.dataset == "pq"


def test_corrupt_footer_after_discovery(tmp_path, shards):
    ds = Dataset.from_path("pq", tmp_path / "d")
    (tmp_path / "d" / "part-2.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(DataError, match="part-2.parquet"):
        ds.read_table(2, [0])


def _corrupt_row_group_2(tmp_path) -> None:
    """x.parquet: 40 rows in row groups of 10; the third one's column chunk overwritten."""
    path = write_parquet(tmp_path / "d" / "x.parquet",
                         [{"v": f"payload-{i}" * 20} for i in range(40)], row_group_size=10)
    meta = pq.read_metadata(path)
    col = meta.row_group(2).column(0)
    start = col.dictionary_page_offset or col.data_page_offset
    data = bytearray(path.read_bytes())
    data[start: start + col.total_compressed_size] = b"\x07" * col.total_compressed_size
    path.write_bytes(bytes(data))


def test_corrupt_row_group_names_its_first_row(tmp_path):
    _corrupt_row_group_2(tmp_path)
    ds = Dataset.from_path("pq", tmp_path / "d")
    assert ds.read_table(0, [0]).num_rows == 1
    with pytest.raises(DataError) as e:
        ds.read_table(0, [25])
    assert e.value.row == 21 and "x.parquet" in str(e.value)


def test_deleted_shard(tmp_path, shards):
    ds = Dataset.from_path("pq", tmp_path / "d")
    (tmp_path / "d" / "part-0.parquet").unlink()
    with pytest.raises(ShardMissingError, match="part-0.parquet"):
        ds.read_table(0, [0])


def test_nested_and_list_columns(tmp_path):
    recs = [{"ids": [1, 2, 3], "meta": {"k": "v"}}, {"ids": [], "meta": {"k": "w"}}]
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "n.parquet")
    (tmp_path / "d").mkdir()
    (tmp_path / "n.parquet").rename(tmp_path / "d" / "n.parquet")
    ds = Dataset.from_path("pq", tmp_path / "d")
    assert ds.read_table(0, [1, 0]).to_pylist() == recs[::-1]


def _decodes_by_thread(monkeypatch) -> list[tuple[int, str]]:
    import threading

    decoded: list[tuple[int, str]] = []
    real = pq.ParquetFile.read_row_group

    def spy(self, i, **kw):
        decoded.append((i, threading.current_thread().name))
        return real(self, i, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    return decoded


def _settle() -> None:
    """Wait for the shard readers' read-ahead decodes."""
    from zephon.io.ahead import read_ahead

    read_ahead.drain()


def test_forward_reads_decode_the_next_row_groups_ahead(tmp_path, shards, monkeypatch):
    decoded = _decodes_by_thread(monkeypatch)
    ds = Dataset.from_path("pq", tmp_path / "d")
    got = []
    for a in range(0, 95, 7):  # small forward reads, as a sequential pointer stream makes them
        got += ds.read_table(1, np.arange(a, min(a + 7, 95))).to_pylist()
    _settle()
    assert got == shards[1]
    assert sorted(i for i, _ in decoded) == list(range(10))  # still each row group once
    ahead = [i for i, name in decoded if name.startswith("zephon-read-ahead")]
    assert len(ahead) >= 5  # most row groups were decoded before the reader asked for them


def test_a_second_pass_decodes_ahead_again(tmp_path, shards, monkeypatch):
    """Row groups read to the end are not guessed again within the pass; reading one again
    starts a new pass (the next epoch), and guesses resume."""
    decoded = _decodes_by_thread(monkeypatch)
    ds = Dataset.from_path("pq", tmp_path / "d")
    for _ in range(2):
        got = []
        for a in range(0, 95, 7):
            got += ds.read_table(1, np.arange(a, min(a + 7, 95))).to_pylist()
            _settle()
        assert got == shards[1]
    assert sorted(i for i, _ in decoded) == sorted(list(range(10)) * 2)
    second = [name for _, name in decoded[len(decoded) // 2:]]
    assert sum(name.startswith("zephon-read-ahead") for name in second) >= 5


def test_no_read_ahead_for_scattered_reads_or_when_disabled(tmp_path, shards, monkeypatch):
    from zephon.io.ahead import read_ahead

    decoded = _decodes_by_thread(monkeypatch)
    ds = Dataset.from_path("pq", tmp_path / "d")
    for row in (50, 5, 90, 20):  # jumps around: no guessing
        ds.read_table(0, [row])
    monkeypatch.setattr(read_ahead, "enabled", False)  # as in a worker process
    for a in range(0, 95, 10):
        ds.read_table(2, np.arange(a, min(a + 10, 95)))
    _settle()
    assert all(name == "MainThread" for _, name in decoded)


def test_a_read_ahead_failure_surfaces_on_the_read_that_wants_it(tmp_path):
    _corrupt_row_group_2(tmp_path)
    ds = Dataset.from_path("pq", tmp_path / "d")
    assert ds.read_table(0, np.arange(0, 10)).num_rows == 10
    assert ds.read_table(0, np.arange(10, 20)).num_rows == 10  # row group 2 tried ahead: fails
    _settle()
    with pytest.raises(DataError) as e:
        ds.read_table(0, np.arange(20, 25))
    assert e.value.row == 21 and "x.parquet" in str(e.value)


def test_a_hint_decodes_where_the_next_reads_start(tmp_path, shards, monkeypatch):
    decoded = _decodes_by_thread(monkeypatch)
    ds = Dataset.from_path("pq", tmp_path / "d")
    ds.read_ahead(2, np.arange(41, 60))  # the next block will read these rows of shard 2
    _settle()
    assert sorted(i for i, _ in decoded) == [4, 5]  # its first row group and the next
    assert all(name.startswith("zephon-read-ahead") for _, name in decoded)
    assert ds.read_table(2, np.arange(41, 60)).to_pylist() == shards[2][41:60]
    assert len(decoded) == 2  # the read found both decoded


def test_a_hint_at_a_passed_row_group_starts_a_new_pass(tmp_path, shards, monkeypatch):
    ds = Dataset.from_path("pq", tmp_path / "d")
    assert ds.read_table(2, np.arange(0, 95)).num_rows == 95  # every row group read through
    _settle()
    decoded = _decodes_by_thread(monkeypatch)
    ds.read_ahead(2, np.arange(0, 20))  # the next epoch starts this shard again
    _settle()
    assert sorted(i for i, _ in decoded) == [0, 1]
    assert all(name.startswith("zephon-read-ahead") for _, name in decoded)


def test_the_inline_engine_hints_the_next_block(tmp_path, shards, monkeypatch):
    from zephon import Pipeline
    from zephon.io.ahead import read_ahead
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    def stream() -> list[dict]:
        row_group_cache().clear()
        ds = Dataset.from_path("pq", tmp_path / "d")
        ws = StaticMixtureWorkSource([ds], MixtureSpec({"pq": 1.0}), seed=0, chunk_size=95)
        p = Pipeline(ws).batch(10).options(num_workers=0, micro_batch_size=20)
        return [r.payload for b in p for r in b]

    decoded = _decodes_by_thread(monkeypatch)
    hinted = stream()
    on_main = [i for i, name in decoded if name == "MainThread"]
    # only the first block's two row groups (20 rows of 10-row groups) were decoded on the
    # caller's thread; the 28 others ahead, on hints and forward reads
    assert len(on_main) <= 2 and len(decoded) >= 30
    monkeypatch.setattr(read_ahead, "enabled", False)
    assert hinted == stream()  # the same records in the same order


def test_threads_reading_one_shard_decode_in_parallel_and_each_row_group_once(
        tmp_path, shards, monkeypatch):
    """As the threads runner's workers read consecutive blocks: no shared handle behind a lock,
    and a row group one thread is decoding is waited for by the others, not decoded again."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from zephon.io.ahead import read_ahead

    monkeypatch.setattr(read_ahead, "enabled", False)
    decoded: list[int] = []
    running, most = [0], [0]
    lock = threading.Lock()
    real = pq.ParquetFile.read_row_group

    def slow(self, i, **kw):
        with lock:
            decoded.append(i)
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)  # long enough for the other threads to arrive meanwhile
        try:
            return real(self, i, **kw)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", slow)
    ds = Dataset.from_path("pq", tmp_path / "d")
    # consecutive blocks that start and end inside row groups (of 10 rows): two threads want
    # the row group they share at the same time
    spans = [np.arange(a, min(a + 15, 95)) for a in range(0, 95, 15)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda rows: ds.read_table(0, rows).to_pylist(), spans))
    assert got == [[shards[0][i] for i in rows] for rows in spans]
    assert sorted(decoded) == list(range(10))  # each row group once
    assert most[0] >= 2  # and not one at a time


def test_threads_runner_decodes_each_row_group_once(tmp_path, shards, monkeypatch):
    """Its workers finish row groups out of order: a forward guess made after the slower
    worker's read must not decode again a row group the faster one has read to the end."""
    from zephon import Pipeline
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    decoded = _decodes_by_thread(monkeypatch)
    ds = Dataset.from_path("pq", tmp_path / "d")
    ws = StaticMixtureWorkSource([ds], MixtureSpec({"pq": 1.0}), seed=0, chunk_size=95)
    p = Pipeline(ws).batch(5).options(num_workers=2, runner="threads", micro_batch_size=15)
    rows = sum(len(b) for b in p)
    _settle()
    assert rows == 285
    assert sorted(i for i, _ in decoded) == sorted(list(range(10)) * 3)  # 3 shards, 10 groups


def test_decode_ahead_decodes_the_named_row_group_once_even_without_guesses(
        tmp_path, shards, monkeypatch):
    """What a worker process does with the row groups the coordinator says it owns: decode
    each on the read-ahead thread (guesses are off there); the read then finds it decoded."""
    from zephon.io.ahead import read_ahead

    monkeypatch.setattr(read_ahead, "enabled", False)  # as in a worker process
    decoded = _decodes_by_thread(monkeypatch)
    ds = Dataset.from_path("pq", tmp_path / "d")
    ds.decode_ahead(2, 4)
    ds.decode_ahead(2, 4)  # told twice (or while it decodes): still one decode
    _settle()

    def where():
        return [(g, name.startswith("zephon-read-ahead")) for g, name in decoded]

    assert where() == [(4, True)]
    assert ds.read_table(2, np.arange(40, 50)).to_pylist() == shards[2][40:50]
    assert where() == [(4, True)]  # the read decoded nothing
    ds.decode_ahead(2, 10)  # past the last row group: nothing to do
    ds.decode_ahead(2, 4)  # read to the end and dropped: told again means a new pass
    _settle()
    assert where() == [(4, True)] * 2

