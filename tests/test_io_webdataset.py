"""WebDataset tar shards: records grouped by key as ``webdataset``'s own reader groups them,
random access through a member index cached in the node cache."""

from __future__ import annotations

import gzip
import io
import pickle
import re
import tarfile

import fsspec
import pytest
from format_checks import assert_same_records, assert_stream_exact, flat, one_epoch

from zephon.io import DataError, Dataset, ShardPrefetcher, build_index
from zephon.io.formats import tar_members
from zephon.io.inspector import DatasetInspector, inspect_main

wds = pytest.importorskip("webdataset")


def _write(root, shards: int = 4, per: int = 13, gz_last: bool = True) -> list[str]:
    urls = []
    for s in range(shards):
        name = root / (f"shard-{s:04d}.tar" + (".gz" if gz_last and s == shards - 1 else ""))
        with wds.TarWriter(str(name), compress=name.suffix == ".gz") as w:
            for i in range(per + s):
                rec = {"__key__": f"s{s}/{i:05d}", "txt": f"text {s} {i} ".encode() * (i % 4),
                       "json": b'{"i": %d}' % i, "cls": str(i % 3).encode()}
                if i % 3 == 1:
                    rec["seg.png"] = bytes([i % 256]) * (i + 1)  # only some records have it
                w.write(rec)
        urls.append(str(name))
    return urls


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("wds")
    urls = _write(root)
    return root, urls, list(wds.WebDataset(urls, shardshuffle=False))


def test_records_are_webdatasets_own(shards):
    root, urls, expected = shards
    ds = Dataset.from_path("w", root)
    assert ds.fmt == "webdataset" and ds.counts().tolist() == [13, 14, 15, 16]
    assert_same_records(flat(one_epoch(ds)), expected, "__key__")
    assert ds.read_payloads(0, [1]) == [expected[1]]
    sizes = ds.record_bytes(0, [0, 1])
    assert sizes.tolist() == [sum(len(v) for k, v in expected[i].items()
                                  if not k.startswith("__")) for i in (0, 1)]


def test_streams_are_exact(shards):
    assert_stream_exact(Dataset.from_path("w", shards[0]), "__key__")


def test_the_member_index_is_built_once_and_kept_in_the_node_cache(shards, monkeypatch):
    scans = []
    real = tar_members.scan_members
    monkeypatch.setattr(tar_members, "scan_members",
                        lambda *a, **k: scans.append(a) or real(*a, **k))
    ds = Dataset.from_path("w", shards[0])  # counted at discovery (or found in the cache)
    before = len(scans)
    copy = pickle.loads(pickle.dumps(ds))  # as a worker process gets it: nothing open
    assert copy.read_payloads(2, [14, 0])[0]["__key__"] == "s2/00014"
    assert len(scans) == before <= 4


def test_remote_shards_through_fsspec_prefetch_and_the_node_cache(shards, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "cache"))
    root, urls, expected = shards
    fs = fsspec.filesystem("memory")
    fs.put([str(u) for u in urls], "/wds-remote/", recursive=False)
    try:
        ds = Dataset.from_path("w", "memory://wds-remote")
        with ShardPrefetcher([ds]) as pre:
            pre.submit(0, ds.ids().tolist())
            pre.wait()
        remote = [{k: (f"memory://wds-remote/{v.rsplit('/', 1)[-1]}" if k == "__url__" else v)
                   for k, v in r.items() if k != "__local_path__"} for r in expected]
        assert_same_records(flat(one_epoch(ds)), remote, "__key__")
        assert_stream_exact(ds, "__key__", cuts=(2,))
    finally:
        fs.rm("/wds-remote", recursive=True)


def test_build_index_inspect_and_the_inspector(shards, tmp_path, capsys):
    root, urls, expected = shards
    copy = tmp_path / "copy"
    fsspec.filesystem("file").put(str(root), str(copy), recursive=True)
    build_index("webdataset", copy, progress=False)
    ds = Dataset.from_path("w", copy)
    assert ds._catalog.from_index and ds.counts().tolist() == [13, 14, 15, 16]
    with DatasetInspector(ds) as insp:
        assert insp.read(0, 4)["json"] == b'{"i": 4}'
    assert inspect_main([str(copy), "--rows", "1", "--width", "2000"]) == 0
    out = capsys.readouterr().out
    assert "webdataset 4 shard(s), 58 rows" in out and "s0/00000" in out


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_bad_shards_are_named_with_their_row(tmp_path):
    (tmp_path / "a.tar").write_bytes(_tar([("k1.txt", b"x"), ("k2.txt", b"y"),
                                           ("k2.TXT", b"z")]))
    with pytest.raises(DataError, match=r"dataset 'w', shard .*a.tar, row 2: .*'txt' given twice"):
        Dataset.from_path("w", tmp_path)
    good = _tar([(f"k{i}.txt", b"x" * 600) for i in range(4)])  # 1536 bytes a member
    for cut in (1536 + 512 + 300, 1536 + 200):  # inside the 2nd member's data, its header
        (tmp_path / "a.tar").write_bytes(good[:cut])
        with pytest.raises(DataError, match=r"shard .*a.tar, row 2: .*truncated"):
            Dataset.from_path("w", tmp_path)
    (tmp_path / "a.tar").unlink()
    (tmp_path / "b.tar.gz").write_bytes(gzip.compress(good)[:100])
    with pytest.raises(DataError, match=r"shard .*b.tar.gz: cannot decompress"):
        Dataset.from_path("w", tmp_path)


def test_a_tar_cut_at_a_member_boundary_is_named_not_read_short(tmp_path):
    """tarfile takes a clean end of file for the end of the archive: a shard cut between two
    members (no end-of-archive blocks) must be refused, not read as a shorter shard."""
    src = tmp_path / "src"
    src.mkdir()
    urls = _write(src, shards=1, per=20, gz_last=False)
    good = open(urls[0], "rb").read()
    with tarfile.open(urls[0]) as t:
        bounds = [m.offset for m in t.getmembers()][1:]  # where each later member's header is
    cut = max(b for b in bounds if b <= 12288)
    for name, data in (("a.tar", good[:cut]), ("b.tar.gz", gzip.compress(good[:cut]))):
        root = tmp_path / name.split(".")[0]
        root.mkdir()
        (root / name).write_bytes(data)
        where = re.escape(name)
        with pytest.raises(DataError, match=rf"dataset 'w', shard .*{where}, row \d+: .*without "
                           r"the tar's end-of-archive blocks"):
            Dataset.from_path("w", root).counts()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "c.tar").write_bytes(good)  # the whole shard still reads
    assert Dataset.from_path("w", tmp_path / "c").counts().tolist() == [20]


def test_dunder_fields_reach_the_records_in_every_format():
    """``__key__``-style names are data (Zephon hides only its own ``__recipe``-style columns)."""
    ds = Dataset.from_dict("m", {0: [{"__key__": "a", "x": 1}, {"__key__": "b", "x": 2}]})
    assert sorted(flat(one_epoch(ds)), key=lambda r: r["x"]) == [{"__key__": "a", "x": 1},
                                                                  {"__key__": "b", "x": 2}]
