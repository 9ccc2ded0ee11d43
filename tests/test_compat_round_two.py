"""Issue 32: gaps a Zephon 0.2.0 user still hits (work sources, mixtures, surface), each tested
from the specification."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from compat_sources import AlternatingSource

from zephon import Pipeline
from zephon.io import Dataset, InMemoryShard
from zephon.ops import BaseOp, OpTraits, spawn_child
from zephon.ops.accumulators import Accumulator, PassthroughAccumulator
from zephon.types import ContributorRef, SampleCursor, SampleMeta, SampleRecord
from zephon.work import StaticMixtureWorkSource, WorkChunk


def _source(n: int = 30, words: int = 12, chunk_size: int = 8) -> StaticMixtureWorkSource:
    a = Dataset.from_dict("a", {0: InMemoryShard([{"text": " ".join(f"w{i}x{j}" for j in
                                                                    range(words))}
                                                  for i in range(n)])})
    return StaticMixtureWorkSource([a], {"a": 1.0}, seed=1, chunk_size=chunk_size)


# -- item 8: the reference's surface ------------------------------------------------------------

def test_read_config_types_import_from_work_base():
    from zephon.work.base import MixtureReadConfig, MixtureReadMode
    from zephon.work.read_config import MixtureReadConfig as Config

    assert MixtureReadConfig is Config
    assert MixtureReadMode("weighted_random") is MixtureReadMode.WEIGHTED_RANDOM


def test_pipeline_ws_is_its_work_source():
    ws = _source()
    assert Pipeline(ws).ws is ws


def test_sample_meta_as_cursor_key():
    m = SampleMeta((1, 2, 3), lane_id=0, chunk_id=4, chunk_offset=5, lineage=(0, 1))
    assert m.as_cursor_key() == (4, 5, (0, 1), (1, 2, 3)) == m.cursor.as_key()


def test_explain_names_serial_operators_with_their_parallelism():
    p = Pipeline(_source()).options(num_workers=0).batch(microbatch_size=4)
    assert "'batch@p1'" in p.explain()


def _closers(records) -> dict:
    """base offset -> (index of each record deriving from it, indices of its closing records)"""
    by_base: dict = defaultdict(lambda: ([], []))
    for i, r in enumerate(records):
        refs = r.meta.contributors
        assert len(refs) == 1, r.meta
        ref = refs[0]
        assert ref.cursor == SampleCursor(r.meta.chunk_id, r.meta.chunk_offset, (),
                                          r.meta.sample_id)
        key = (r.meta.lane_id, ref.cursor.base_offset)
        by_base[key][0].append(i)
        if ref.is_last_child:
            by_base[key][1].append(i)
    return by_base


def test_split_pieces_carry_their_contributor_and_the_last_one_closes():
    p = Pipeline(_source()).options(num_workers=0).tokenize(
        tokenizer_id="__fallback__", field="text", max_length=16, split_long_samples=True)
    records = list(p)
    by_base = _closers(records)
    assert len(by_base) == 30
    for members, closing in by_base.values():
        assert len(members) > 1 and closing == [members[-1]]


def _halves(records):
    out = []
    for r in records:
        text = r.payload["text"]
        for i, part in enumerate((text[: len(text) // 2], text[len(text) // 2:])):
            out.append(SampleRecord(spawn_child(r.meta, i, is_last_child=i == 1), {"text": part}))
    return out


def test_split_after_a_fan_out_keeps_one_closing_contributor_per_base_offset():
    p = (Pipeline(_source()).options(num_workers=0)
         .add_op("halves", process_many=_halves, preserves_cursor_order=True)
         .tokenize(tokenizer_id="__fallback__", field="text", max_length=16,
                   split_long_samples=True))
    records = list(p)
    by_base = _closers(records)
    assert len(by_base) == 30
    for members, closing in by_base.values():
        assert len(members) > 2 and closing == [members[-1]]
        assert records[closing[0]].meta.lineage[0] == 1  # the piece of the second half
    assert isinstance(records[0].meta.contributors[0], ContributorRef)
    assert np.all([len(r.meta.lineage) == 2 for r in records])


# -- item 4: source-exhaustion hooks and the reference's lane attributes ------------------------

class _LaneRouted(AlternatingSource):
    """Routes chunks by ``_lane``/``_canon``, the attributes 0.2.0's default clone sets."""

    def next_chunk(self):
        while True:
            chunk = self._global(self.pos)
            if chunk is None:
                return None
            self.pos += 1
            if (self.pos - 1) % self._canon == self._lane:
                return chunk


