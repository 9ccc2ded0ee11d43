"""Programs in the style of the reference's guide, run as plain scripts: a fresh interpreter,
``PYTHONPATH`` at this checkout, the default runner (worker processes), no ``__main__`` guard.
Each builds a pipeline, reads a few batches, checkpoints, restores and checks the rest, so the
crash class of unguarded scripts (and API gaps such code meets) cannot come back unseen."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import shm_entries
from tests_support.scripts import run_script as run_as_script

pytestmark = pytest.mark.slow


# shared by the scripts: resume a pipeline from a checkpoint and compare with a full run
RESUME = """
import json

def texts(batch):
    return [r.payload.get("text", r.payload.get("messages")) for r in batch.records]

def check_resume(build, cut):
    full = [texts(b) for b in build()]
    p = build()
    it = iter(p)
    head = [texts(next(it)) for _ in range(cut)]
    state = json.loads(json.dumps(p.checkpoint()))  # what a trainer saves
    p.close()
    rest = [texts(b) for b in build().restore(state)]
    assert head + rest == full, "resumed stream differs"
    return len(full)
"""


def run_script(tmp_path: Path, body: str, timeout: float = 120) -> subprocess.CompletedProcess:
    script = tmp_path / "guide_example.py"
    script.write_text(textwrap.dedent(RESUME) + textwrap.dedent(body))
    proc, code, stdout, stderr = run_as_script(script, tmp_path, timeout=timeout)
    assert code == 0, stderr[-4000:]
    assert stdout.count("script body ran") == 1, stdout  # not imported again
    assert "bootstrapping" not in stderr
    # shared memory is named after the training process (others' tests may run meanwhile)
    assert {n for n in shm_entries() if n.startswith(f"zephon_{proc}_")} == set()
    return subprocess.CompletedProcess([str(script)], code, stdout, stderr)


def test_quick_start_shape_of_the_spec(tmp_path):
    out = run_script(tmp_path, """
        from zephon import Pipeline
        from zephon.io import Dataset, InMemoryShard
        from zephon.work import MixtureSpec, StaticMixtureWorkSource

        print("script body ran", flush=True)
        ds = Dataset.from_dict("demo", {0: InMemoryShard(
            [{"text": "hello"}, {"text": "world"}, {"text": "again"}])})
        ws = StaticMixtureWorkSource(datasets=[ds], mixture=MixtureSpec({"demo": 1.0}),
                                     chunk_size=1, seed=42)
        pipeline = (Pipeline(ws).decode_text()
                    .tokenize(tokenizer_id="__fallback__", field="text",
                              preserve_upstream_payload=True)
                    .batch(microbatch_size=2, drop_last=False))
        for batch in pipeline:
            print(batch.to_training(dtype=None)["texts"], flush=True)
        assert "process" in pipeline.explain()
    """)
    assert "['hello', 'world']" in out.stdout and "['again']" in out.stdout


def test_guide_mixture_tokenize_pack_checkpoint(tmp_path):
    from zephon import synthetic

    for name, n, seed in (("code", 150, 1), ("web", 450, 2)):
        synthetic.write_dataset(tmp_path, name, n, n_shards=3, fmt="jsonl", seed=seed,
                                mean_words=30)
    out = run_script(tmp_path, """
        from zephon import Pipeline
        from zephon.io import Dataset
        from zephon.work import MixtureSpec, StaticMixtureWorkSource

        print("script body ran", flush=True)

        def build():
            code = Dataset.from_path("code", "code")
            web = Dataset.from_path("web", "web")
            ws = StaticMixtureWorkSource(datasets=[code, web],
                                         mixture=MixtureSpec({"code": 0.25, "web": 0.75}),
                                         chunk_size=256, seed=42)
            return (Pipeline(ws).options(canonical_replicas=2)
                    .tokenize(tokenizer_id="__fallback__", field="text")
                    .shuffle(buffer_size=64, seed=1)
                    .pack_flat(max_length=257, algorithm="best_fit", num_bins=8,
                               pad_token_id=0)
                    .batch(microbatch_size=8))

        p = build()
        it = iter(p)
        first = next(it).to_training(return_labels=True, return_cu_seqlens=True)
        print("shape", tuple(first["input_ids"].shape), flush=True)
        p.close()
        print("batches", check_resume(build, 5), flush=True)
    """)
    assert "shape (8, 256)" in out.stdout  # inputs and labels: max_length - 1 each
    assert int(out.stdout.split("batches")[1].split()[0]) > 10


def test_user_operators_written_for_the_reference(tmp_path):
    out = run_script(tmp_path, """
        from typing import Any

        from zephon import Pipeline
        from zephon.io import Dataset, InMemoryShard
        from zephon.ops import BaseOp, spawn_child
        from zephon.ops.accumulators import Accumulator, CountingAccumulator
        from zephon.ops.traits import OpTraits
        from zephon.types import SampleRecord
        from zephon.work import StaticMixtureWorkSource

        print("script body ran", flush=True)

        class Words(BaseOp):  # one record per word, children by spawn_child
            def traits(self) -> OpTraits:
                return OpTraits(preserves_cursor_order=True, calibration_replayable=True)

            def process_many(self, elems: list[SampleRecord]) -> list[SampleRecord]:
                out = []
                for r in elems:
                    words = r.payload["text"].split()
                    out += [SampleRecord(spawn_child(r.meta, i, is_last_child=i == len(words) - 1),
                                         {"text": w}) for i, w in enumerate(words)]
                return out

            def validation_samples(self):
                return [{"text": "two words"}]

        class Pairs(BaseOp):  # a typed grouping operator
            def traits(self) -> OpTraits:
                return OpTraits(preserves_cursor_order=True, batch_shape_sensitive=True)

            def accumulator(self, *, deterministic: bool, ctx: Any) -> Accumulator[Any]:
                return CountingAccumulator[Any](max_batch=2)

            def process_many(self, elems: list[SampleRecord]) -> list[SampleRecord]:
                joined = "+".join(r.payload["text"] for r in elems)
                for r in elems:
                    r.payload = {"text": r.payload["text"], "pair": joined}
                return elems

        def shout(records):
            return [SampleRecord(r.meta, {**r.payload, "text": r.payload["text"].upper()})
                    for r in records]

        rows = [{"text": f"doc {i} has {i % 4 + 1} words"} for i in range(60)]
        def build():
            ds = Dataset.from_dict("d", {0: InMemoryShard(rows[:30]), 1: InMemoryShard(rows[30:])})
            ws = StaticMixtureWorkSource([ds], {"d": 1.0}, chunk_size=16, seed=3)
            return (Pipeline(ws).add_op(Words())
                    .add_op("shout", process_many=shout, preserves_cursor_order=True,
                            calibration_replayable=True)
                    .add_op(Pairs()).shuffle(buffer_size=16, seed=2).batch(6))

        print("batches", check_resume(build, 7), flush=True)
    """)
    assert int(out.stdout.split("batches")[1].split()[0]) > 20


def test_a_user_written_work_source(tmp_path):
    out = run_script(tmp_path, """
        from zephon import Pipeline
        from zephon.io import Dataset, InMemoryShard
        from zephon.work import WorkChunk, WorkSource

        print("script body ran", flush=True)

        class Interleave(WorkSource):
            \"\"\"Chunk g: rows [5g, 5g+5) of both datasets; lane l keeps g % L == l.\"\"\"

            def __init__(self):
                super().__init__()
                self._ds = {0: Dataset.from_dict("a", {0: InMemoryShard(
                                [{"text": f"a{i}"} for i in range(50)])}),
                            1: Dataset.from_dict("b", {0: InMemoryShard(
                                [{"text": f"b{i}"} for i in range(50)])})}
                self.g = 0

            @property
            def datasets_by_id(self):
                return self._ds

            def component_ids(self):
                return {"a": 0, "b": 1}

            def next_chunk(self):
                while self.g * 5 < 50:
                    g, self.g = self.g, self.g + 1
                    if g % self.canonical_replicas == self.lane_id:
                        rows = range(5 * g, 5 * g + 5)
                        return WorkChunk(components={"a": [(0, 0, r) for r in rows],
                                                     "b": [(1, 0, r) for r in rows]}, seed=g)
                return None

            def state_dict(self):
                return {**super().state_dict(), "g": self.g}

            def load_state_dict(self, state):
                super().load_state_dict(state)
                self.g = state["g"]

        def build():
            return (Pipeline(Interleave()).options(canonical_replicas=2)
                    .shuffle(buffer_size=7, seed=1).batch(4, drop_last=False))

        print("batches", check_resume(build, 6), flush=True)
        seen = sorted(t for b in build() for t in texts(b))
        assert seen == sorted([f"a{i}" for i in range(50)] + [f"b{i}" for i in range(50)])
    """)
    assert "batches 26" in out.stdout  # 2 lanes x 50 records, 12 batches + 1 short


def test_chat_expansion_and_observability(tmp_path):
    out = run_script(tmp_path, """
        from zephon import Pipeline
        from zephon.io import Dataset, InMemoryShard
        from zephon.work import StaticMixtureWorkSource

        print("script body ran", flush=True)
        convs = [{"messages": [{"role": "user", "content": f"q{i}"},
                               {"role": "assistant", "content": f"a{i}"},
                               {"role": "user", "content": f"r{i}"},
                               {"role": "assistant", "content": f"b{i}"}]} for i in range(40)]

        def build():
            ds = Dataset.from_dict("chat", {0: InMemoryShard(convs)})
            ws = StaticMixtureWorkSource([ds], {"chat": 1.0}, chunk_size=8, seed=0)
            return (Pipeline(ws).enable_observability("nodes").expand_chat()
                    .shuffle(buffer_size=5, seed=4).batch(4))

        print("batches", check_resume(build, 6), flush=True)
        p = build()
        list(p)
        print("fetched", p.fetch_timing_snapshot().stages[0].totals.samples, flush=True)
    """)
    assert "batches 20" in out.stdout and "fetched 40" in out.stdout
