"""The format registry: a third-party format is one module plus a registration (or an entry
point), and every part of the dataset layer reaches it through the format object."""

from __future__ import annotations

import warnings
from importlib.metadata import EntryPoint

import numpy as np
import pytest
from tests_support.tsv_format import TSV, TsvFormat

from zephon import Pipeline
from zephon.io import Dataset, build_index
from zephon.io.formats import registry
from zephon.io.formats.base import ShardFormat, ShardReader
from zephon.io.inspector import DatasetInspector, inspect_main
from zephon.work import MixtureSpec, StaticMixtureWorkSource


@pytest.fixture
def fresh_registry(monkeypatch):
    """A registry that loads again (built-ins, then the patched entry points)."""
    monkeypatch.setattr(registry, "_formats", {})
    monkeypatch.setattr(registry, "_loaded", False)
    return registry


@pytest.fixture
def tsv_root(tmp_path, fresh_registry):
    fresh_registry.register(TSV)
    for s in range(3):
        (tmp_path / f"part-{s}.tsv").write_text(
            "".join(f"{s * 100 + i}\tdoc {s}-{i}\n" for i in range(7 + s)))
    return tmp_path


def _ids(ds: Dataset, workers: int) -> list[int]:
    ws = StaticMixtureWorkSource(datasets=[ds], mixture=MixtureSpec({"t": 1.0}), seed=3,
                                 shuffle_within_shard=True)
    pipe = Pipeline(ws).batch(4, drop_last=False).options(num_workers=workers)
    return [int(r.payload["id"]) for b in pipe for r in b.records]


def test_a_registered_format_is_detected_counted_and_read_in_every_runner(tsv_root):
    ds = Dataset.from_path("t", tsv_root)
    assert ds.fmt == "tsv" and ds.counts().tolist() == [7, 8, 9]
    assert isinstance(ds.format_of(0), TsvFormat)
    inline, two = _ids(ds, 0), _ids(ds, 2)
    assert inline == two
    assert sorted(inline) == sorted(s * 100 + i for s in range(3) for i in range(7 + s))
    assert ds.record_bytes(1, [0, 1]).tolist() == [len("100\tdoc 1-0\n")] * 2
    assert ds.row_group_starts(0) is None  # no row_groups capability: never asked


def test_the_format_reaches_inspect_and_build_index(tsv_root, capsys):
    with DatasetInspector(Dataset.from_path("t", tsv_root)) as insp:
        assert insp.read(2, 1) == {"id": 201, "text": "doc 2-1"}
    assert inspect_main([str(tsv_root), "--format", "tsv", "--rows", "1"]) == 0
    assert "tsv     3 shard(s), 24 rows" in capsys.readouterr().out
    build_index("tsv", tsv_root, progress=False)
    assert Dataset.from_path("t", tsv_root)._catalog.from_index


def test_entry_points_add_formats_and_a_broken_one_is_named(fresh_registry, monkeypatch):
    eps = [EntryPoint("tsv", "tests_support.tsv_format:TSV", registry.ENTRY_POINT_GROUP),
           EntryPoint("broken", "tests_support.no_such_module:X", registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert registry.get("tsv") is TSV
    assert any("'broken'" in str(w.message) for w in seen)
    assert registry.names()[:3] == ("jsonl", "parquet", "memory")  # built-ins first
    assert registry.format_of("x.TSV") is TSV


def test_built_ins_are_entries_like_any_other():
    for name in ("jsonl", "parquet", "memory"):
        fmt = registry.get(name)
        assert isinstance(fmt, ShardFormat) and fmt.name == name
    with pytest.raises(ValueError, match="registered already"):
        registry.register(type("Other", (TsvFormat,), {"name": "jsonl"})())
    with pytest.raises(ValueError, match="unknown shard format 'nope'"):
        registry.get("nope")


def test_capabilities_decide_what_the_dataset_asks(tmp_path):
    mem = Dataset.from_dict("m", {0: [{"a": 1}, {"a": 2}]})
    reader = mem._reader(0)
    assert isinstance(reader, ShardReader)
    assert mem.record_bytes(0, [0]) is None and not mem.bad_rows(0, [0, 1]).any()
    mem.read_ahead(0, np.array([1]))  # no capability: a hint is ignored
    mem.decode_ahead(0, 0)
    assert mem.read_payloads(0, [1]) == [{"a": 2}]
