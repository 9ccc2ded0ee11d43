"""Start-up made visible (``metrics_snapshot()["startup"]``) and the memory budget."""

from __future__ import annotations

import pytest
from test_checkpoint import _make, _sig

from zephon.engine.plan.memory import plan_memory
from zephon.ops.traits import OpTraits
from zephon.options import RuntimeOptions


def test_startup_breakdown_with_worker_processes(corpus_dir, tokenizer_path):
    p = _make(corpus_dir, tokenizer_path, "first_fit")
    p.options(num_workers=2)
    it = iter(p)
    next(it)
    s = p.metrics_snapshot()["startup"]
    p.close()
    for key in ("priming_s", "engine_start_s", "coordinator_ready_s", "workers_started_s",
                "workers_setup_s", "workers_ready_s", "first_result_s", "first_batch_s"):
        assert key in s and s[key] >= 0, key
    # one clock for every process: the steps come in the order they happen
    assert s["workers_started_s"] <= s["workers_setup_s"] <= s["workers_ready_s"]
    assert s["workers_ready_s"] <= s["first_batch_s"]
    assert s["first_result_s"] <= s["first_batch_s"]


def test_startup_breakdown_inline(corpus_dir, tokenizer_path):
    p = _make(corpus_dir, tokenizer_path, "batch")
    next(iter(p))
    s = p.metrics_snapshot()["startup"]
    p.close()
    assert set(s) == {"priming_s", "engine_start_s", "first_batch_s"}
    assert 0 <= s["engine_start_s"] <= s["first_batch_s"]


def test_a_budget_too_small_is_refused_with_the_numbers(corpus_dir, tokenizer_path):
    p = _make(corpus_dir, tokenizer_path, "split+shuffle+mixture+best_fit")
    p.options(num_workers=2, memory_budget="100mb")
    with pytest.raises(ValueError) as e:
        next(iter(p))
    msg = str(e.value)
    assert "memory_budget=100 MiB" in msg and "processes 192 MiB" in msg and "shm" in msg
    p.close()


def test_the_environment_sets_a_budget(monkeypatch, corpus_dir, tokenizer_path):
    monkeypatch.setenv("ZEPHON_MEMORY_BUDGET", "64mb")
    p = _make(corpus_dir, tokenizer_path, "batch")
    p.options(num_workers=1)
    with pytest.raises(ValueError, match="memory_budget=64 MiB"):
        next(iter(p))
    p.close()


def test_a_budget_sizes_slots_and_keeps_the_stream(corpus_dir, tokenizer_path):
    mix = "split+shuffle+mixture+best_fit"
    inline = [_sig(x) for _, x in zip(range(60), _make(corpus_dir, tokenizer_path, mix))]
    p = _make(corpus_dir, tokenizer_path, mix)
    p.options(num_workers=2, memory_budget="210mb")
    got = [_sig(x) for _, x in zip(range(60), p)]
    mem = p.metrics_snapshot()["memory"]
    p.close()
    assert got == inline
    assert mem["budget_bytes"] == 210 << 20
    # the defaults would not have fitted: fewer slots, then smaller ones
    assert mem["sized"]["shm_slots"] == 2 and mem["sized"]["shm_slot_bytes"] < 4 << 20
    assert mem["planned_bytes"] <= 210 << 20
    assert set(mem["parts"]) == {"processes", "buffers", "shm", "row_group_cache"}
    assert abs(sum(mem["share"].values()) - mem["planned_bytes"] / (210 << 20)) < 1e-9
    assert mem["pss_bytes"] > 0


def test_explicit_settings_win_over_the_budget():
    opts = RuntimeOptions()
    opts.update(memory_budget="1gb", shm_slot_bytes=4 << 20)

    class Fetch:
        op_name = "fetch"
        datasets: list = []

        def traits(self) -> OpTraits:
            return OpTraits(preserves_cursor_order=True, cost="decode")

    plan = plan_memory(opts, [Fetch()], [], "process", 2, 1024, 256 << 20, False)
    assert "shm_slot_bytes" not in plan.sized
    # the workers' slots as set, output slots of at most 2 MiB
    assert plan.parts["shm"] == 2 * 4 * (4 << 20) + 8 * (2 << 20)
    with pytest.raises(ValueError, match="cannot hold"):
        opts.update(memory_budget="200mb")
        plan_memory(opts, [Fetch()], [], "process", 2, 1024, 256 << 20, False)


def test_snapshot_reports_memory_without_a_budget(corpus_dir, tokenizer_path):
    p = _make(corpus_dir, tokenizer_path, "batch")
    next(iter(p))
    mem = p.metrics_snapshot()["memory"]
    p.close()
    assert mem["budget_bytes"] is None and "share" not in mem and mem["pss_bytes"] > 0


def test_open_packing_rows_count_in_the_memory_plan(corpus_dir, tokenizer_path):
    """Each stateful operator states what a lane holds at most (``held_bound``): the shuffle
    buffer in records, the open packing rows in tokens (counted as none before)."""
    from zephon.engine.plan.memory import held_records
    from zephon.engine.plan.stages import compile_plan

    p = _make(corpus_dir, tokenizer_path, "split+shuffle+mixture+best_fit")
    serial = compile_plan(p._spec().all_ops).serial_ops
    shuffle, pack = (next(op for op in serial if op.op_name == n) for n in ("shuffle", "pack_flat"))
    records, tokens = held_records(serial)
    assert records >= shuffle.buffer_size
    assert tokens == pack.packer_config["num_bins"] * pack.max_length > 0
