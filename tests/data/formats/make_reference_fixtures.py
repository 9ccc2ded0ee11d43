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

from tests_support import litdata_records  # noqa: E402
from tests_support.mds_streaming import streaming_base  # noqa: E402
from tests_support.reference_canon import canon, key_of  # noqa: E402

MDS_COLUMNS = {"id": "int", "text": "str", "blob": "bytes", "score": "float32", "n": "int64",
               "tokens": "ndarray:int32", "patch": "ndarray:uint8:2,3", "any": "ndarray",
               "meta": "json", "big": "str_int", "ratio": "str_float", "price": "str_decimal",
               "photo": "jpeg", "mask": "png"}
LITDATA_KINDS = {
    "plain": (litdata_records.record, {}),
    "zstd-frames": (litdata_records.record, {"compression": "zstd"}),
    "zstd-file": (litdata_records.record, {"compression": "zstd",
                                           "compression_level": "chunk"}),
    "arrow-rows": (litdata_records.text, {"compression": "zstd"}),
    "pytree": (litdata_records.nested, {}),
}


def mds_record(i: int) -> dict:
    from decimal import Decimal

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(i)
    return {"id": i, "text": f"doc {i} " + "é" * (i % 5), "blob": bytes([i % 256]) * (i % 9),
            "score": np.float32(i / 7), "n": np.int64(-i * 3), "tokens":
            rng.integers(0, 50_000, 1 + i % 13, dtype=np.int32),
            "patch": np.full((2, 3), i % 256, dtype=np.uint8),
            "any": rng.random((1 + i % 3, 4)).astype(np.float64),
            "meta": {"i": i, "tags": ["a", "b"][: i % 3], "w": None if i % 2 else i / 2},
            "big": 10**20 + i if i % 4 == 0 else i, "ratio": i / 3, "price": Decimal(f"{i}.50"),
            "photo": Image.fromarray(rng.integers(0, 255, (4, 5, 3), dtype=np.uint8)),
            "mask": Image.fromarray(np.full((3, 3), i % 256, dtype=np.uint8))}


def _save(root: Path, records: list) -> None:
    expected = sorted((canon(r) for r in records), key=lambda c: key_of_canon(c))
    with open(root / "expected.pkl", "wb") as f:
        pickle.dump(expected, f, protocol=4)


def key_of_canon(c) -> int:
    return c["id"][1] if isinstance(c, dict) else c[1][1]


def write_mds(compression: str | None, n: int = 40) -> None:
    sb = streaming_base()
    root = HERE / f"mds-{compression or 'plain'}"
    shutil.rmtree(root, ignore_errors=True)
    with sb.MDSWriter(out=str(root), columns=MDS_COLUMNS, compression=compression,
                      size_limit=8000) as w:
        for i in range(n):
            w.write(mds_record(i))
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

    fn, kw = LITDATA_KINDS[kind]
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
    for k in LITDATA_KINDS:
        write_litdata(k)
    total = sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file())
    print(f"fixtures written under {HERE}: {total / 1024:.0f} KiB")
