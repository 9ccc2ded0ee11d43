"""Alias module for older imports (``from zephon.api import Pipeline``)."""

from zephon.pipeline import Pipeline
from zephon.types import SampleBatch, SampleMeta, SampleRecord

__all__ = ["Pipeline", "SampleBatch", "SampleMeta", "SampleRecord"]
