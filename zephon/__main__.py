"""Command line: ``python -m zephon {demo,bench,inspect,build-index} --help``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m zephon", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="generate a two-dataset corpus and run the seed pipeline on it",
                   add_help=False)
    sub.add_parser("bench", help="comparative benchmark runner (python -m zephon bench --help)",
                   add_help=False)
    sub.add_parser("inspect", help="shard count, rows, bytes and a few rows of a dataset",
                   add_help=False)
    sub.add_parser("build-index", help="write index.json for a JSONL or Parquet dataset",
                   add_help=False)
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        from zephon.demo import main as run
    elif cmd == "bench":
        from zephon.bench.runner import main as run
    elif cmd == "inspect":
        from zephon.io.inspector import inspect_main as run
    elif cmd == "build-index":
        from zephon.build_index import main as run
    else:
        parser.print_help(sys.stderr)
        print(f"\nunknown command {cmd!r}", file=sys.stderr)
        return 2
    return int(run(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
