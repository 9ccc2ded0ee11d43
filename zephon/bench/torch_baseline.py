"""A plain torch DataLoader doing each workload's work, with the same number of workers.

This is what a careful user would write by hand: shard files split across the DataLoader's
workers and read again pass after pass, pyarrow or json for reading, the tokenizer's batch API,
a shuffle buffer of the same size, a greedy best-fit packer (64 open bins, documents longer than
a row split into row-sized pieces) building padded rows with positions, batches of 8 rows built
inside the workers so the main process only receives them. Token ids stay numpy arrays from the
reader to the batch: pre-tokenized Parquet is read a row group at a time as one flat Arrow
column whose documents are slices (never Python lists), the packer keeps its bins' fill in a
numpy array and finds the best bin with one vectorised search, and rows are filled by slice
assignment.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import numpy as np

from zephon.bench.corpus import Corpus
from zephon.bench.memory import PssSampler
from zephon.bench.meter import Meter
from zephon.bench.params import BenchParams

MAX_LENGTH = 2049
NUM_BINS = 64
ROWS_PER_BATCH = 8


def _records(files: list[str], fmt: str) -> Iterator[dict]:
    while True:  # the datasets repeat, as the loaders' do
        for f in files:
            if fmt == "jsonl":
                with open(f, encoding="utf-8") as fh:
                    yield from (json.loads(line) for line in fh)
            else:
                import pyarrow.parquet as pq

                yield from pq.read_table(f).to_pylist()


def _token_arrays(files: list[str]) -> Iterator[np.ndarray]:
    """Pre-tokenized documents as int64 slices of one flat array per row group."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    while True:  # the datasets repeat, as the loaders' do
        for f in files:
            pf = pq.ParquetFile(f)
            for rg in range(pf.num_row_groups):
                col = pf.read_row_group(rg, columns=["input_ids"]).column(0).combine_chunks()
                values = pc.list_flatten(col).to_numpy().astype(np.int64, copy=False)
                offsets = col.offsets.to_numpy()
                offsets = (offsets - offsets[0]).tolist()
                for a, b in zip(offsets[:-1], offsets[1:]):
                    yield values[a:b]


def _documents(files: list[str], fmt: str, tokenizer_path: str | None) -> Iterator[np.ndarray]:
    """Token arrays: read from pre-tokenized Parquet, or encoded 256 texts at a time."""
    if tokenizer_path is None:
        yield from _token_arrays(files)
        return
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_path)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    texts: list[str] = []
    for rec in _records(files, fmt):
        texts.append(rec["text"])
        if len(texts) == 256:
            for e in tok.encode_batch(texts, add_special_tokens=False):
                doc = np.empty(len(e.ids) + 2, dtype=np.int64)
                doc[0], doc[1:-1], doc[-1] = bos, e.ids, eos
                yield doc
            texts = []


def _shuffled(docs: Iterator[np.ndarray], buffer_size: int, seed: int) -> Iterator[np.ndarray]:
    rng = random.Random(seed)
    buf: list[np.ndarray] = []
    for d in docs:
        if len(buf) < buffer_size:
            buf.append(d)
            continue
        i = rng.randrange(buffer_size)
        buf[i], d = d, buf[i]
        yield d


class BestFitPacker:
    """Best fit over ``num_bins`` open bins; when none fits and all are open, the oldest closes."""

    def __init__(self, max_length: int = MAX_LENGTH, num_bins: int = NUM_BINS) -> None:
        self.L, self.num_bins = max_length, num_bins
        self.bins: list[list[np.ndarray]] = []  # oldest first
        self.room = np.empty(num_bins, dtype=np.int64)  # free tokens of bins[i] at room[i]

    def add(self, doc: np.ndarray) -> list[list[np.ndarray]]:
        closed = []
        for a in range(0, len(doc), self.L):
            piece = doc[a:a + self.L]
            n = len(self.bins)
            room = self.room[:n]
            fits = np.flatnonzero(room >= len(piece))
            if len(fits):  # the tightest bin that fits, the oldest among equals
                best = int(fits[np.argmin(room[fits])])
            else:
                if n >= self.num_bins:
                    closed.append(self.bins.pop(0))
                    self.room[:n - 1] = self.room[1:n]
                    n -= 1
                self.bins.append([])
                self.room[n] = self.L
                best = n
            self.bins[best].append(piece)
            self.room[best] -= len(piece)
        return closed


_POSITIONS = np.arange(MAX_LENGTH, dtype=np.int64)


def _row(pieces: list[np.ndarray], L: int) -> tuple[np.ndarray, np.ndarray, int]:
    ids = np.zeros(L, dtype=np.int64)
    pos = np.zeros(L, dtype=np.int64)
    at = 0
    for p in pieces:
        ids[at:at + len(p)] = p
        pos[at:at + len(p)] = _POSITIONS[:len(p)]
        at += len(p)
    return ids, pos, L - at


def _packed_batches(docs: Iterator[np.ndarray]) -> Iterator[dict[str, Any]]:
    packer = BestFitPacker()
    rows: list[tuple[np.ndarray, np.ndarray, int]] = []
    for d in docs:
        for pieces in packer.add(d):
            rows.append(_row(pieces, MAX_LENGTH))
            if len(rows) == ROWS_PER_BATCH:
                yield {"input_ids": np.stack([r[0] for r in rows]),
                       "positions": np.stack([r[1] for r in rows]),
                       "padding": np.array([r[2] for r in rows])}
                rows = []


def _dataset(workload: str, files: list[str], fmt: str, tokenizer_path: str, buffer_size: int):
    import torch.utils.data as tud

    class Work(tud.IterableDataset):
        def __iter__(self) -> Iterator[Any]:
            info = tud.get_worker_info()
            mine = files if info is None else files[info.id::info.num_workers]
            wid = 0 if info is None else info.id
            if workload == "W1":
                return _records(mine, fmt)
            if workload == "W2":
                docs = _shuffled(_documents(mine, fmt, tokenizer_path), buffer_size, seed=wid)
                return _packed_batches(docs)
            return _packed_batches(_documents(mine, "parquet", None))

    return Work()


def run_torch(corpus: Corpus, workload: str, fmt: str, workers: int, params: BenchParams) -> dict:
    import torch.utils.data as tud

    if workload == "W3":
        raise ValueError("W3 does not apply: a plain DataLoader has no checkpoint of its position")
    src_fmt = "tokenized" if workload == "W4" else fmt
    files = corpus.files(src_fmt)
    ds = _dataset(workload, files, fmt, corpus.tokenizer_path, params.shuffle_buffer)
    pss = PssSampler() if workload == "W2" else None  # the tree: this process and its workers
    if workload == "W1":
        meter = Meter("records", params.seconds)
        loader = tud.DataLoader(ds, batch_size=32, num_workers=workers, collate_fn=list)
        for b in loader:
            if meter.add(len(b)):
                break
    else:
        meter = Meter("tokens", params.seconds_for(workload))
        loader = tud.DataLoader(ds, batch_size=None, num_workers=workers)
        for b in loader:
            if pss is not None:
                pss.maybe()
            pad = int(b["padding"].sum())
            if meter.add(len(b["input_ids"]), b["input_ids"].numel() - pad, pad):
                break
    out = meter.result(**(pss.result() if pss is not None else {}))  # workers still alive
    del loader  # shuts the workers down before the next system runs
    return out
