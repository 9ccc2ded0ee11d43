"""Numeric core of the token pipeline: packing, shuffling, mixture balancing, training arrays.

Pure array code over numpy with Cython kernels (``zephon/_ext``); nothing here knows about
blocks, operators or the engine, which call these classes per lane.
"""

from zephon.tokens.fallback_tokenizer import FallbackTokenizer
from zephon.tokens.mixer import MixerFlush, MixtureBalancer, quantize_shares
from zephon.tokens.packer import (
    ALGORITHMS,
    Bin,
    PackedBins,
    PackedRows,
    Packer,
    build_aligned,
    build_rows,
)
from zephon.tokens.shuffler import StreamShuffler, record_keys
from zephon.tokens.training import convert, finalize, rename_and_exclude, to_training_arrays

__all__ = [
    "ALGORITHMS",
    "Bin",
    "FallbackTokenizer",
    "MixerFlush",
    "MixtureBalancer",
    "PackedBins",
    "PackedRows",
    "Packer",
    "StreamShuffler",
    "build_aligned",
    "build_rows",
    "convert",
    "finalize",
    "quantize_shares",
    "record_keys",
    "rename_and_exclude",
    "to_training_arrays",
]
