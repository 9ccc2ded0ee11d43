"""tokenize: text field -> ragged int32 token ids (+ attention mask), batch-encoded per block.

Special tokens (``special_tokens``, default ``"bos_eos"``): every document gets the markers its
tokenizer has - BOS and EOS, EOS only (GPT-2 style byte-level BPE, whose one
``<|endoftext|>`` is declared as both), or BOS only; ``"bos"`` / ``"eos"`` ask for one marker;
``"none"`` adds nothing; ``"tokenizer_default"`` lets the tokenizer's own template decide. The
ids are settled when the pipeline is built (``zephon.tokens.special_tokens`` says where they come
from), so a request the tokenizer cannot honour fails there, naming the fix, never at the first
batch.

Nothing leaves unsaid: ``truncation=True`` counts every record it cuts and the tokens cut
(``accounting``, reason ``truncated``); ``split_long_samples`` cuts a document into pieces that
keep every token; a record whose field is missing, null or not text raises a ``DataError``
naming dataset, shard and row, or with ``on_bad_record="skip"`` is skipped and counted
(reason ``bad_record``).

``padding``: ``"max_length"`` right-pads every row to ``max_length`` (longer rows stay whole
unless ``truncation=True``). ``True`` / ``"longest"`` pads to the longest row of a group of
records, and the group of a per-record operator is the record itself: a worker's block depends
on execution settings (``micro_batch_size``, a restore), and the data must not. Rows are left
as they are; ``to_training`` pads each batch to its longest row and masks those pads. With
``split_long_samples`` any padding pads the pieces to ``max_length``. Padded rows say how much
is padding (``padding_length``), so labels and loss masks leave the pads out. The pad id is
``pad_token_id=``, else the tokenizer's PAD, else its EOS, else 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from zephon import accounting
from zephon.block import Block, add_lineage, list_array, with_columns
from zephon.ops.tokenize_input import OK, bad_record_error, read_texts
from zephon.ops.tokenizer_op import TokenizerOp
from zephon.state.fingerprint import settings
from zephon.tokens.special_tokens import brackets
from zephon.tokens.token_layout import bracket, split, truncate
from zephon.tokens.tokenizer_source import LoadedTokenizer, load

_MODES = ("bos_eos", "bos", "eos", "none", "tokenizer_default")
_NO_PADDING = (False, None, "do_not_pad")
_SETTINGS = ("padding", "field", "max_length", "truncation", "split_long_samples",
             "special_tokens", "bos_override", "eos_override", "preserve_upstream_payload",
             "missing_field", "on_bad_record", "add_attention_mask", "pad_token_id",
             "parallelism", "bos_id", "eos_id", "pad_id")


class TokenizeOp(TokenizerOp):
    name = "tokenize"

    def __init__(self, tokenizer: Any = None, tokenizer_id: str | None = None, *, field: str,
                 max_length: int | None = None, truncation: bool = False,
                 split_long_samples: bool = False, special_tokens: str = "bos_eos",
                 bos_token_id: int | None = None, eos_token_id: int | None = None,
                 preserve_upstream_payload: bool = False, missing_field: str = "error",
                 add_attention_mask: bool = True, padding: Any = False,
                 return_tensors: str | None = None, parallelism: int | None = None,
                 placement: str = "auto", pad_token_id: int | None = None,
                 on_bad_record: str = "raise") -> None:
        if special_tokens not in _MODES:
            raise ValueError(f"special_tokens must be one of {_MODES}, got {special_tokens!r}")
        if missing_field not in ("error", "empty"):
            raise ValueError(f"missing_field must be 'error' or 'empty', got {missing_field!r}")
        if on_bad_record not in ("raise", "skip"):
            raise ValueError(f"on_bad_record must be 'raise' or 'skip', got {on_bad_record!r}")
        if truncation and split_long_samples:
            raise ValueError("truncation and split_long_samples are mutually exclusive")
        if (truncation or split_long_samples) and max_length is None:
            raise ValueError("truncation / split_long_samples need max_length")
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        if special_tokens in ("none", "tokenizer_default") and (
                bos_token_id is not None or eos_token_id is not None):
            raise ValueError(f"bos_token_id/eos_token_id cannot be used with special_tokens={special_tokens!r}")
        if not field:
            raise ValueError("tokenize needs field=")
        self.padding = _padding_mode(padding, max_length, split_long_samples)
        loaded = load(tokenizer, tokenizer_id)
        self.spec = loaded.spec
        self.field = field
        self.max_length = max_length
        self.truncation = truncation
        self.split_long_samples = split_long_samples
        self.special_tokens = special_tokens
        self.bos_override = bos_token_id
        self.eos_override = eos_token_id
        self.preserve_upstream_payload = preserve_upstream_payload
        self.missing_field = missing_field
        self.on_bad_record = on_bad_record
        self.add_attention_mask = add_attention_mask
        self.pad_token_id = pad_token_id
        self.parallelism = parallelism
        self._tok: LoadedTokenizer | None = loaded
        self.datasets: list | None = None  # for error messages (named_by)
        # the ids every document gets, settled now: a request the tokenizer cannot honour
        # fails while the pipeline is built
        self.bos_id, self.eos_id = brackets(
            special_tokens, bos_token_id if bos_token_id is not None else loaded.bos_token_id,
            eos_token_id if eos_token_id is not None else loaded.eos_token_id,
            bos_given=bos_token_id is not None, eos_given=eos_token_id is not None,
            label=self.spec.label)
        self.pad_id = next((int(i) for i in (pad_token_id, loaded.pad_token_id,
                                             loaded.eos_token_id) if i is not None), 0)
        specials = (self.bos_id is not None) + (self.eos_id is not None)
        if truncation and max_length is not None and max_length < max(specials, 1):
            raise ValueError(f"max_length={max_length} leaves no room for the {specials} "
                             "special tokens each document gets")

    def named_by(self, work_source: Any) -> TokenizeOp:
        """Keep the work source's datasets, so errors name a record's dataset and shard."""
        datasets = getattr(work_source, "datasets_by_id", None)
        if isinstance(datasets, dict):
            datasets = [datasets[i] for i in sorted(datasets)]
        self.datasets = list(datasets) if datasets is not None else None
        return self

    def specials(self) -> tuple[int | None, int | None]:
        """The (BOS, EOS) ids each document gets (None: not added)."""
        return self.bos_id, self.eos_id

    def fingerprint(self) -> dict:
        """Every setting that changes the ids, the settled special ids, and the tokenizer (by
        digest: a checkpoint stays small)."""
        return {**settings(self, _SETTINGS), "tokenizer": self.spec.fingerprint()}

    # -- the block path -------------------------------------------------------------------------

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Token ids with specials and truncation applied, and the tokens cut from each row."""
        tok = self.tokenizer()
        if self.special_tokens == "tokenizer_default":
            offsets, values = tok.encode(texts, add_special_tokens=True)
            room = self.max_length
        else:
            offsets, values = tok.encode(texts)
            room = None if self.max_length is None else \
                self.max_length - (self.bos_id is not None) - (self.eos_id is not None)
        cut = np.zeros(len(texts), dtype=np.int64)
        if self.truncation:
            cut = np.maximum(np.diff(offsets) - room, 0)
            offsets, values = truncate(offsets, values, room)
        if self.special_tokens != "tokenizer_default":
            offsets, values = bracket(offsets, values, self.bos_id, self.eos_id)
        return offsets, values, cut

    def process_block(self, block: Block) -> Block:
        texts, status, kind = read_texts(block, self.field, self.missing_field)
        bad = status != OK
        if bad.any():
            if self.on_bad_record == "raise":
                raise bad_record_error(block, status, kind, self.field, self.datasets)
            accounting.count(self.op_name, "bad_record", block.meta["dataset_id"][bad])
            keep = np.flatnonzero(~bad)
            block, texts = block.take(keep), texts.take(pa.array(keep))
        offsets, values, cut = self.encode(texts.to_pylist())
        if cut.any():
            accounting.count(self.op_name, "truncated", block.meta["dataset_id"][cut > 0],
                             cut[cut > 0])
        base = block
        if self.split_long_samples:
            offsets, values, parent, child = split(offsets, values, self.max_length)
            # every record gets a lineage level (child 0 when unsplit), so a record's identity
            # never depends on which other records shared its block
            base = block.take(parent) if len(parent) != len(block) else block
            base = Block(_with_closes(base.meta, parent), base.payload,
                         add_lineage(base.lineage, child), base.sparse, base.is_batch)
        mask_values = np.ones(len(values), dtype=np.int8)
        if self._pads():
            lengths = np.diff(offsets)
            offsets, values, mask_values = _pad_rows(offsets, values, self.max_length, self.pad_id)
            base = Block({**base.meta, "padding_length": np.diff(offsets) - lengths},
                         base.payload, base.lineage, base.sparse, base.is_batch)
        cols = {"input_ids": list_array(offsets, values)}
        if self.add_attention_mask:
            cols["attention_mask"] = list_array(offsets, mask_values)
        return with_columns(base, cols, self.preserve_upstream_payload)

    def _pads(self) -> bool:
        """Whether rows are padded to max_length (see the module's note on "longest")."""
        return self.padding == "max_length" or bool(self.padding and self.split_long_samples)


