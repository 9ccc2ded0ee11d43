"""num_workers="auto" (the default): the runner and worker count come from measurements, the
training loop keeps its core, and a switch between engines in the middle of a stream hands it
over exactly, without stopping it."""

from __future__ import annotations

import json
import threading

import pytest
from conftest import wait_released
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


def _run_window(tuner, consumer_share, busy_us, wait_share=0.0):
    """Feed the tuner a first unit, then a window with these measurements."""
    tuner.observe(0.0, 0, 0, 1, lambda: (_registry(0.0, 0), 0))
    wall = tuner.window_s + 0.1
    return tuner.observe(wall, int(consumer_share * wall * 1e9), int(wait_share * wall * 1e9),
                         40, lambda: (_registry(busy_us, 10_000), 10_000))


def test_default_is_auto_and_env_accepts_it(monkeypatch):
    assert RuntimeOptions().resolve("num_workers") == ("auto", "default")
    monkeypatch.setenv("ZEPHON_NUM_WORKERS", "auto")
    assert RuntimeOptions().resolve("num_workers") == ("auto", "environment")
    monkeypatch.setenv("ZEPHON_NUM_WORKERS", "3")
    assert RuntimeOptions().resolve("num_workers") == (3, "environment")


def test_default_worker_count_leaves_the_training_process_a_core():
    assert autotune.default_workers(2) == 1 and autotune.default_workers(8) == 7
    assert autotune.default_workers(1) == 1


def test_tokenizer_threads_share_out_the_cores_the_workers_leave_the_loop():
    assert autotune.tokenizer_threads(15, cores=16) == 1
    assert autotune.tokenizer_threads(8, cores=16) == 2
    assert autotune.tokenizer_threads(4, cores=16) == 4
    assert autotune.tokenizer_threads(1, cores=2) == autotune.tokenizer_threads(2, cores=2) == 1


def test_first_guess_from_the_plan_never_takes_the_loops_core():
    light = AutoTuner([_Op("fetch"), _Op("decode_text")], None, cores=4)
    assert light.first().runner == "inline"
    many = AutoTuner([_Op("fetch"), _Op("decode_text")], None, cores=16)
    assert many.first() == Choice("process", 15, many.current.why)
    heavy = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=16)
    assert heavy.first() == Choice("process", 15, heavy.current.why)
    assert AutoTuner([_Op("fetch")], "process", cores=4).first() == Choice(
        "process", 3, "runner='process' chosen: one worker per core but the training loop's")
    one = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=1)
    assert one.first().runner == "inline" and one.settled


def test_inline_gives_way_to_processes_when_the_loop_holds_its_core_and_waits():
    t = _tuner(["fetch"], cores=4)
    assert t.first().runner == "inline"
    new = _run_window(t, consumer_share=0.9, busy_us=1.0, wait_share=0.05)
    assert new == Choice("process", 3, new.why) and "holds its core" in new.why
    assert t.pending == new and not t.settled

    t = _tuner(["fetch"], cores=4)  # a loop that waits 1% of its time is fed
    t.first()
    assert _run_window(t, consumer_share=0.9, busy_us=1.0, wait_share=0.009) is None
    assert t.settled and "kept inline" in t.describe()


def test_decisions_for_an_idle_loop():
    t = _tuner(["fetch"])
    t.first()
    new = _run_window(t, consumer_share=0.1, busy_us=40.0, wait_share=0.9)  # heavy stage
    assert new == Choice("process", 2, new.why) and "heavier than" in new.why

    t = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=2)
    assert t.first() == Choice("process", 1, t.current.why)
    new = _run_window(t, consumer_share=0.2, busy_us=2.0, wait_share=0.8)  # light after all
    assert new is not None and new.runner == "inline" and "lighter than" in new.why

    t = _tuner(["fetch"])
    t.first()
    assert _run_window(t, consumer_share=0.3, busy_us=3.0) is None
    assert "kept inline" in t.describe()

    # 40 us of wall time per record, but the thread had a quarter of a core: 10 us of CPU
    t = _tuner(["fetch"], cpu_share=0.25)
    t.first()
    assert _run_window(t, consumer_share=0.1, busy_us=40.0) is None


