"""Classes assembled from bases document what they inherit, and their reference pages show it:
``Pipeline`` (its builder methods live in ``zephon.record_builders`` / ``zephon.token_builders``)
and ``BaseOp`` (``setup`` and ``op_name`` come from the operator contract, ``Operator``)."""

from __future__ import annotations

import re

import pytest
from test_docs_api import REFERENCE, collection, problems_of  # noqa: F401 (collection: a fixture)

# class -> (its reference page, the inherited members it shows: None for all of them)
INHERITED = {"zephon.pipeline.Pipeline": ("zephon.md", "zephon.Pipeline", None),
             "zephon.ops.base.BaseOp": ("ops.md", "zephon.ops.BaseOp", ("setup", "op_name"))}


@pytest.mark.parametrize("path", sorted(INHERITED))
def test_inherited_members_are_documented_and_shown(path, collection):  # noqa: F811
    page, entry, names = INHERITED[path]
    owner, _, name = path.rpartition(".")
    cls = collection[owner][name]
    inherited = {k: v for k, v in cls.inherited_members.items()  # callables, as test_docs_api
                 if not k.startswith("_") and not v.final_target.is_attribute}
    assert inherited, f"{path} inherits nothing: this test has nothing to check"
    chosen = inherited if names is None else {k: inherited[k] for k in names if k in inherited}
    assert chosen
    problems = [p for k, member in sorted(chosen.items())
                for p in problems_of(f"{path}.{k}", member)]
    assert not problems, "\n".join(problems)
    text = (REFERENCE / page).read_text()
    block = re.search(rf"^::: {re.escape(entry)}\n((?:    .*\n)*)", text, flags=re.M)
    assert block, f"no entry for {entry} in {page}"
    want = "inherited_members: true" if names is None else \
        f"inherited_members: [{', '.join(names)}]"
    assert want in block.group(1), f"{page}: {entry} must show its inherited members ({want})"