def _padding_mode(padding: Any, max_length: int | None, split_long_samples: bool) -> Any:
    """False, "longest" or "max_length" (the spec's spellings; other truthy values: longest)."""
    if padding in _NO_PADDING:
        return False
    if padding == "max_length" or (padding and split_long_samples):
        if max_length is None:
            raise ValueError("padding='max_length' needs max_length")
        return "max_length" if padding == "max_length" else "longest"
    if isinstance(padding, str) and padding != "longest":
        raise ValueError(f"padding must be False, True, 'longest', 'max_length' or "
                         f"'do_not_pad', got {padding!r}")
    return "longest"


def _pad_rows(offsets: np.ndarray, values: np.ndarray, width: int, pad_id: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row right-padded to ``width`` tokens (a longer row stays as it is, so a row never
    depends on the others): (offsets, ids, attention mask)."""
    lengths = np.diff(offsets)
    new_off = np.zeros(len(offsets), dtype=np.int64)
    np.cumsum(np.maximum(lengths, width), out=new_off[1:])
    ids = np.full(int(new_off[-1]), pad_id, dtype=np.int32)
    mask = np.zeros(len(ids), dtype=np.int8)
    # each token moves by how far its row's start moved
    dest = np.arange(len(values), dtype=np.int64) + np.repeat(new_off[:-1] - offsets[:-1], lengths)
    ids[dest] = values
    mask[dest] = 1
    return new_off, ids, mask


def _with_closes(meta: dict, parent: np.ndarray) -> dict:
    """``meta`` with the ``closes`` column of a split's pieces: the last piece of each record
    closes it (if the record itself closed its own parent)."""
    from zephon.types import CLOSES

    last = np.ones(len(parent), dtype=np.int8)
    if len(parent) > 1:
        last[:-1] = parent[1:] != parent[:-1]
    inherited = meta.get(CLOSES)
    return {**meta, CLOSES: last if inherited is None else (last & inherited).astype(np.int8)}
