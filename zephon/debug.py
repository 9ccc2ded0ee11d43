"""Debugging aids: ``DatasetInspector`` reads raw rows of a dataset without a pipeline."""

from __future__ import annotations

from zephon.io.inspector import DatasetInspector, inspect_main

__all__ = ["DatasetInspector", "inspect_main"]
