"""Write the README's benchmark table from a run's JSON (default ``docs/bench/bench.json``).

    python -m zephon bench --quick --out docs/bench && python benchmarks/readme_table.py

The table is generated, never typed: it carries the command, the date and the commit that
measured it, and ``tests/test_readme.py`` holds the README to the JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from zephon.bench.report import README_BEGIN, README_END, readme_table

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    bench = Path(argv[0]) if argv else ROOT / "docs" / "bench" / "bench.json"
    readme = ROOT / "README.md"
    text = readme.read_text()
    if README_BEGIN not in text or README_END not in text:
        print(f"{readme}: no generated table to replace (markers missing)", file=sys.stderr)
        return 1
    head, rest = text.split(README_BEGIN, 1)
    tail = rest.split(README_END, 1)[1]
    readme.write_text(head + readme_table(json.loads(bench.read_text())) + tail)
    print(f"wrote the table of {bench} into {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
