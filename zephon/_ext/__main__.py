"""``python -m zephon._ext [--require-compiled]``: which implementation each kernel uses; with
``--require-compiled``, exit 1 when a kernel fell back to numpy where the build tools are
present (CI runs this after installing)."""

from __future__ import annotations

import sys

from zephon._ext import require_compiled, status


def main(argv: list[str]) -> int:
    for name, impl in status().items():
        print(f"{name}: {impl}")
    if "--require-compiled" in argv:
        try:
            require_compiled()
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
