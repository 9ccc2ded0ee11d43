"""Writes the MDS and litData reference fixtures beside this file with the libraries' own
writers, and what their own readers give (``expected.pkl``), so that CI, where Streaming and
litData cannot be installed beside this project's pins (see pyproject.toml), still checks
Zephon's readers against files those libraries wrote.

    pip install --no-deps mosaicml-streaming litdata   # and their few needs, see pyproject
    python tests/data/formats/make_reference_fixtures.py
"""

from __future__ import annotations

import pickle
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/: tests_support, and the MDS records

from tests_support import litdata_records, mds_streaming  # noqa: E402
from tests_support.reference_canon import canon, canon_key, key_of  # noqa: E402


def _save(root: Path, records: list) -> None:
    expected = sorted((canon(r) for r in records), key=canon_key)
    with open(root / "expected.pkl", "wb") as f:
        pickle.dump(expected, f, protocol=4)


def write_mds(compression: str | None, n: int = 40) -> None:
    sb = mds_streaming.streaming_base()
    root = HERE / f"mds-{compression or 'plain'}"
    shutil.rmtree(root, ignore_errors=True)
    with sb.MDSWriter(out=str(root), columns=mds_streaming.COLUMNS, compression=compression,
                      size_limit=8000) as w:
        for i in range(n):
            w.write(mds_streaming.record(i))
    with tempfile.TemporaryDirectory() as local:
        ds = sb.StreamingDataset(remote=str(root), local=local, batch_size=1, shuffle=False)
        try:
            records = [ds[i] for i in range(ds.num_samples)]
        finally:
            del ds
            sb.util.clean_stale_shared_memory()
    _save(root, records)


def write_litdata(kind: str, n: int = 40) -> None:
    import litdata

    fn, kw = litdata_records.KINDS[kind]
    root = HERE / f"litdata-{kind}"
    shutil.rmtree(root, ignore_errors=True)
    litdata.optimize(fn=fn, inputs=list(range(n)), output_dir=str(root), chunk_bytes="3kb",
                     num_workers=1, **kw)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy"  # litData decompresses a local chunk in place
        shutil.copytree(root, copy)
        ref = litdata.StreamingDataset(str(copy))
        records = [ref[i] for i in range(len(ref))]
    assert sorted(map(key_of, records)) == list(range(n))
    _save(root, records)


if __name__ == "__main__":
    for c in (None, "zstd"):
        write_mds(c)
    for k in litdata_records.KINDS:
        write_litdata(k)
    total = sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file())
    print(f"fixtures written under {HERE}: {total / 1024:.0f} KiB")
