"""The README's Python snippets run, in order, against a generated local corpus, and its
object-storage snippet against a real S3 endpoint (moto's server) holding the same files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
README_BUCKET, README_PREFIX = "my-bucket", "corpora/code"


def _snippets(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.fixture
def readme_bucket(corpus_dir, monkeypatch, tmp_path):
    """``s3://my-bucket/corpora/code`` holding the local corpus's code shards, reachable the way
    the README says: through fsspec's own configuration, no ``storage_options``."""
    fsspec = pytest.importorskip("fsspec")
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from io_helpers import moto_s3, s3_client

    with moto_s3() as server:
        client = s3_client(server["endpoint"])
        client.create_bucket(Bucket=README_BUCKET)
        shards = sorted((corpus_dir / "code").glob("*.jsonl"))
        for shard in shards:
            client.put_object(Bucket=README_BUCKET, Key=f"{README_PREFIX}/{shard.name}",
                              Body=shard.read_bytes())
        monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": server["endpoint"]})
        monkeypatch.setenv("ZEPHON_CACHE_DIR", str(tmp_path / "node-cache"))
        yield client, shards


def test_readme_snippets_run(corpus_dir, tokenizer_path, readme_bucket, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("ZEPHON_NUM_WORKERS", "0")
    text = README.read_text()
    snippets = _snippets(text)
    assert len(snippets) >= 2
    namespace: dict = {}
    for code in snippets:
        code = (code.replace('"/data/code"', repr(str(corpus_dir / "code")))
                .replace('"/data/web"', repr(str(corpus_dir / "web")))
                .replace('"path/to/tokenizer.json"', repr(tokenizer_path)))
        exec(compile(code, str(README), "exec"), namespace)
    # the object-storage snippet read the bucket: index.json written, shards from the node cache
    client, shards = readme_bucket
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=README_BUCKET)["Contents"]}
    assert f"{README_PREFIX}/index.json" in keys
    remote, first = namespace["remote"], namespace["first_remote_batch"]
    assert remote.counts().sum() == 600 and len(shards) == 3
    # the same curriculum over the local copy of the files gives the same first batch
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import MixtureSpec, StaticMixtureWorkSource

    local = Dataset.from_path("code", corpus_dir / "code")
    ws = StaticMixtureWorkSource([local], MixtureSpec({"code": 1.0}), seed=0)
    expected = next(iter(Pipeline(ws).batch(microbatch_size=32)))
    assert len(first) == 32
    assert [r.payload for r in first.records] == [r.payload for r in expected.records]
