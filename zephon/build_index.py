"""``build_index()`` and its command line: ``python -m zephon.build_index {jsonl|parquet} DIR``."""

from __future__ import annotations

import sys

from zephon.io.index_file import build_index, main

__all__ = ["build_index", "main"]

if __name__ == "__main__":
    sys.exit(main())
