"""A plain torch DataLoader doing the same work as each workload, with the same worker count.

This is what a careful user would write by hand: files split across DataLoader workers, pyarrow
or json for reading, the tokenizer's batch API, a greedy best-fit packer in Python.
"""

from __future__ import annotations

import glob
import json
import os
import time

from zephon.bench.corpus import Corpus


def _files(corpus: Corpus, fmt: str) -> list[str]:
    return sorted(glob.glob(os.path.join(str(corpus.root), fmt, "*", f"*.{fmt}")))


def _make_dataset(files: list[str], fmt: str, tokenizer_path: str | None):
    import torch.utils.data as tud

    class Records(tud.IterableDataset):
        def __iter__(self):
            info = tud.get_worker_info()
            mine = files if info is None else files[info.id::info.num_workers]
            tok = None
            if tokenizer_path:
                from tokenizers import Tokenizer

                tok = Tokenizer.from_file(tokenizer_path)
            for f in mine:
                if fmt == "parquet":
                    import pyarrow.parquet as pq

                    rows = pq.read_table(f).to_pylist()
                else:
                    with open(f, encoding="utf-8") as fh:
                        rows = [json.loads(line) for line in fh]
                if tok is None:
                    yield from rows
                    continue
                for i in range(0, len(rows), 256):
                    part = rows[i:i + 256]
                    encs = tok.encode_batch([r["text"] for r in part], add_special_tokens=False)
                    for e in encs:
                        yield [1, *e.ids, 2]

    return Records()


class _BestFitPacker:
    def __init__(self, max_length: int, num_bins: int) -> None:
        self.L, self.num_bins, self.bins = max_length, num_bins, []

    def add(self, doc: list[int]):
        if len(doc) > self.L:
            return []
        best, room = None, self.L + 1
        for b in self.bins:
            r = self.L - b[0]
            if len(doc) <= r < room:
                best, room = b, r
        out = []
        if best is None:
            if len(self.bins) >= self.num_bins:
                out.append(self.bins.pop(0))
            best = [0, []]
            self.bins.append(best)
        best[0] += len(doc)
        best[1].extend(doc)
        return out


def run_torch(corpus: Corpus, workload: str, fmt: str, workers: int, limit: int) -> dict:
    import torch.utils.data as tud

    tokenized = workload == "W2"
    ds = _make_dataset(_files(corpus, fmt), fmt, corpus.tokenizer_path if tokenized else None)
    t0 = time.perf_counter()
    records = tokens = 0
    if not tokenized:
        loader = tud.DataLoader(ds, batch_size=32, num_workers=workers, collate_fn=list,
                                persistent_workers=False)
        for b in loader:
            records += len(b)
            if records >= limit:
                break
    else:
        loader = tud.DataLoader(ds, batch_size=256, num_workers=workers, collate_fn=list)
        packer = _BestFitPacker(2049, 64)
        for docs in loader:
            for d in docs:
                for _, bin_tokens in packer.add(d):
                    records += 1
                    tokens += len(bin_tokens)
            if records >= limit:
                break
    return {"records": records, "tokens": tokens, "seconds": time.perf_counter() - t0}
