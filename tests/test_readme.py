"""The README is a landing page whose example runs, whose commands are CI's, whose figures are
the benchmark's and whose links lead somewhere; the object-storage walk-through it used to hold
(now in docs/guides/storage.md) reads a real S3 endpoint (moto's server) as it says."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import shm_entries, write_corpus
from tests_support.scripts import run_script

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
STORAGE_GUIDE = ROOT / "docs" / "guides" / "storage.md"
BENCH_JSON = ROOT / "docs" / "bench" / "bench.json"
BUCKET, PREFIX = "my-bucket", "corpora/code"
TEST_COMMAND = ('python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && '
                '.venv/bin/python -m pytest -q')


def _snippets(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def _with_data(code: str, corpus: Path, tokenizer: str) -> str:
    return (code.replace('"/data/code"', repr(str(corpus / "code")))
            .replace('"/data/web"', repr(str(corpus / "web")))
            .replace('"path/to/tokenizer.json"', repr(tokenizer)))


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_gives_the_two_commands_and_ci_runs_the_second():
    text = README.read_text()
    commands = re.findall(r"^```bash\n(.*?)\n```", _section(text, "The two commands"),
                          flags=re.S | re.M)
    assert commands == [
        'python3 -m venv .venv && .venv/bin/pip install -e ".[tokenizers]" && '
        '.venv/bin/python -m zephon demo', TEST_COMMAND]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m venv .venv" in ci and '-m pip install -q -e ".[test]"' in ci
    assert ".venv/bin/python -m pytest -q" in ci


def test_the_readme_is_a_landing_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    assert len(_snippets(text)) == 1 and len(_snippets(text)[0].splitlines()) <= 20
    assert not re.search(r"issue #|\bissues? \d|closing note|spec §|spec \d", text, re.I)
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert "docs/bench/bench.png" in local and "docs/getting-started.md" in local
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_the_readme_table_is_the_latest_run_and_says_which_commit_measured_it():
    """The README's headline table is generated from ``docs/bench/bench.json`` (by
    ``benchmarks/readme_table.py``), never typed; the run names its command, date and commit,
    and that commit is in this checkout's history (a run of another branch, or one whose
    commit was rewritten away, is not the code here)."""
    from zephon.bench.report import readme_table

    payload = json.loads(BENCH_JSON.read_text())
    assert readme_table(payload) in README.read_text()
    meta = payload["meta"]
    assert meta["command"].startswith("python -m zephon bench") and meta["time"]
    assert re.fullmatch(r"[0-9a-f]{40}", meta.get("commit", "")), "the run recorded no commit"
    assert f"commit `{meta['commit'][:7]}`" in README.read_text()
    if (ROOT / ".git").exists():
        git = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor",
                              meta["commit"], "HEAD"], capture_output=True, text=True)
        assert git.returncode == 0, f"{meta['commit']} is not an ancestor of HEAD: {git.stderr}"


def test_the_readme_table_is_rendered_from_every_cell_it_names():
    from zephon.bench.report import README_BEGIN, README_END, readme_table

    def cell(workload, fmt, system, median, unit):
        return {"workload": workload, "format": fmt, "workers": 0, "system": system,
                "unit": unit, "median": median}

    results = [cell("W1", "jsonl", "zephon", 369_731.0, "records/s"),
               cell("W1", "jsonl", "torch-dataloader", 1234.0, "records/s"),
               cell("W3", "jsonl", "zephon", 0.18, "s"),
               cell("W3", "jsonl", "torch-dataloader", None, "s"),
               cell("W4", "tokenized", "zephon", 89_411_304.0, "tokens/s")]
    meta = {"command": "python -m zephon bench --quick", "time": "2026-12-06 03:00",
            "cpus": 2, "platform": "Linux x86_64", "commit": "ab" * 20, "dirty": True}
    table = readme_table({"meta": meta, "results": results})
    assert table.startswith(README_BEGIN) and table.endswith(README_END)
    assert ("`python -m zephon bench --quick` at commit `abababa` with uncommitted changes, "
            "2026-12-06 03:00, on 2 CPUs") in table
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()
            if line.startswith("| W")}
    assert rows["W1 fetch + `batch(32)`, JSONL"].endswith(
        "| 369.7k records/s | not run | 1.2k records/s |")
    assert rows["W3 restore a checkpoint → first batch"].endswith(
        "| 0.18 s | not run | no checkpoint |")
    assert rows["W4 pack pre-tokenized Parquet"].endswith("| 89.4M tokens/s | not run | not run |")


@pytest.mark.slow
def test_the_readme_example_runs_as_a_plain_script(tokenizer_path, tmp_path):
    """In a fresh interpreter, the default runner (worker processes), no ``__main__`` guard."""
    pytest.importorskip("torch")
    corpus = write_corpus(tmp_path / "corpus")
    script = tmp_path / "readme_example.py"
    script.write_text(_with_data(_snippets(README.read_text())[0], corpus, tokenizer_path)
                      + "\nassert state['format'] == 'zephon-checkpoint'\n"
                        "assert (inputs['labels'] == -100).any()\n")
    proc, code, out, err = run_script(script, tmp_path, TMPDIR=str(tmp_path),
                                      ZEPHON_CACHE_DIR=str(tmp_path / "node-cache"))
    assert code == 0, err[-4000:]
    assert "torch.Size([8, 2048])" in out
    assert "bootstrapping" not in err  # the script was not imported again by a worker
    assert {n for n in shm_entries() if n.startswith(f"zephon_{proc}_")} == set()


@pytest.fixture
def storage_bucket(monkeypatch, tmp_path):
    """A corpus of the guide's own (its ``build_index`` writes into it) and
    ``s3://my-bucket/corpora/code`` holding its code shards, reachable the way the guide says:
    through fsspec's own configuration, no ``storage_options``."""
    fsspec = pytest.importorskip("fsspec")
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from io_helpers import moto_s3, s3_client

    corpus = write_corpus(tmp_path / "corpus")
    with moto_s3() as server:
        client = s3_client(server["endpoint"])
        client.create_bucket(Bucket=BUCKET)
        shards = sorted((corpus / "code").glob("*.jsonl"))
        for shard in shards:
            client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{shard.name}",
                              Body=shard.read_bytes())
        monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": server["endpoint"]})
        monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "node-cache"))
        yield corpus, client, shards


def test_the_object_storage_guide_reads_the_bucket(tokenizer_path, storage_bucket, monkeypatch):
    monkeypatch.setenv("ZEPHON_NUM_WORKERS", "0")
    corpus, client, shards = storage_bucket
    namespace: dict = {}
    for code in _snippets(STORAGE_GUIDE.read_text()):
        exec(compile(_with_data(code, corpus, tokenizer_path), str(STORAGE_GUIDE), "exec"),
             namespace)
    # the object-storage snippet read the bucket: index.json written, shards from the node cache
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert f"{PREFIX}/index.json" in keys
    remote, first = namespace["remote"], namespace["first_remote_batch"]
    assert remote.counts().sum() == 600 and len(shards) == 3
    # the same curriculum over the local copy of the files gives the same first batch
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    local = Dataset.from_path("code", corpus / "code")
    ws = StaticMixtureWorkSource([local], MixtureSpec({"code": 1.0}), seed=0)
    expected = next(iter(Pipeline(ws).batch(microbatch_size=32)))
    assert len(first) == 32
    assert [r.payload for r in first.records] == [r.payload for r in expected.records]
