"""Every public name of the documented modules has an entry in the API reference, and every
callable's arguments are documented in its docstring (Google style), read the way the site's
generator reads them (griffe, statically)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

griffe = pytest.importorskip("griffe")  # installed with mkdocstrings[python] (the docs extra)

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
# module -> its reference page
PAGES = {"zephon": "zephon.md", "zephon.io": "io.md", "zephon.work": "work.md",
         "zephon.ops": "ops.md", "zephon.debug": "debug.md"}
# names that a module re-exports lazily (griffe cannot follow a module ``__getattr__``): the
# page documents them where they live, and says so
LAZY = {"zephon.io.DatasetInspector": "zephon.debug.DatasetInspector"}
PARAM_SECTIONS = {"parameters", "other parameters"}


def public_names(module: str) -> list[str]:
    return [n for n in importlib.import_module(module).__all__ if not n.startswith("__")]


@pytest.fixture(scope="module")
def collection():
    loader = griffe.GriffeLoader(search_paths=[str(ROOT)], docstring_parser=griffe.Parser.google)
    for module in PAGES:
        loader.load(module)
    loader.resolve_aliases(external=False)
    return loader.modules_collection


def documented_params(obj) -> tuple[set[str], bool]:
    """Names in the Args / Keyword Args sections, and whether a Keyword Args section exists."""
    names: set[str] = set()
    keyword_section = False
    for section in obj.docstring.parse(griffe.Parser.google) if obj.docstring else []:
        kind = section.kind.value
        if kind in PARAM_SECTIONS:
            names.update(p.name.lstrip("*") for p in section.value)
            keyword_section |= kind == "other parameters"
    return names, keyword_section


def undocumented_params(obj, params) -> list[str]:
    names, keyword_section = documented_params(obj)
    missing = []
    for p in params:
        if p.name in ("self", "cls") or p.name.startswith("_"):
            continue
        if p.kind.value == "variadic keyword" and keyword_section:
            continue  # the keywords are listed one by one
        if p.name not in names:
            missing.append(p.name)
    return missing


def problems_of(path: str, obj) -> list[str]:
    obj = obj.final_target if obj.is_alias else obj
    if not (obj.docstring and obj.docstring.value.strip()):
        return [f"{path}: no docstring"]
    out = []
    if obj.is_function:
        out += [f"{path}: argument {n!r} not in Args" for n in
                undocumented_params(obj, obj.parameters)]
    if obj.is_class:
        own_init = "__init__" in obj.members or "dataclass" in obj.labels
        if own_init:
            out += [f"{path}: argument {n!r} not in Args" for n in
                    undocumented_params(obj, obj.parameters)]
        for name, member in obj.all_members.items():  # inherited ones are documented too
            if name.startswith("_") or member.is_attribute or (
                    member.is_alias and not member.inherited):
                continue
            out += problems_of(f"{path}.{name}", member)
    return out


@pytest.mark.parametrize("module", sorted(PAGES))
def test_every_public_name_has_a_reference_entry(module):
    page = (REFERENCE / PAGES[module]).read_text()
    entries = set(re.findall(r"^::: ([\w.]+)\s*$", page, flags=re.M))
    missing = []
    for name in public_names(module):
        path = f"{module}.{name}"
        if path in LAZY:
            assert f"[{LAZY[path]}]" in page, f"{PAGES[module]} must point at {LAZY[path]}"
            continue
        if path not in entries:
            missing.append(path)
    assert not missing, f"add '::: NAME' entries to docs/reference/{PAGES[module]}: {missing}"


@pytest.mark.parametrize("module", sorted(PAGES))
def test_every_public_callable_documents_its_arguments(module, collection):
    problems = []
    for name in public_names(module):
        path = f"{module}.{name}"
        target = LAZY.get(path, path)
        owner, _, attr = target.rpartition(".")
        problems += problems_of(path, collection[owner][attr])
    assert not problems, "\n".join(problems)


def test_the_check_sees_a_missing_argument(collection):
    """The checker itself: a docstring that leaves out an argument is caught."""
    fn = griffe.Function("f", parameters=griffe.Parameters(
        griffe.Parameter("a", kind=griffe.ParameterKind.positional_or_keyword),
        griffe.Parameter("b", kind=griffe.ParameterKind.keyword_only)))
    fn.docstring = griffe.Docstring("Do it.\n\nArgs:\n    a: The a.\n", parent=fn)
    assert problems_of("f", fn) == ["f: argument 'b' not in Args"]