def test_processes_stay_while_the_loop_is_busy_or_cores_are_many():
    t = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=2)
    t.first()
    assert _run_window(t, consumer_share=0.9, busy_us=0.5, wait_share=0.0) is None
    assert t.current == Choice("process", 1, t.current.why)
    t = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=16)
    t.first()
    assert _run_window(t, consumer_share=0.1, busy_us=0.1, wait_share=0.9) is None


def test_the_outcome_of_a_race_is_recorded():
    t = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=2)
    t.first()
    new = _run_window(t, consumer_share=0.2, busy_us=2.0)
    assert t.observe(9.0, 0, 0, 99, lambda: (_registry(2.0, 0), 0)) is None  # racing
    t.concluded(False, "had made 3 of the 40 units delivered meanwhile: not faster")
    assert t.settled and t.current.runner == "process" and t.pending is None
    assert "stayed process x1: inline had made 3" in t.describe()

    t = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=2)
    t.first()
    new = _run_window(t, consumer_share=0.2, busy_us=2.0)
    t.concluded(True, "took over after 12 units")
    assert t.current == new and not t.settled  # the new engine is measured in turn
    assert "switched to inline" in t.describe()


def test_a_light_stage_needs_twice_the_time_per_record_to_leave_inline():
    t = _tuner(["fetch"])
    t.first()
    assert _run_window(t, consumer_share=0.3, busy_us=15.0) is None  # heavy_us(2) is 10


def test_the_window_waits_for_time_and_units():
    t = AutoTuner([_Op("fetch")], None, cores=2)
    t.first()
    t.observe(0.0, 0, 0, 1, lambda: (_registry(0.0, 0), 0))
    assert t.observe(0.1, 0, 0, 50, lambda: (_registry(50.0, 100), 100)) is None
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
    """The tuner starts with ``start`` and moves to another engine after the given numbers of
    units (through a race, as a measured decision would)."""
    def first(self):
        self.current = start
        self.history.append(f"start {start.label()}")
        return start

    def observe(self, now, consumer_ns, wait_ns, units, counters):
        choice = switches.get(units)
        if choice is not None and self.pending is None:
            self.pending = choice
            return choice
        return None

    monkeypatch.setattr(AutoTuner, "first", first)
    monkeypatch.setattr(AutoTuner, "observe", observe)
    monkeypatch.setattr(autotune, "RACE_S", 1e9)  # a slow machine must not lose a race


def _let_the_candidate_catch_up(p) -> None:
    """Wait (on the race's events, not on a clock) until the candidate holds the unit the
    running engine would deliver next, or has failed."""
    race = p._runtime.race
    if race is None:
        return
    with race.cond:
        race.cond.wait_for(lambda: race.state != "running" or (
            race.pending is not None and race.made == race.behind + 1))


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
    got, during = [], 0
    for _, x in zip(range(n), p):
        got.append(_sig(x))
        if p._runtime.race is not None:
            during += 1  # delivered by the running engine while the candidate started
            _let_the_candidate_catch_up(p)
    snap = p.metrics_snapshot()
    p.close()
    assert got == inline
    assert snap["engine"] == "inline" and snap["autotune"].count("switched") == 3, snap["autotune"]
    assert during >= 3  # the stream never waited for a candidate to start


