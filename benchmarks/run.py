"""The comparative benchmark runner, from a checkout: same as ``python -m zephon bench``.

    python benchmarks/run.py --quick --out docs/bench
    python benchmarks/run.py --help
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    # run from a checkout without installing: the repository root holds the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from zephon.bench.runner import main

    sys.exit(main(sys.argv[1:]))
