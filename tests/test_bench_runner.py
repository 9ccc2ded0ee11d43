"""The comparative benchmark runner on a tiny corpus: every workload and system is in its JSON.

Figures from a corpus this small mean nothing; what is checked is that one invocation runs every
cell and records either measurements or the reason there are none (a system that fails, such as
a reference virtualenv that is not installed, must not stop the others).
"""

from __future__ import annotations

import json

import pytest

from zephon.bench import suite
from zephon.bench.runner import main


@pytest.fixture(scope="module")
def bench_out(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    out = root / "out"
    # --no-install: use the reference's virtualenv when present, never create it in a test
    rc = main(["--tiny", "--workers", "0", "--no-install", "--out", str(out),
               "--corpus-dir", str(root / "corpus")])
    assert rc == 0
    return out


def test_json_has_every_workload_and_system(bench_out):
    payload = json.loads((bench_out / "bench.json").read_text())
    cells = {(e["workload"], e["system"]) for e in payload["results"]}
    assert cells == {(w, s) for w in suite.WORKLOADS for s in suite.SYSTEMS}
    for e in payload["results"]:
        assert e["runs"], e
        # a cell has a median or says why not
        assert e["median"] is not None or e.get("error"), e
    formats = {e["format"] for e in payload["results"] if e["workload"] == "W1"}
    assert formats == {"jsonl", "parquet"}


def test_zephon_measures_every_workload(bench_out):
    payload = json.loads((bench_out / "bench.json").read_text())
    ours = {e["workload"]: e for e in payload["results"] if e["system"] == "zephon"}
    for w in ("W1", "W2", "W4"):
        assert ours[w]["median"] > 0, ours[w]
        assert ours[w]["first_batch_s"] is not None
    w3 = ours["W3"]
    assert w3["checkpoint_bytes"] > 0 and w3["restore_first_batch_s"] > 0
    assert w3["restore_exact"] is True
    assert 0 <= ours["W4"]["padding_fraction"] < 0.2
    # the W3 sweep and the W4 padding side metric
    assert all("checkpoint_bytes" in p for p in payload["checkpoints"]["zephon"])
    for packer in ("best_fit", "first_fit"):
        assert 0 <= payload["padding"][f"zephon {packer}"]["padding_fraction"] < 0.2


def test_w2_memory_is_each_systems_own(bench_out):
    """W2 runs in a fresh interpreter each: Zephon's process tree never holds the torch that
    the DataLoader's runs import (it did in the benchmark's shared process), and both report
    their peak PSS."""
    payload = json.loads((bench_out / "bench.json").read_text())
    w2 = {e["system"]: e for e in payload["results"] if e["workload"] == "W2"}
    ours, loader = w2["zephon"]["runs"], w2["torch-dataloader"]["runs"]
    assert ours and all(r["torch_in_tree"] is False and r["pss_peak_bytes"] > 0 for r in ours)
    assert all(r["torch_in_tree"] is True for r in loader if "error" not in r)


def test_table_and_chart_are_written(bench_out):
    md = (bench_out / "bench.md").read_text()
    for w in suite.WORKLOADS:
        assert f"| {w} |" in md
    pytest.importorskip("matplotlib")
    assert (bench_out / "bench.png").stat().st_size > 1000
