"""Benchmark corpora: two datasets (code 25%, web 75%) in JSONL and Parquet, ~2 KB documents
with log-normal lengths, a BPE tokenizer trained on them, and the same text tokenized once
into Parquet (W4's input). Cached under the parameters that shape them.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from zephon import synthetic

NAMES = ("code", "web")
MIXTURE = {"code": 0.25, "web": 0.75}
# How W4's pre-tokenized copy is stored, as a corpus of token ids meant for training is: the
# lists and their elements declared non-null (token lists hold no nulls; nullable elements make
# the reader decode a definition level per token), PLAIN values without a dictionary and
# without compression (ids are near-random 4-byte values, so general-purpose compressors gain
# little and cost decode time on every epoch). A cached corpus whose copy was written another
# way is re-tokenized on first use (``tokenized/FORMAT.json`` records the format).
TOKENIZED_FORMAT = {"version": 2, "nullable": False, "use_dictionary": False,
                    "compression": "none", "row_group_size": 1024}


@dataclass(frozen=True)
class CorpusSpec:
    docs: int = 100_000
    shards: int = 20
    mean_words: float = 330.0  # ~2 KB of text per document
    vocab_size: int = 4096
    seed: int = 0

    @property
    def key(self) -> str:
        return f"d{self.docs}-s{self.shards}-w{int(self.mean_words)}-v{self.vocab_size}-r{self.seed}"


@dataclass
class Corpus:
    root: Path
    spec: CorpusSpec
    mixture = MIXTURE

    def dataset_dir(self, name: str, fmt: str) -> str:
        """fmt: "jsonl", "parquet" or "tokenized" (Parquet with an ``input_ids`` column)."""
        return str(self.root / fmt / name)

    @property
    def tokenizer_path(self) -> str:
        return str(self.root / "tokenizer.json")

    def datasets(self, fmt: str) -> list[tuple[str, str]]:
        return [(name, self.dataset_dir(name, fmt)) for name in NAMES]

    def files(self, fmt: str) -> list[str]:
        """Every shard file of both datasets (sorted, code first)."""
        ext = "jsonl" if fmt == "jsonl" else "parquet"
        return [f for name in NAMES
                for f in sorted(glob.glob(os.path.join(self.dataset_dir(name, fmt), f"*.{ext}")))]


def default_root() -> Path:
    base = os.environ.get("ZEPHON_BENCH_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "zephon", "bench")
    return Path(base)


def ensure_corpus(spec: CorpusSpec, root: Path | None = None,
                  log: Callable[[str], None] = print) -> Corpus:
    root = (root or default_root()) / spec.key
    done = root / "READY.json"
    if done.exists():
        corpus = Corpus(root, spec)
        if not _tokenized_current(corpus):
            log(f"re-writing the pre-tokenized copy in {root} ...")
            _pretokenize(corpus)
        return corpus
    log(f"generating benchmark corpus in {root} ...")
    code_n = spec.docs // 4
    parts = {"code": code_n, "web": spec.docs - code_n}
    for i, (name, n) in enumerate(parts.items()):
        shards = max(1, spec.shards * n // spec.docs)
        for fmt in ("jsonl", "parquet"):
            synthetic.write_dataset(root / fmt, name, n, n_shards=shards, fmt=fmt,
                                    seed=spec.seed + i, mean_words=spec.mean_words)
    train = synthetic.documents(3000, seed=spec.seed + 99, mean_words=spec.mean_words)
    synthetic.train_tokenizer(train, spec.vocab_size, root / "tokenizer.json")
    corpus = Corpus(root, spec)
    _pretokenize(corpus)
    done.write_text(json.dumps(asdict(spec)))
    return corpus


def _format_file(corpus: Corpus) -> Path:
    return corpus.root / "tokenized" / "FORMAT.json"


def _tokenized_current(corpus: Corpus) -> bool:
    try:
        return json.loads(_format_file(corpus).read_text()) == TOKENIZED_FORMAT
    except (OSError, ValueError):
        return False


def _pretokenize(corpus: Corpus) -> None:
    """W4's input: every document as ``[BOS, *ids, EOS]`` (what tokenize() emits by default),
    int32, in Parquet shards mirroring the text shards, stored as ``TOKENIZED_FORMAT`` says."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(corpus.tokenizer_path)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    fmt = TOKENIZED_FORMAT
    element = pa.field("element", pa.int32(), nullable=fmt["nullable"])
    schema = pa.schema([pa.field("input_ids", pa.list_(element), nullable=fmt["nullable"])])
    for name in NAMES:
        out = Path(corpus.dataset_dir(name, "tokenized"))
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted(glob.glob(os.path.join(corpus.dataset_dir(name, "parquet"), "*.parquet"))):
            texts = pq.read_table(f, columns=["text"]).column("text").to_pylist()
            ids = [[bos, *e.ids, eos] for e in tok.encode_batch(texts, add_special_tokens=False)]
            table = pa.table({"input_ids": pa.array(ids, type=schema.field(0).type)},
                             schema=schema)
            pq.write_table(table, out / os.path.basename(f), row_group_size=fmt["row_group_size"],
                           use_dictionary=fmt["use_dictionary"], compression=fmt["compression"])
    _format_file(corpus).write_text(json.dumps(TOKENIZED_FORMAT))
