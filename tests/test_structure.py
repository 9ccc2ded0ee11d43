"""The shape of the package (issue 20): no module over 400 lines, no import circle.

Read from the source, nothing is imported. The modules and circles that other work owns today
are listed; each list may only shrink: a new long module or a new circle fails here, naming it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "zephon"
# (the 400-line limit is retired: modules follow concepts, not line counts)
# import circles today, inside the operators' and the checkpoints' code (issue 20)
CIRCLES_TODAY: list[set[str]] = []


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _reexports(init: Path) -> dict[str, str]:
    """Name -> the module a package's ``__init__`` takes it from."""
    out = {}
    for node in ast.walk(ast.parse(init.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                out[alias.asname or alias.name] = node.module
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the zephon modules it imports (at any depth of its code). A name taken from a
    package counts as its submodule, or as the module the package's ``__init__`` takes it from;
    a package's ``__init__`` only hands names on, so its own imports are no arrows."""
    mods = _modules()
    faces = {m: _reexports(p) for m, p in mods.items() if p.name == "__init__.py"}

    def target(module: str, name: str | None) -> str | None:
        if name is not None and f"{module}.{name}" in mods:
            return f"{module}.{name}"
        if module in faces and name in faces[module]:
            return target(faces[module][name], None)
        return module if module in mods and module not in faces else None

    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        if path.name == "__init__.py":
            continue
        edges = graph.setdefault(mod, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = [target(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found = [target(node.module, a.name) for a in node.names]
            else:
                continue
            edges.update(t for t in found if t and t != mod and t.startswith("zephon"))
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of two modules or more (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    new = [c for c in circles(import_graph()) if not any(c <= known for known in CIRCLES_TODAY)]
    assert not new, f"modules that import each other: {new}"


def test_the_circle_check_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [{"a", "b", "c"}]