def test_a_checkpoint_after_a_switch_restores_exactly(monkeypatch, corpus_dir, tokenizer_path):
    mix = "split+shuffle+mixture+best_fit"
    full = [_sig(x) for _, x in zip(range(80), _make(corpus_dir, tokenizer_path, mix))]
    _scripted(monkeypatch, Choice("process", 2, "test"), {10: Choice("inline", 0, "test")})
    p = _make(corpus_dir, tokenizer_path, mix)
    p.options(num_workers="auto")
    it = iter(p)
    head = []
    for _ in range(30):
        head.append(_sig(next(it)))
        _let_the_candidate_catch_up(p)
    assert p.metrics_snapshot()["engine"] == "inline"
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    q = _make(corpus_dir, tokenizer_path, mix).restore(state)
    assert head + [_sig(x) for _, x in zip(range(50), q)] == full


def test_a_checkpoint_during_a_race_is_the_running_engines(monkeypatch, corpus_dir,
                                                           tokenizer_path):
    """While the candidate starts, the running engine delivers and a checkpoint names its
    position; a candidate still starting when the pipeline closes leaves nothing behind."""
    mix = "split+shuffle+mixture+best_fit"
    full = [_sig(x) for _, x in zip(range(60), _make(corpus_dir, tokenizer_path, mix))]
    _scripted(monkeypatch, Choice("inline", 0, "test"), {5: Choice("process", 2, "test")})
    p = _make(corpus_dir, tokenizer_path, mix)
    p.options(num_workers="auto")
    it = iter(p)
    head = [_sig(next(it)) for _ in range(6)]
    race = p._runtime.race
    assert race is not None and p.metrics_snapshot()["engine"] == "inline"
    state = json.loads(json.dumps(p.checkpoint()))
    tuner = p._runtime.tuner
    candidate = race.engine
    pids = candidate.pids()
    p.close()
    assert race.state == "dropped" and not race.thread.is_alive()
    wait_released(candidate.config.prefix, pids, timeout=30)
    assert "stayed inline: process x2 the stream was closed first" in tuner.describe()
    q = _make(corpus_dir, tokenizer_path, mix).restore(state)
    assert head + [_sig(x) for _, x in zip(range(54), q)] == full


def test_a_failing_candidate_is_dropped_and_the_stream_goes_on(monkeypatch, corpus_dir,
                                                               tokenizer_path):
    mix = "split+shuffle+mixture+best_fit"
    full = [_sig(x) for _, x in zip(range(60), _make(corpus_dir, tokenizer_path, mix))]
    _scripted(monkeypatch, Choice("inline", 0, "test"), {5: Choice("inline", 0, "test")})
    from zephon.engine import session as session_mod

    made = threading.Event()

    def broken(self, *a, **kw):
        def make():
            made.set()
            raise RuntimeError("the candidate could not start")
        return make

    p = _make(corpus_dir, tokenizer_path, mix)
    p.options(num_workers="auto")
    got = []
    for _, x in zip(range(60), p):
        got.append(_sig(x))
        if len(got) == 1:  # the running engine is made: candidates fail from now on
            monkeypatch.setattr(session_mod.Session, "_engine_factory", broken)
        if p._runtime.race is not None:
            made.wait()
            _let_the_candidate_catch_up(p)
    tuner = p._runtime.tuner
    p.close()
    assert got == full
    assert "failed (RuntimeError: the candidate could not start)" in tuner.describe()


def test_a_stage_that_idled_through_the_window_is_measured_over_the_run():
    """A loop slower than the workers keeps their buffers full: in the window the stage may
    process nothing, which is no reason to call it free (it read "0.0 us" for a tokenizer)."""
    t = AutoTuner([_Op("fetch"), _Op("tokenize")], None, cores=2)
    t.first()
    t.observe(0.0, 0, 0, 1, lambda: (_registry(40.0, 9_000), 9_000))
    wall = t.window_s + 0.1
    assert t.observe(wall, int(0.2 * wall * 1e9), 0, 40,
                     lambda: (_registry(40.0, 9_000), 9_000)) is None
    assert t.last.stage_us == pytest.approx(40.0) and "40.0 us of CPU/record" in t.describe()
