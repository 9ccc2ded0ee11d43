"""The machine's limits on the same bytes, with no loader around them.

W1: pyarrow reading the shard files whole (its own threads on all cores); W2: the tokenizer's
batch API alone on the same text (Rust threads on all cores); W4: one memcpy of the token bytes.
These are the issue's yardsticks rather than hard ceilings: W1's reads whole files
sequentially, which a shuffled, mixed loader cannot do, but with Arrow's general JSON parser;
Zephon's kernel for flat string records parses JSONL faster than that, so it can pass it.
"""

from __future__ import annotations

import time

import numpy as np

from zephon.bench.corpus import Corpus
from zephon.bench.params import BenchParams


def raw_read(corpus: Corpus, fmt: str, params: BenchParams) -> dict:
    """Records/s of pyarrow reading the shard files: whole passes, for at least ``seconds``,
    on the allocator Zephon decodes with (faster than pyarrow's default here: a limit must be
    the best the machine does)."""
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    from zephon.arrow_memory import use_decode_pool

    use_decode_pool()

    files = corpus.files(fmt)
    records = nbytes = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < params.seconds:
        for f in files:
            table = pq.read_table(f) if fmt == "parquet" else pj.read_json(f)
            records += table.num_rows
            nbytes += table.nbytes
    secs = time.perf_counter() - t0
    return {"records": records, "tokens": 0, "seconds": secs, "bytes": nbytes}


def tokenizer_alone(corpus: Corpus, params: BenchParams) -> dict:
    """Tokens/s of ``encode_batch`` over the corpus text (loaded beforehand, not timed)."""
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(corpus.tokenizer_path)
    texts: list[str] = []
    for f in corpus.files("parquet"):
        texts.extend(pq.read_table(f, columns=["text"]).column("text").to_pylist())
    # interleave the datasets a little, as the mixture would, instead of all code first
    texts = texts[::2] + texts[1::2]
    # its fastest batch API (no offsets), as Zephon's tokenize() uses when there is one
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    tokens = records = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < params.seconds:
        i = records % len(texts)
        part = texts[i:i + 1024]
        # + 2: the loaders count the BOS and EOS that tokenize() adds to every document
        tokens += sum(len(e) + 2 for e in encode(part, add_special_tokens=False))
        records += len(part)
    return {"records": records, "tokens": tokens, "seconds": time.perf_counter() - t0}


def memcpy(params: BenchParams, n: int = 16_000_000) -> dict:
    """Tokens/s of copying int32 token ids once (the least a loader that moves them can do)."""
    src = np.ones(n, dtype=np.int32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in first: the loaders' buffers are warm too
    copies = 0
    t0 = time.perf_counter()
    while copies < 3:
        np.copyto(dst, src)
        copies += 1
    return {"records": 0, "tokens": n * copies, "seconds": time.perf_counter() - t0}


def run_limit(corpus: Corpus, workload: str, fmt: str, params: BenchParams) -> dict:
    """One run of ``workload``'s limit."""
    if workload == "W5":
        from zephon.bench.chat import tokenizer_alone as chat_tokenizer_alone

        return chat_tokenizer_alone(corpus, params)
    if workload == "W1":
        return raw_read(corpus, fmt, params)
    if workload == "W2":
        return tokenizer_alone(corpus, params)
    return memcpy(params)
