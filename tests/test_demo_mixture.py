"""``python -m zephon demo`` prints the realised mixture against the target, per dataset."""

from __future__ import annotations

import re

import pytest

from zephon import demo


def test_demo_prints_realised_against_target_per_dataset(capsys):
    pytest.importorskip("tokenizers")
    assert demo.main(["--docs", "600", "--workers", "0", "--max-length", "257", "--show", "1"]) == 0
    out = capsys.readouterr().out
    rows = {name: (float(target), float(realised)) for name, target, realised in re.findall(
        r"^\s+(code|web)\s+target (0\.\d+)\s+realised (0\.\d+)", out, re.M)}
    assert rows.keys() == {"code", "web"}
    assert rows["code"][0] == 0.25 and rows["web"][0] == 0.75
    assert abs(rows["code"][1] + rows["web"][1] - 1) < 0.002
    assert abs(rows["code"][1] - 0.25) < 0.05
    assert "not delivered: 0 records, 0 tokens" in out
