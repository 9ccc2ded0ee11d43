"""The examples of the Writing operators guide (docs/guides/operators.md) run, in order, as
written, in this process (the guide-page test runs them again as a script)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "operators.md"


def _examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)


@pytest.mark.filterwarnings("ignore::zephon.validation.ValidationWarning")
def test_guide_examples_run(monkeypatch, capsys):
    monkeypatch.setenv("ZEPHON_NUM_WORKERS", "0")  # the examples' default workers, inline
    blocks = _examples()
    assert len(blocks) >= 7
    namespace: dict = {"__name__": "user_operators_guide"}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"{GUIDE.name}[example {i}]", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"example {i} of {GUIDE.name} failed:\n{code}") from e
    assert "OP_NONDETERMINISTIC" in capsys.readouterr().out


def test_guide_covers_each_form():
    text = "\n".join(_examples())
    for form in ("map_transform(", "map_batch(", "stateful_transform(", "add_op(\"",
                 "add_op(WordIds", "validate()", "checkpoint()"):
        assert form in text, form