def test_the_default_clone_sets_lane_and_canon():
    clone = AlternatingSource().clone_for_lane(1, 3)
    assert (clone._lane, clone._canon) == (1, 3)
    texts = [r.payload["text"] for r in Pipeline(_LaneRouted()).options(
        num_workers=0, canonical_replicas=2)]
    assert sorted(texts) == sorted([f"a{i}" for i in range(60)] + [f"b{i}" for i in range(60)])


def test_continues_after_exhaustion_defaults_to_none_and_must_be_a_frozenset():
    assert AlternatingSource().continues_after_exhaustion() == frozenset()

    class Bad(AlternatingSource):
        def continues_after_exhaustion(self):
            return ["a"]

    with pytest.raises(ValueError, match="continues_after_exhaustion"):
        list(Pipeline(Bad()).options(num_workers=0))


CALLS: list = []


class _HoldPerComponent(Accumulator):
    """Holds every record until its component is exhausted; flush finds nothing left."""

    def __init__(self) -> None:
        self.held: dict = defaultdict(list)

    def push_many(self, elems):
        for e in elems:
            self.held[(e.meta.lane_id, e.meta.sample_id[0])].append(e)
        return []

    def on_source_exhausted(self, lane_id, component_id):
        group = self.held.pop((lane_id, component_id), [])
        CALLS.append((lane_id, component_id, len(group)))
        return [(group, 0)] if group else []

    def flush(self, *, reset=False, lane_id=None):
        keys = [k for k in self.held if lane_id is None or k[0] == lane_id]
        CALLS.append(("flush", sum(len(self.held[k]) for k in keys)))
        return [(self.held.pop(k), 0) for k in keys]

    def has_pending_data(self, lane_id=None):
        return any(v for k, v in self.held.items() if lane_id is None or k[0] == lane_id)


def test_on_source_exhausted_runs_once_per_lane_and_component_at_the_end():
    assert Accumulator.on_source_exhausted(PassthroughAccumulator(), 0, 1) == []
    p = (Pipeline(AlternatingSource()).options(num_workers=0, canonical_replicas=2,
                                                auto_validation="off")
         .add_op("hold", process_many=lambda rs: list(rs), accumulator=_HoldPerComponent,
                 preserves_cursor_order=False))
    CALLS.clear()
    texts = [r.payload["text"] for r in p]
    assert sorted(texts) == sorted([f"a{i}" for i in range(60)] + [f"b{i}" for i in range(60)])
    hooks = [c for c in CALLS if c[0] != "flush"]
    assert sorted(h[:2] for h in hooks) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # lane 0 reads 8 of the 15 chunks of 4 + 4 records, lane 1 the other 7
    assert sorted(h[2] for h in hooks) == [28, 28, 32, 32]
    assert [c for c in CALLS if c[0] == "flush"] == [("flush", 0), ("flush", 0)]


# -- item 7: pack_sequences keeps the reader's read-only token arrays ---------------------------

def _token_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [list(range(100 * i, 100 * i + 3 + i % 5)) for i in range(20)]
    pq.write_table(pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32())),
                             "k": pa.array(range(20))}), tmp_path / "part-0.parquet")
    ds = Dataset.from_path("t", tmp_path)
    return StaticMixtureWorkSource([ds], {"t": 1.0}, seed=1, chunk_size=8), rows


