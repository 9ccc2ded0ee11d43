"""Every Python code block of the documentation site runs: the blocks of one page, in order, as
one script in a fresh interpreter, the way a reader pastes them (the default runner, worker
processes; no ``__main__`` guard), on generated data. The placeholders the pages use for data
(``/data/code``, ``/data/web``, ``path/to/tokenizer.json``, ``s3://my-bucket/...``) are
replaced by a generated corpus, a trained tokenizer and a local S3 server. A block preceded by
``<!-- no-run -->`` is left out (none is, today)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import shm_entries, write_corpus
from tests_support.scripts import run_script

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NO_RUN = "<!-- no-run -->"
BUCKET, PREFIX = "my-bucket", "corpora/code"
# what a page's run must print, beside running without an error
EXPECTED_OUTPUT = {
    "getting-started.md": ["['hello', 'world']", "['again']", "step 2: loss"],
    "guides/distributed.md": ["['0', '1', '2', '3']"],
    "guides/sft.md": ["torch.Size([4, 512])", "[[-100, -100, -100, 20, 21, 2, -100"],
    "guides/troubleshooting.md": ["has no BOS token", "'operators': ['tokenize']"],
    "guides/operators.md": ["OP_NONDETERMINISTIC"],
    "guides/checkpointing.md": ["checkpoint fingerprint.operators[1].seed: does not match "
                                "this pipeline: checkpoint has 1, this pipeline has 2"],
}


def code_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, code) of each ```python block not marked ``<!-- no-run -->``."""
    blocks = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        before = text[:m.start()].rstrip().splitlines()
        if before and before[-1].strip() == NO_RUN:
            continue
        blocks.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return blocks


def pages_with_code() -> list[str]:
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    return [p for p in pages if code_blocks((DOCS / p).read_text())]


def script_of(page: str, corpus: Path, tokenizer: str) -> str:
    parts = []
    for line, code in code_blocks((DOCS / page).read_text()):
        parts.append(f"# --- docs/{page}, block at line {line}\n{code}")
    return ("\n".join(parts)
            .replace('"/data/code"', repr(str(corpus / "code")))
            .replace('"/data/web"', repr(str(corpus / "web")))
            .replace('"path/to/tokenizer.json"', repr(tokenizer)))


@pytest.fixture(scope="module")
def docs_corpus(tmp_path_factory):
    """The pages' own corpus (a page writes index.json into it, so it is not shared)."""
    return write_corpus(tmp_path_factory.mktemp("docs_corpus"))


@pytest.fixture(scope="module")
def docs_bucket(docs_corpus):
    """``s3://my-bucket/corpora/code`` holding the code shards, on a local S3 server, reached
    through fsspec's own configuration (``FSSPEC_S3_ENDPOINT_URL``), as the storage page says."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from io_helpers import moto_s3, s3_client

    with moto_s3() as server:
        client = s3_client(server["endpoint"])
        client.create_bucket(Bucket=BUCKET)
        for shard in sorted((docs_corpus / "code").glob("*.jsonl")):
            client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{shard.name}", Body=shard.read_bytes())
        yield client, {**server["env"], "FSSPEC_S3_ENDPOINT_URL": server["endpoint"]}


def test_the_pages_have_code_to_run():
    pages = pages_with_code()
    for page in ("getting-started.md", "concepts.md", "guides/pretraining.md", "guides/sft.md",
                 "guides/storage.md", "guides/checkpointing.md", "guides/distributed.md",
                 "guides/operators.md", "guides/performance.md", "guides/troubleshooting.md"):
        assert page in pages, page


def test_a_no_run_block_is_left_out():
    text = "```python\nrun()\n```\n\n<!-- no-run -->\n```python\nskip()\n```\n"
    assert [code for _, code in code_blocks(text)] == ["run()\n"]


@pytest.mark.parametrize("page", pages_with_code())
def test_page_code_runs_as_a_script(page, docs_corpus, tokenizer_path, docs_bucket, tmp_path):
    pytest.importorskip("torch")
    client, s3_env = docs_bucket
    script = tmp_path / "page.py"
    script.write_text(script_of(page, docs_corpus, tokenizer_path))
    proc, code, out, err = run_script(script, tmp_path, **s3_env, TMPDIR=str(tmp_path),
                                      ZEPHON_CACHE_DIR=str(tmp_path / "node-cache"))
    assert code == 0, f"docs/{page} failed (script {script}):\n{err[-4000:]}"
    for expected in EXPECTED_OUTPUT.get(page, []):
        assert expected in out, f"docs/{page} did not print {expected!r}:\n{out[-2000:]}"
    assert "bootstrapping" not in err  # the script was not imported again by a worker
    assert {n for n in shm_entries() if n.startswith(f"zephon_{proc}_")} == set()
    if page == "guides/storage.md":  # it indexed and read the bucket
        keys = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]}
        assert f"{PREFIX}/index.json" in keys


def test_every_environment_variable_is_in_the_tuning_guide():
    used = set()
    for path in (ROOT / "zephon").rglob("*.py"):
        used |= set(re.findall(r"ZEPHON_[A-Z_]+[A-Z]", path.read_text()))
    documented = set(re.findall(r"`(ZEPHON_[A-Z_]+)`", (DOCS / "guides" / "performance.md").read_text()))
    assert used and not used - documented, f"not in docs/guides/performance.md: {used - documented}"


def test_user_pages_speak_to_users():
    """The site's pages never send a reader to the project's issue tracker or notes."""
    journal = re.compile(r"issue #|\bissues? \d|closing note|issues ask", re.I)
    pages = [p for p in DOCS.rglob("*.md") if p.name != "INTERNALS.md"]
    assert [str(p) for p in pages if journal.search(p.read_text())] == []
