"""The reference Zephon 0.2.0, installed from PyPI into a virtualenv of its own on first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REF_VERSION = "0.2.0"
# Set False (``--no-install``) to use the virtualenv only if it is already there; the first
# failure to make it is remembered so that every later cell does not try again.
INSTALL = True
_unavailable: list[str] = []


def venv_dir() -> Path:
    base = os.environ.get("ZEPHON_REF_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "zephon",
        f"ref-{REF_VERSION}")
    return Path(base)


def ensure_reference(log: Callable[[str], None] = print) -> Path | None:
    """Path of the reference venv's python, creating it if needed; None if it cannot be made."""
    vdir = venv_dir()
    py = vdir / "bin" / "python"
    marker = vdir / ".zephon-ref-ready"
    if marker.exists():
        return py
    if _unavailable:
        return None
    if not INSTALL:
        _unavailable.append(f"reference virtualenv not installed in {vdir} (--no-install)")
        return None
    log(f"creating the reference Zephon {REF_VERSION} virtualenv in {vdir} (first use) ...")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(vdir)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", f"zephon[parquet]=={REF_VERSION}",
                        "tokenizers", "transformers"], check=True)
    except (subprocess.CalledProcessError, OSError) as e:
        _unavailable.append(f"reference virtualenv unavailable: {e}")
        log(_unavailable[-1])
        return None
    marker.write_text(REF_VERSION)
    return py


def run_reference(cfg: dict, timeout: float = 900.0) -> list[dict]:
    """The runs ``ref_client.py`` measured inside the reference's virtualenv; a failure of the
    whole client comes back as one run holding its error."""
    py = ensure_reference()
    if py is None:
        return [{"error": _unavailable[-1] if _unavailable else "reference unavailable"}]
    client = Path(__file__).with_name("ref_client.py")
    # our ZEPHON_* settings mean nothing to the reference (and could mislead it)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZEPHON_")}
    try:
        proc = subprocess.run([str(py), "-I", str(client), json.dumps(cfg)], capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return [{"error": f"timed out after {timeout:.0f}s"}]
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()
        return [{"error": tail[-1] if tail else f"exit {proc.returncode}",
                 "stderr": "\n".join(tail[-20:])}]
    return json.loads(lines[-1])
