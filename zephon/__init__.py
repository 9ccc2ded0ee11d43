"""Zephon: a high-throughput, deterministic data loader for training foundation models."""

from zephon.errors import CheckpointError
from zephon.pipeline import Pipeline
from zephon.state.checkpoint import merge_checkpoints
from zephon.types import SampleBatch

__version__ = "0.3.0.dev0"
__all__ = ["CheckpointError", "Pipeline", "SampleBatch", "merge_checkpoints", "__version__"]
