"""Pipelines run as plain scripts, the way a user pastes an example: no ``__main__`` guard, the
default runner (worker processes). Each script runs in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import shm_entries

pytestmark = pytest.mark.slow


def run_script(tmp_path, body: str, env: dict | None = None, timeout: float = 120):
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(body))
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("ZEPHON_NUM_WORKERS", None)
    full_env.pop("ZEPHON_RUNNER", None)
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


SEED_EXAMPLE = """
    from zephon import Pipeline
    from zephon.io import Dataset, InMemoryShard
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    def shout(record):  # a function of the script itself: it travels by value
        record["text"] = record["text"].upper()
        return record

    import os
    print("script body ran", os.getpid(), flush=True)
    ds = Dataset.from_dict("demo", {0: InMemoryShard(
        [{"text": "hello"}, {"text": "world"}, {"text": "again"}])})
    ws = StaticMixtureWorkSource(datasets=[ds], mixture=MixtureSpec({"demo": 1.0}),
                                 chunk_size=1, seed=42)
    pipeline = (Pipeline(ws).map_transform(shout).decode_text()
                .tokenize(tokenizer_id="__fallback__", field="text",
                          preserve_upstream_payload=True)
                .batch(microbatch_size=2, drop_last=False))
    for batch in pipeline:
        print(batch.to_training(dtype=None)["texts"], flush=True)
    print("workers", pipeline.explain().count("process"), flush=True)
"""


def test_the_seed_example_runs_as_a_script_without_a_main_guard(tmp_path):
    out = run_script(tmp_path, SEED_EXAMPLE)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # the script body ran once: our processes did not import it again
    ran = [line for line in lines if line.startswith("script body ran")]
    assert len(ran) == 1, out.stdout
    pid = ran[0].split()[-1]
    assert "['HELLO', 'WORLD']" in lines and "['AGAIN']" in lines, out.stdout
    assert "bootstrapping" not in out.stderr
    # nothing of this script's pipeline is left (other runs on the machine may hold their own)
    assert {n for n in shm_entries() if n.startswith(f"zephon_{pid}_")} == set()


def test_environment_set_between_two_pipelines_reaches_the_workers(tmp_path):
    body = """
        import os
        from zephon import Pipeline
        from zephon.io import Dataset, InMemoryShard
        from zephon.work import MixtureSpec, StaticMixtureWorkSource

        def stamp(record):
            record["seen"] = os.environ.get("MY_SECRET", "<unset>") + "/" + str(os.getpid())
            return record

        def run():
            ds = Dataset.from_dict("d", {0: InMemoryShard([{"text": str(i)} for i in range(4)])})
            ws = StaticMixtureWorkSource([ds], MixtureSpec({"d": 1.0}), seed=0)
            p = Pipeline(ws).map_transform(stamp).batch(microbatch_size=4, drop_last=False)
            p.options(num_workers=2, runner="process")
            return [r.payload["seen"] for b in p for r in b.records]

        first = run()
        os.environ["MY_SECRET"] = "s3cret"
        second = run()
        print("FIRST", sorted({s.split("/")[0] for s in first}))
        print("SECOND", sorted({s.split("/")[0] for s in second}))
        print("OTHERPIDS", all(int(s.split("/")[1]) != os.getpid() for s in second))
    """
    out = run_script(tmp_path, body)
    assert out.returncode == 0, out.stderr
    assert "FIRST ['<unset>']" in out.stdout
    assert "SECOND ['s3cret']" in out.stdout
    assert "OTHERPIDS True" in out.stdout


def test_a_worker_error_names_its_operator_once(tmp_path):
    body = """
        from zephon import Pipeline
        from zephon.io import Dataset, InMemoryShard
        from zephon.work import MixtureSpec, StaticMixtureWorkSource

        def boom(record):
            raise RuntimeError("kaput")

        ds = Dataset.from_dict("d", {0: InMemoryShard([{"text": "x"}])})
        ws = StaticMixtureWorkSource([ds], MixtureSpec({"d": 1.0}), seed=0)
        p = Pipeline(ws).map_transform(boom).batch(microbatch_size=1)
        p.options(num_workers=2)
        try:
            list(p)
        except Exception as e:
            print("ERROR", e)
    """
    out = run_script(tmp_path, body)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("ERROR"))
    assert "kaput" in line and "map_transform" in line
    assert line.count("operator ") == 1, line


def test_a_pipeline_that_needs_the_main_module_by_name_says_so(tmp_path):
    body = """
        from zephon import Pipeline
        from zephon.io import Dataset, InMemoryShard
        from zephon.work import MixtureSpec, StaticMixtureWorkSource

        SETTINGS = {"suffix": "!"}

        def find_in_main(name):  # runs where the object is rebuilt: looks __main__ up by name
            import __main__
            return getattr(__main__, name)

        class ByName:
            def __reduce__(self):
                return (find_in_main, ("SETTINGS",))

        settings = ByName()

        def add_suffix(record):
            record["text"] += str(settings)
            return record

        ds = Dataset.from_dict("d", {0: InMemoryShard([{"text": "x"}])})
        ws = StaticMixtureWorkSource([ds], MixtureSpec({"d": 1.0}), seed=0)
        p = Pipeline(ws).map_transform(add_suffix).batch(microbatch_size=1)
        p.options(num_workers=2)
        try:
            list(p)
        except Exception as e:
            print("ERROR", type(e).__name__, e)
    """
    out = run_script(tmp_path, body)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("ERROR"))
    assert "main script" in line and "importable module" in line, line
