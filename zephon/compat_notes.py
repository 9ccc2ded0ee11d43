"""Keywords of Zephon 0.2.0 that Zephon accepts and that change nothing here: said once each.

Code written for the reference passes ``placement=`` and ``parallelism=`` to builder methods.
Zephon places operators itself (stateless ones on every worker, stateful ones serially in lane
order) and sizes the worker pool with ``num_workers``, so those values cannot do what the
reference made them do. Refusing them would break that code; ignoring them in silence would let
a user believe a setting took effect. So a builder given one that differs from its default says
so once per keyword and process (``CompatibilityNote``, a ``UserWarning``), and runs.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["CompatibilityNote", "compat_keywords", "note_ignored"]

F = TypeVar("F", bound=Callable[..., Any])

_WHY = {
    "placement": "Zephon places operators itself: stateless operators run on every worker, "
                 "stateful ones serially in lane order",
    "parallelism": "every worker (num_workers, ZEPHON_NUM_WORKERS) runs all the stateless "
                   "operators; the value is only shown in explain()",
}
_SAID: set[str] = set()


class CompatibilityNote(UserWarning):
    """A keyword of Zephon 0.2.0 was given that has no effect in Zephon."""


def note_ignored(keyword: str, method: str) -> None:
    """Say once per process that ``keyword=`` (given to ``method``) has no effect here.

    Args:
        keyword: The keyword, ``"placement"`` or ``"parallelism"``.
        method: The builder method it was given to.
    """
    if keyword in _SAID:
        return
    _SAID.add(keyword)
    warnings.warn(f"zephon: {method}({keyword}=...) is accepted for compatibility with Zephon "
                  f"0.2.0 and has no effect: {_WHY[keyword]} (said once)", CompatibilityNote,
                  stacklevel=3)


def compat_keywords(*keywords: str) -> Callable[[F], F]:
    """Decorate a builder method whose ``keywords`` are accepted for compatibility only: a call
    that gives one a value other than its default is noted (``note_ignored``).

    Args:
        *keywords: Parameter names of the method (or keys its ``**kwargs`` may receive, whose
            default is then taken as ``"auto"`` for placement and ``None`` otherwise).
    """

    def wrap(method: F) -> F:
        sig = inspect.signature(method)
        var_kw = next((p.name for p in sig.parameters.values()
                       if p.kind is inspect.Parameter.VAR_KEYWORD), None)
        defaults = {k: (sig.parameters[k].default if k in sig.parameters
                        else ("auto" if k == "placement" else None)) for k in keywords}

        @functools.wraps(method)
        def builder(*args: Any, **kw: Any) -> Any:
            if len(args) > 1 or kw:
                given = sig.bind_partial(*args, **kw).arguments
                extra = given.get(var_kw, {}) if var_kw else {}
                for k in keywords:
                    value = given[k] if k in given and k != var_kw else extra.get(k, defaults[k])
                    if value is not None and value != defaults[k]:
                        note_ignored(k, method.__name__)
            return method(*args, **kw)

        return builder  # type: ignore[return-value]

    return wrap
