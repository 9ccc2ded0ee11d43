"""Generated corpora for the demo, the benchmarks and the tests (nothing is downloaded).

Documents are made of words drawn from a fixed pseudo-English vocabulary with log-normal
lengths, so tokenizers, packing and mixtures see realistic shapes. Everything is seeded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "qua", "ber", "dan", "fel",
              "gor", "hin", "jus", "kel", "mor", "nix", "pal", "ron", "sel", "tur", "wex")


def vocabulary(size: int = 2000, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    words = set()
    while len(words) < size:
        k = int(rng.integers(1, 4))
        words.add("".join(_SYLLABLES[int(i)] for i in rng.integers(0, len(_SYLLABLES), k)))
    return sorted(words)


def documents(n: int, *, seed: int = 0, mean_words: float = 300.0, sigma: float = 0.8,
              vocab: list[str] | None = None, prefix: str = "") -> list[str]:
    """``n`` documents with log-normal word counts (median ~ mean_words / e^(sigma^2/2))."""
    vocab = vocab or vocabulary()
    rng = np.random.default_rng(seed)
    mu = np.log(mean_words) - sigma**2 / 2
    counts = np.maximum(1, rng.lognormal(mu, sigma, n).astype(np.int64))
    # Zipf-ish word choice: frequent words are frequent, as in text
    ranks = np.minimum(rng.zipf(1.3, int(counts.sum())), len(vocab)) - 1
    words = np.asarray(vocab, dtype=object)[ranks]
    out, pos = [], 0
    for c in counts.tolist():
        out.append(prefix + " ".join(words[pos : pos + c]))
        pos += c
    return out


def write_dataset(root: str | os.PathLike, name: str, n_docs: int, *, n_shards: int = 4,
                  fmt: str = "jsonl", seed: int = 0, mean_words: float = 300.0,
                  extra_fields: bool = True) -> Path:
    """Write ``n_docs`` documents as ``n_shards`` shard files of ``fmt`` under root/name."""
    out = Path(root) / name
    out.mkdir(parents=True, exist_ok=True)
    docs = documents(n_docs, seed=seed, mean_words=mean_words, prefix=f"[{name}] ")
    bounds = np.linspace(0, n_docs, n_shards + 1).astype(int)
    for s in range(n_shards):
        rows = [{"text": docs[i], "doc_id": f"{name}-{i}", "source": name} if extra_fields
                else {"text": docs[i]} for i in range(bounds[s], bounds[s + 1])]
        path = out / f"shard-{s:05d}.{fmt}"
        if fmt == "jsonl":
            with open(path, "w", encoding="utf-8") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
        elif fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=1024)
        else:
            raise ValueError(f"unknown format {fmt!r}")
    return out


def train_tokenizer(texts: list[str], vocab_size: int = 4096, path: str | os.PathLike | None = None):
    """A small byte-level BPE trained in seconds (needs the ``tokenizers`` package).

    Special tokens: ``<pad>`` = 0, ``<s>`` = 1 (BOS), ``</s>`` = 2 (EOS).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    if path is not None:
        tok.save(str(path))
    return tok
