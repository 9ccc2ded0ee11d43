"""Source checks of the validation harness: hints, not proofs, so they only warn.

They read ``process_many`` (and ``process_one``) and flag what usually makes an operator's output
depend on more than its argument: writing to ``self`` or to enclosing / global variables, and
randomness or clocks that no seed pins down.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

from zephon.ops.base import BaseOp

_MUTATORS = {"append", "extend", "add", "update", "pop", "popitem", "setdefault", "insert",
             "clear", "remove", "discard", "__setitem__"}
# calls whose result is not a function of the arguments: anything under these modules ...
_UNSEEDED_MODULES = [("random",), ("np", "random"), ("numpy", "random"), ("secrets",)]
# ... and these functions (a seeded constructor such as random.Random(0) is fine)
_UNSEEDED_CALLS = {("uuid", "uuid1"), ("uuid", "uuid4"), ("os", "urandom"), ("time", "time"),
                   ("time", "time_ns"), ("time", "perf_counter")}
_SEEDABLE = {"Random", "default_rng", "RandomState", "Generator", "SeedSequence", "PCG64"}


def _functions(op: Any) -> list[Callable]:
    inner = op.inner
    if op.function_form:
        return [f for f in (inner.fn, inner.fn_one) if f is not None]
    fns = [type(inner).process_many]
    if type(inner).process_one is not BaseOp.process_one:
        fns.append(type(inner).process_one)
    return fns


def _tree(fn: Callable) -> ast.AST | None:
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        return ast.parse(src)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None  # builtins, lambdas inside a larger expression, generated code


def _dotted(node: ast.AST) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return tuple(reversed(parts))
    return ()


def _self_target(node: ast.AST) -> str | None:
    while isinstance(node, ast.Subscript):
        node = node.value
    d = _dotted(node)
    return ".".join(d) if len(d) >= 2 and d[0] == "self" else None


def _findings(tree: ast.AST) -> Iterator[tuple[str, str]]:
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            name = _self_target(t)
            if name:
                yield "OP_WRITES_SELF", f"process_many writes {name}"
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            kind = "global" if isinstance(node, ast.Global) else "nonlocal"
            yield "OP_WRITES_SHARED_STATE", f"process_many declares {kind} {', '.join(node.names)}"
        if isinstance(node, ast.Call):
            d = _dotted(node.func)
            if len(d) >= 2 and d[-1] in _MUTATORS and _self_target(node.func.value):
                yield "OP_WRITES_SELF", f"process_many mutates {'.'.join(d[:-1])}"
            if d and d[-1] in _SEEDABLE and (node.args or node.keywords):
                continue
            unseeded = d in _UNSEEDED_CALLS or any(
                d[: len(m)] == m and len(d) > len(m) for m in _UNSEEDED_MODULES)
            if unseeded:
                yield "OP_UNSEEDED_RANDOM", f"process_many calls {'.'.join(d)}()"


def static_issues(op: Any) -> list[tuple[str, str]]:
    """(code, message) warnings for the operator's process_many / process_one source."""
    out: list[tuple[str, str]] = []
    for fn in _functions(op):
        tree = _tree(fn)
        if tree is None:
            continue
        for code, message in _findings(tree):
            if (code, message) not in out:
                out.append((code, message))
    return out