@pytest.mark.parametrize("algorithm", ["first_fit", "wrap"])
def test_pack_sequences_keeps_int32_token_arrays_read_only(tmp_path, algorithm):
    ws, rows = _token_parquet(tmp_path)
    kw = {"num_bins": 2} if algorithm == "first_fit" else {}
    p = Pipeline(ws).options(num_workers=0).pack_sequences(max_length=10, algorithm=algorithm,
                                                           **kw)
    tokens = []
    for r in p:
        for seg in r.payload["packed_samples"]:
            ids = seg["input_ids"]
            assert isinstance(ids, np.ndarray) and ids.dtype == np.int32, type(ids)
            assert not ids.flags.writeable
            tokens.extend(ids.tolist())
    assert sorted(tokens) == sorted(t for row in rows for t in row)


# -- item 1: ensure_mixture follows each chunk's target over a user WorkSource -----------------

class _ShiftingTarget(AlternatingSource):
    """Chunks of 10 ``a`` + 10 ``b`` records; the first three ask for 80% ``a``, the others for
    80% ``b`` (a dynamic mixture: spec 5.9's per-chunk ``target_mixture``)."""

    def __init__(self, targets: bool = True) -> None:
        super().__init__(per_chunk=10)
        self.targets = targets

    def _global(self, g):
        chunk = super()._global(g)
        if chunk is None or not self.targets:
            return chunk
        target = {"a": 0.8, "b": 0.2} if g < 3 else {"a": 0.2, "b": 0.8}
        return WorkChunk(components=chunk.components, seed=g, target_mixture=target)


def _mixed(source, **kw) -> list[str]:
    p = Pipeline(source).options(num_workers=0).ensure_mixture(weight_by="samples", **kw)
    return [r.payload["text"][0] for r in p]


def test_ensure_mixture_follows_each_chunks_target_over_a_user_source():
    out = _mixed(_ShiftingTarget(), max_buffer_size=200)
    assert len(out) == 120 and out.count("a") == 60  # every record once
    # 80% a while the first three chunks' targets hold, then 80% b; at the end of the
    # stream the a's left over are delivered too (nothing is dropped)
    first, then = out[:40], out[40:100]
    assert 0.75 <= first.count("a") / 40 <= 0.85, "".join(out)
    assert 0.75 <= then.count("b") / 60 <= 0.85, "".join(out)
    # without targets it keeps each chunk's composition (half and half)
    plain = _mixed(_ShiftingTarget(targets=False), max_buffer_size=200)
    workers = Pipeline(_ShiftingTarget()).options(num_workers=2, runner="process").ensure_mixture(
        weight_by="samples", max_buffer_size=200)
    assert [r.payload["text"][0] for r in workers] == out  # the coordinator sees the targets
    assert all(abs(plain[:k].count("a") - k / 2) <= 1 for k in range(0, 120, 10))


def test_ensure_mixture_per_chunk_target_checkpoint_resumes_exactly():
    def build():
        return Pipeline(_ShiftingTarget()).options(num_workers=0).ensure_mixture(
            weight_by="samples", max_buffer_size=200)

    whole = [r.payload["text"] for r in build()]
    p = build()
    it = iter(p)
    head = [next(it).payload["text"] for _ in range(37)]
    state = p.checkpoint()
    rest = [r.payload["text"] for r in build().restore(state)]
    assert head + rest == whole


# -- item 3: "stop" ends when the next quota cannot be supplied --------------------------------

def test_stop_ends_before_the_chunk_whose_quota_the_small_dataset_cannot_supply():
    from collections import Counter

    a = Dataset.from_dict("a", {0: InMemoryShard([{"t": "a"}] * 3)})
    b = Dataset.from_dict("b", {0: InMemoryShard([{"t": "b"}] * 100)})
    ws = StaticMixtureWorkSource([a, b], {"a": 0.05, "b": 0.95}, chunk_size=10,
                                 exhausted_policy="stop")
    got = Counter(r.payload["t"] for r in Pipeline(ws).options(num_workers=0))
    # a's quota is one sample every other chunk: its 4th would be due in chunk 6, so chunks
    # 0-5 are read whole (spec 4.6), not cut right after a's 3rd sample
    assert got == {"a": 3, "b": 57}
    assert ws.total_samples == 60


# -- item 9: an instance operator without validation_samples() is not probed -------------------

