"""metrics_snapshot, the live progress display and explain() against what was delivered."""

from __future__ import annotations

from collections import Counter

import pytest

from zephon import Pipeline
from zephon.io import Dataset
from zephon.observability import MetricsSinkConfig
from zephon.work import StaticMixtureWorkSource


def _p(corpus_dir, **opts):
    ds = [Dataset.from_path("code", str(corpus_dir / "code")),
          Dataset.from_path("web", str(corpus_dir / "web"))]
    ws = StaticMixtureWorkSource(ds, {"code": 0.25, "web": 0.75}, seed=1, chunk_size=100)
    return Pipeline(ws).options(num_workers=0, **opts)


def test_snapshot_counts_agree_with_deliveries(corpus_dir, tokenizer_path):
    p = (_p(corpus_dir).map_transform(lambda r: None if r["doc_id"].endswith("3") else r)
         .tokenize(tokenizer=tokenizer_path, field="text").shuffle(buffer_size=50)
         .batch(microbatch_size=7, drop_last=False))
    assert p.metrics_snapshot() is None
    per_ds: Counter = Counter()
    tokens = 0
    n = 0
    for b in p:
        n += len(b)
        per_ds.update(d for d, _, _ in b.ids)
        tokens += sum(len(x) for x in b.block.payload.column("input_ids").to_pylist())
    snap = p.metrics_snapshot()
    assert snap["records_delivered"] == n == 2400 - 240
    assert snap["tokens_delivered"] == tokens
    assert snap["datasets"]["code"]["records"] == per_ds[0]
    assert snap["datasets"]["web"]["records"] == per_ds[1]
    ops = snap["operators"]
    assert ops["fetch"]["records_out"] == 2400
    assert ops["map_transform[<lambda>]"]["records_out"] == n
    assert ops["tokenize"]["records_in"] == n and ops["batch"]["records_out"] == n
    assert ops["tokenize"]["busy_s"] > 0 and snap["bottleneck"] in ops
    assert snap["rss_bytes"] > 0
    assert 0.2 < snap["datasets"]["code"]["record_share"] < 0.3


def test_progress_display_does_not_change_the_data(corpus_dir, capsys):
    plain = [b.ids for b in _p(corpus_dir).shuffle(buffer_size=30).batch(microbatch_size=16)]
    shown = [b.ids for b in _p(corpus_dir, progress=True).shuffle(buffer_size=30)
             .batch(microbatch_size=16)]
    assert shown == plain


def test_log_sink_emits(corpus_dir, caplog):
    p = _p(corpus_dir).batch(microbatch_size=16).enable_observability(
        "nodes", sink=MetricsSinkConfig(mode="log", flush_interval_s=0.0))
    with caplog.at_level("INFO", logger="zephon.pipeline"):
        list(p)
    assert any("records_delivered" in r.message for r in caplog.records)


def test_explain_reflects_environment_and_options(corpus_dir, monkeypatch):
    monkeypatch.setenv("ZEPHON_NUM_WORKERS", "3")
    p = _p(corpus_dir).tokenize(tokenizer_id="__fallback__", field="text").batch(
        microbatch_size=4)
    p._options.explicit.pop("num_workers")
    text = p.explain()
    assert "num_workers=3 (environment)" in text
    p.options(num_workers=1)
    assert "num_workers=1 (options)" in p.explain()
    with pytest.raises(ValueError):
        p.enable_observability("everything")
