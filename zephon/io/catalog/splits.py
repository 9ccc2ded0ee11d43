"""``split=``: the files of one split of a root laid out as the Hugging Face Hub lays them out.

The Hub names split files ``<split>-00000-of-00003.parquet`` (under ``data/`` or a config's
folder) or puts them in a folder named after the split (``default/train/0000.parquet``). A
root holding files of several such splits is refused without ``split=``: reading it whole would
mix the training data with the test data without a word. (``DatasetDict`` folders written by
``save_to_disk`` are the Arrow format's own index: formats/arrow.py.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["hub_splits", "in_split", "select_split"]

_HUB_FILE = re.compile(r"^(?P<split>[A-Za-z0-9_]+(?:[.-][A-Za-z0-9_]+)*?)-\d{5}-of-\d{5}\.")


def in_split(name: str, split: str) -> bool:
    """Whether ``name`` (relative to the root) belongs to ``split``: its file is named
    ``<split>.<ext>`` or ``<split>-NNNNN-of-NNNNN.<ext>``, or a folder on its path is ``split``."""
    parts = name.split("/")
    base = parts[-1]
    if split in parts[:-1] or base.startswith(f"{split}."):
        return True
    m = _HUB_FILE.match(base)
    return m is not None and m.group("split") == split


def hub_splits(names: Sequence[str]) -> list[str]:
    """The splits named by Hub-style file names (``train-00000-of-00002.parquet``), sorted."""
    found = {m.group("split") for n in names if (m := _HUB_FILE.match(n.rsplit("/", 1)[-1]))}
    return sorted(found)


def select_split(names: Sequence[str], split: str | None, where: str) -> list[str]:
    """``names`` of ``split``; without one, all of them unless they hold several Hub splits
    (ValueError naming them). ValueError when ``split`` matches no file."""
    if split is None:
        splits = hub_splits(names)
        if len(splits) > 1:
            raise ValueError(f"{where}: holds the splits {splits}; pass split= to read one")
        return list(names)
    kept = [n for n in names if in_split(n, split)]
    if not kept:
        found = hub_splits(names)
        raise ValueError(f"{where}: no files of split {split!r}"
                         + (f"; splits: {found}" if found else ""))
    return kept