class _WholePush(Accumulator):
    """Returns each push as one group (fine for Zephon, whose lanes each get their own)."""

    def push_many(self, elems):
        return [(list(elems), 0)] if elems else []

    def flush(self, *, reset=False, lane_id=None):
        return []


class _Upper(BaseOp):
    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, requires_serial_state=True)

    def accumulator(self, *, deterministic, ctx):
        return _WholePush()

    def process_many(self, records):
        return [SampleRecord(r.meta, {**r.payload, "text": r.payload["text"].upper()})
                for r in records]


def test_instance_op_without_validation_samples_skips_runtime_checks_and_runs():
    p = Pipeline(AlternatingSource()).options(num_workers=0, canonical_replicas=2).add_op(
        _Upper())
    report = p.validate()
    assert report.ok and "OP_INSTANCE_RUNTIME_CHECKS_SKIPPED" in report.codes()
    assert "ACC_MIXES_LANES" not in report.codes()
    texts = sorted(r.payload["text"] for r in p)  # strict auto-validation lets it run
    assert texts == sorted([f"A{i}" for i in range(60)] + [f"B{i}" for i in range(60)])


# -- item 10: after_last_user with several generation spans per answer ------------------------

REASONING = (
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}<a>"
    "{% generation %}[think:{{ m.reasoning }}]{% endgeneration %}|"
    "{% generation %}{{ m.content }}{{ eos_token }}{% endgeneration %}"
    "{% else %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<a>{% endif %}")


