"""num_workers="auto" (the default): the runner and worker count come from measurements, and a
switch between engines in the middle of a stream hands it over exactly."""

from __future__ import annotations

import pytest
from test_checkpoint import _make, _sig

from zephon.engine import autotune
from zephon.engine.autotune import AutoTuner, Choice
from zephon.engine.observe.metrics import OpStats, Registry
from zephon.ops.traits import OpTraits
from zephon.options import RuntimeOptions


def _registry(busy_us_per_record: float, records: int) -> Registry:
    reg = Registry()
    reg.ops["fetch"] = OpStats(records_in=records, busy_ns=int(busy_us_per_record * 1e3 * records))
    return reg


class _Op:
    """An operator as the tuner sees it: a name and the cost its traits declare."""

    def __init__(self, name):
        self.op_name = name

    def traits(self) -> OpTraits:
        cost = "decode" if self.op_name in ("fetch", "decode_text") else "python"
        return OpTraits(preserves_cursor_order=True, cost=cost)


def _tuner(ops, fixed=None, cores=2, cpu_share=1.0):
    """A tuner whose thread got ``cpu_share`` of a core in every window."""
    ticks = iter(range(10**6))
    return AutoTuner([_Op(o) for o in ops], fixed, cores=cores,
                     cpu_clock=lambda: int(next(ticks) * (WINDOW + 0.1) * cpu_share * 1e9))


WINDOW = autotune.WINDOW_S


def _run_window(tuner, consumer_share, busy_us):
    """Feed the tuner a first unit, then a window with these measurements."""
    tuner.observe(0.0, 0, 1, lambda: (_registry(0.0, 0), 0))
    wall = tuner.window_s + 0.1
    return tuner.observe(wall, int(consumer_share * wall * 1e9), 40,
                         lambda: (_registry(busy_us, 10_000), 10_000))


def test_default_is_auto_and_env_accepts_it(monkeypatch):
    assert RuntimeOptions().resolve("num_workers") == ("auto", "default")
    monkeypatch.setenv("ZEPHON_NUM_WORKERS", "auto")
    assert RuntimeOptions().resolve("num_workers") == ("auto", "environment")
    monkeypatch.setenv("ZEPHON_NUM_WORKERS", "3")
    assert RuntimeOptions().resolve("num_workers") == (3, "environment")


def test_default_worker_count_leaves_the_training_process_a_core():
    assert autotune.default_workers(2) == 1 and autotune.default_workers(8) == 7
    assert autotune.default_workers(1) == 1


def test_first_guess_from_the_plan():
    light = AutoTuner([_Op("fetch"), _Op("decode_text")], None, cores=4)
    assert light.first().runner == "inline"
    heavy = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=4)
    assert heavy.first() == Choice("process", 4, heavy.current.why)
    assert AutoTuner([_Op("fetch")], "process", cores=4).first().runner == "process"
    one = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=1)
    assert one.first().runner == "inline" and one.settled


def test_decisions_from_the_measured_window():
    t = _tuner(["fetch"])
    t.first()
    new = _run_window(t, consumer_share=0.1, busy_us=40.0)  # heavy stateless stage
    assert new == Choice("process", 2, new.why) and "heavier than" in new.why
    assert not t.settled and "switched to process x2" in t.describe()  # measured in turn

    t = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=2)
    t.first()
    new = _run_window(t, consumer_share=0.2, busy_us=2.0)  # light after all
    assert new is not None and new.runner == "inline"

    t = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=2)
    t.first()
    new = _run_window(t, consumer_share=0.8, busy_us=40.0)  # the consumer needs its core
    assert new == Choice("process", 1, new.why) and "consumer" in new.why

    t = _tuner(["fetch"])
    t.first()
    assert _run_window(t, consumer_share=0.3, busy_us=3.0) is None
    assert "kept inline" in t.describe()

    # 40 us of wall time per record, but the thread had a quarter of a core: 10 us of CPU
    t = _tuner(["fetch"], cpu_share=0.25)
    t.first()
    assert _run_window(t, consumer_share=0.1, busy_us=40.0) is None


