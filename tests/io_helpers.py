"""Shared builders for the zephon.io tests: record generators, shard writers, a moto S3 server."""

from __future__ import annotations

import gzip
import json
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def records(n: int, start: int = 0, *, text_len: int = 20) -> list[dict[str, Any]]:
    return [{"id": i, "text": f"doc-{i}-" + "x" * (i % text_len), "score": i / 2}
            for i in range(start, start + n)]


def jsonl_bytes(recs: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in recs).encode()


def write_jsonl(path: Path, recs: list[dict[str, Any]], compression: str | None = None) -> Path:
    data = jsonl_bytes(recs)
    if compression == "gzip":
        data = gzip.compress(data)
    elif compression == "zstd":
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def write_parquet(path: Path, recs: list[dict[str, Any]], row_group_size: int = 10) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(recs), path, row_group_size=row_group_size)
    return path


def jsonl_dataset(root: Path, shards: int = 3, rows: int = 25, compression: str | None = None,
                  ) -> list[list[dict[str, Any]]]:
    """Write ``shards`` JSONL files of ``rows`` records; returns the records per shard."""
    suffix = {None: ".jsonl", "gzip": ".jsonl.gz", "zstd": ".jsonl.zst"}[compression]
    out = []
    for s in range(shards):
        recs = records(rows, start=s * 1000)
        write_jsonl(root / f"part-{s:03d}{suffix}", recs, compression)
        out.append(recs)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_s3() -> Iterator[dict[str, Any]]:
    """A real S3 endpoint (moto's standalone server) on 127.0.0.1; yields connection details
    and ``storage_options`` for s3fs."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env_keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env_keys}
    os.environ.update(env_keys)
    try:
        yield {
            "endpoint": endpoint,
            "env": env_keys,
            "storage_options": {"key": "testing", "secret": "testing", "endpoint_url": endpoint},
        }
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1")
