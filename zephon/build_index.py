"""``build_index()`` and its command line: ``python -m zephon build-index {FORMAT|auto} DIR``.

``--tokenizer PATH`` (and ``--field NAME``, default ``text``) also measures the dataset's tokens
per record for that tokenizer, as a token-aware mixture's priming would
(``zephon/engine/priming/token_ratios.py``), and stores the figure in index.json, so that every node reading
the dataset starts without measuring. It is used by pipelines whose operators up to
``tokenize`` are exactly ``tokenize(tokenizer=PATH, field=NAME)`` with its defaults, and whose
``TokenEstimation`` has the default settings; any other pipeline measures (once per node).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from zephon.io.catalog.index_file import INDEX_NAME, build_index
from zephon.io.catalog.index_file import main as index_main

__all__ = ["build_index", "add_token_estimates", "main"]


def add_token_estimates(dataset_dir: str | os.PathLike, tokenizer: str, *, field: str = "text",
                        storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Measure the dataset at ``dataset_dir`` (which has an index.json) for ``tokenizer`` and
    store the figure in its index.json; returns the stored entry."""
    from zephon.engine.priming.token_ratios import estimate_key, measured_figure, sealed
    from zephon.io import Dataset
    from zephon.io.storage.location import Location
    from zephon.ops.fetch import FetchOp
    from zephon.ops.tokenize import TokenizeOp
    from zephon.work import TokenEstimation

    location = Location(os.fspath(dataset_dir), dict(storage_options or {}))
    ds = Dataset.from_path("index", dataset_dir, storage_options=storage_options)
    tok, te = TokenizeOp(tokenizer, field=field), TokenEstimation()
    key = estimate_key(ds, [], tok, te)
    doc = measured_figure(ds, 0, FetchOp([ds]), [], tok, te)
    index = json.loads(location.read_bytes(INDEX_NAME))
    index.setdefault("token_estimates", {})[key] = sealed(doc, key)
    data = json.dumps(index, indent=1).encode()
    if location.is_local:
        path = Path(location.path(INDEX_NAME))
        tmp = path.with_name(f"{path.name}.part-{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    else:
        location.fs.pipe_file(location.path(INDEX_NAME), data)
    return index["token_estimates"][key]


def main(argv: list[str] | None = None) -> int:
    """``build-index`` with ``--tokenizer PATH [--field NAME]``: the index, then the figure."""
    args = list(sys.argv[1:] if argv is None else argv)
    tokenizer = field = None
    rest: list[str] = []
    it = iter(args)
    for a in it:
        if a in ("--tokenizer", "--field"):
            value = next(it, None)
            if value is None:
                print(f"build-index: {a} needs a value", file=sys.stderr)
                return 1
            tokenizer, field = (value, field) if a == "--tokenizer" else (tokenizer, value)
        else:
            rest.append(a)
    if any(a in ("-h", "--help") for a in rest):
        index_main(rest)
        print("                                     [--tokenizer PATH [--field NAME]]")
        return 0
    code = index_main(rest)
    if code or tokenizer is None:
        return code
    positional = [a for a in rest if not a.startswith("--")]
    try:
        entry = add_token_estimates(positional[-1], tokenizer, field=field or "text")
    except Exception as e:  # the command line reports, it does not trace back
        print(f"build-index: measuring tokens failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"stored {entry['tokens_per_record']:.1f} tokens per record "
          f"(±{entry['precision']:.1%}) for {tokenizer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