def test_a_switch_that_delivers_less_is_undone():
    t = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=2)
    t.first()
    new = _run_window(t, consumer_share=0.2, busy_us=2.0)  # 10k records in 1.1 s
    assert new.runner == "inline"
    wall = t.window_s + 0.1
    t.observe(10.0, 0, 50, lambda: (_registry(2.0, 10_000), 10_000))  # the new engine's first
    back = t.observe(10.0 + wall, 0, 90, lambda: (_registry(2.0, 12_000), 12_000))
    assert back is not None and back.runner == "process" and back.workers == 2
    assert t.settled and "switched back to process x2" in t.describe()

    t = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=2)
    t.first()
    _run_window(t, consumer_share=0.2, busy_us=2.0)
    t.observe(10.0, 0, 50, lambda: (_registry(2.0, 10_000), 10_000))
    assert t.observe(10.0 + wall, 0, 90, lambda: (_registry(2.0, 30_000), 30_000)) is None
    assert t.settled and "kept inline" in t.describe()


def test_a_light_stage_needs_twice_the_time_per_record_to_leave_inline():
    t = _tuner(["fetch"])
    t.first()
    assert _run_window(t, consumer_share=0.3, busy_us=15.0) is None  # heavy_us(2) is 10


def test_the_window_waits_for_time_and_units():
    t = AutoTuner([_Op("fetch")], None, cores=2)
    t.first()
    t.observe(0.0, 0, 1, lambda: (_registry(0.0, 0), 0))
    assert t.observe(0.1, 0, 50, lambda: (_registry(50.0, 100), 100)) is None
    assert not t.settled


def test_a_light_pipeline_runs_inline_by_default(corpus_dir, tokenizer_path):
    p = _make(corpus_dir, tokenizer_path, "batch")
    p._options.explicit.pop("num_workers")  # _make pins 0; the default is what is tested
    assert "num_workers='auto'" in p.explain()
    it = iter(p)
    next(it)
    snap = p.metrics_snapshot()
    assert snap["engine"] == "inline"
    assert "start inline" in snap["autotune"]
    assert "num_workers='auto': start inline" in p.explain()
    p.close()


def _scripted(monkeypatch, start: Choice, switches: dict[int, Choice]):
    """The tuner starts with ``start`` and switches after the given numbers of units."""
    def first(self):
        self.current = start
        self.history.append(f"start {start.label()}")
        return start

    def observe(self, now, consumer_ns, units, counters):
        choice = switches.get(units)
        if choice is not None:
            self.history.append(f"switched to {choice.label()}")
            self.current = choice
        return choice

    monkeypatch.setattr(AutoTuner, "first", first)
    monkeypatch.setattr(AutoTuner, "observe", observe)


@pytest.mark.parametrize("mix", ["split+shuffle+mixture+best_fit", "filter+batch", "records"])
def test_switching_engines_mid_stream_keeps_the_stream(monkeypatch, corpus_dir,
                                                       tokenizer_path, mix):
    n = 90
    inline = [_sig(x) for _, x in zip(range(n), _make(corpus_dir, tokenizer_path, mix))]
    _scripted(monkeypatch, Choice("inline", 0, "test"),
              {7: Choice("process", 2, "test"), 31: Choice("process", 1, "test"),
               55: Choice("inline", 0, "test")})
    p = _make(corpus_dir, tokenizer_path, mix)
    p.options(num_workers="auto")
    got = [_sig(x) for _, x in zip(range(n), p)]
    snap = p.metrics_snapshot()
    p.close()
    assert got == inline
    assert snap["engine"] == "inline" and snap["autotune"].count("switched") == 3


def test_a_checkpoint_after_a_switch_restores_exactly(monkeypatch, corpus_dir, tokenizer_path):
    import json

    mix = "split+shuffle+mixture+best_fit"
    full = [_sig(x) for _, x in zip(range(80), _make(corpus_dir, tokenizer_path, mix))]
    _scripted(monkeypatch, Choice("process", 2, "test"), {10: Choice("inline", 0, "test")})
    p = _make(corpus_dir, tokenizer_path, mix)
    p.options(num_workers="auto")
    it = iter(p)
    head = [_sig(next(it)) for _ in range(30)]
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    q = _make(corpus_dir, tokenizer_path, mix).restore(state)
    assert head + [_sig(x) for _, x in zip(range(50), q)] == full
