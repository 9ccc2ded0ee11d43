"""The README's Python snippets run, in order, against a generated local corpus."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def _snippets(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_snippets_run(corpus_dir, tokenizer_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("ZEPHON_NUM_WORKERS", "0")
    text = README.read_text()
    snippets = _snippets(text)
    assert len(snippets) >= 2
    namespace: dict = {}
    for code in snippets:
        code = (code.replace('"/data/code"', repr(str(corpus_dir / "code")))
                .replace('"/data/web"', repr(str(corpus_dir / "web")))
                .replace('"path/to/tokenizer.json"', repr(tokenizer_path)))
        exec(compile(code, str(README), "exec"), namespace)