def test_after_last_user_supervises_every_span_of_the_last_answer():
    pytest.importorskip("jinja2")
    conv = [{"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "A1", "reasoning": "r1"},
            {"role": "user", "content": "Q2"},
            {"role": "assistant", "content": "A2", "reasoning": "r2"}]
    ds = Dataset.from_dict("c", {0: InMemoryShard([{"messages": conv}])})
    ws = StaticMixtureWorkSource([ds], {"c": 1.0}, chunk_size=4, seed=1)

    def supervised(scope: str) -> str:
        p = Pipeline(ws).options(num_workers=0).tokenize_chat(
            "__fallback__", chat_template=REASONING, loss_scope=scope)
        (r,) = list(p)
        ids = np.asarray(r.payload["input_ids"]) - 4
        mask = np.asarray(r.payload["loss_mask"], dtype=bool)
        return bytes(ids[mask].astype(np.uint8)).decode()

    assert supervised("after_last_user") == "[think:r2]A2</s>"
    assert supervised("all_assistant") == "[think:r1]A1</s>[think:r2]A2</s>"


# -- item 5: priming in place, and in-memory datasets measured ---------------------------------

def _token_source():
    from zephon.work import TokenEstimation

    rows = {"a": [{"text": "hello world " * (i % 7 + 1)} for i in range(120)],
            "b": [{"text": "x" * (i % 50 + 10)} for i in range(120)]}
    ds = [Dataset.from_dict(n, {0: InMemoryShard(r)}) for n, r in rows.items()]
    return StaticMixtureWorkSource(ds, {"a": 0.5, "b": 0.5}, chunk_size=16,
                                   token_estimation=TokenEstimation()), rows


def _exact_ratio(rows, per_record: int = 1) -> float:
    import json

    tokens = sum(per_record * (len(r["text"].encode()) + 2) for r in rows)  # bytes + BOS/EOS
    return tokens / sum(len(json.dumps(r, sort_keys=True).encode()) for r in rows)


def test_priming_answers_on_the_users_source_and_measures_in_memory_datasets():
    import warnings

    ws, rows = _token_source()
    p = Pipeline(ws).options(num_workers=0).tokenize(tokenizer_id="__fallback__", field="text")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback ratio, no imprecise estimate
        n = sum(1 for _ in p)
    assert ws.total_samples == n  # primed in place: no "not primed yet"
    ratios = ws.state_dict()["token_ratios"]
    for name in ("a", "b"):
        assert ratios[name] == pytest.approx(_exact_ratio(rows[name]), rel=1e-9)


def _twice(records):
    return [SampleRecord(spawn_child(r.meta, i, is_last_child=i == 1), dict(r.payload))
            for r in records for i in range(2)]


def test_a_replayable_fan_out_doubles_the_measured_ratio():
    ws, rows = _token_source()
    p = (Pipeline(ws).options(num_workers=0)
         .add_op("twice", process_many=_twice, preserves_cursor_order=True,
                 calibration_replayable=True)
         .tokenize(tokenizer_id="__fallback__", field="text"))
    next(iter(p))
    assert ws.token_ratios["a"] == pytest.approx(_exact_ratio(rows["a"], 2), rel=1e-9)
    p.close()
    # a change of operators forgets the ratios this pipeline put there
    p.tokenize(tokenizer_id="__fallback__", field="text")
    assert ws.token_ratios is None


def _rows(name: str, n: int) -> Dataset:
    return Dataset.from_dict(name, {0: InMemoryShard([{"t": name, "i": i} for i in range(n)])})


def test_redistribute_hands_an_exhausted_datasets_share_to_the_others():
    ws = StaticMixtureWorkSource([_rows("a", 33), _rows("b", 100)], {"a": 0.5, "b": 0.5},
                                 chunk_size=10, exhausted_policy={"a": "redistribute",
                                                                  "b": "stop"})
    lane = ws.clone_for_lane(0, 1)
    counts = []
    while (chunk := lane.next_chunk()) is not None:
        counts.append((chunk.counts()["a"], chunk.counts()["b"]))
    # a gives 5 a chunk while it lasts, its last 3 in chunk 6 (b takes the shortfall), then b
    # alone fills every chunk until its own pass ends ("stop")
    assert counts[:8] == [(5, 5)] * 6 + [(3, 7), (0, 10)]
    assert all(sum(c) == 10 for c in counts[:-1]) and sum(a for a, _ in counts) == 33
    recs = [(r.payload["t"], r.payload["i"]) for r in Pipeline(ws).options(num_workers=0)]
    assert sorted(recs) == sorted([("a", i) for i in range(33)] + [("b", i) for i in range(100)])

    # every dataset redistributed: the stream ends after the last sample of the last one
    both = StaticMixtureWorkSource([_rows("a", 33), _rows("b", 100)], {"a": 0.3, "b": 0.7},
                                   chunk_size=10, exhausted_policy="redistribute")
    assert both.total_samples == 133

    def build():
        return Pipeline(StaticMixtureWorkSource(
            [_rows("a", 33), _rows("b", 100)], {"a": 0.5, "b": 0.5}, chunk_size=10, seed=4,
            exhausted_policy={"a": "redistribute", "b": "stop"})).options(
            num_workers=0).shuffle(buffer_size=8, seed=1)

    whole = [r.payload["i"] for r in build()]
    p = build()
    it = iter(p)
    head = [next(it).payload["i"] for _ in range(61)]
    rest = [r.payload["i"] for r in build().restore(p.checkpoint())]
    assert head + rest == whole


@pytest.mark.parametrize("weights,leave,chunk", [
    ((1, 1, 2), (7, None, 40), 8), ((1, 19), (3, None), 10), ((3, 3, 3), (5, 9, None), 7),
    ((1, 1), (12, 30), 4)])
def test_redistributed_quotas_keep_chunks_whole_and_every_sample_of_the_pass(weights, leave,
                                                                             chunk):
    from fractions import Fraction

    from zephon.work.quotas import RedistributedQuotas

    total = sum(weights)
    q = RedistributedQuotas([Fraction(w, total) for w in weights], chunk, leave)
    last = None
    end = q.end_position
    for k in range(60):
        cum = q.cum(k + 1)
        if end is None or (k + 1) * chunk <= end:
            assert sum(cum) == (k + 1) * chunk
        if last is not None:
            assert all(b >= a for a, b in zip(last, cum))
        last = cum
    for c, lim in enumerate(leave):
        if lim is not None:
            assert last[c] == lim  # each leaving dataset gives its whole pass, no more
            k = q.chunk_reaching(c, lim)
            assert q.cum(k)[c] < lim <= q.cum(k + 1)[c]
