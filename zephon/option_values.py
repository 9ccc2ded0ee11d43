"""Reading option values alike from ``Pipeline.options(...)``, option objects and ``ZEPHON_*``.

Sizes (``shm_slot_bytes``, ``ZEPHON_CACHE_LIMIT``, ``CacheOptions.limit_bytes``, ...) go through
one parser wherever they come from: a whole number of bytes, or a string such as ``"512mb"``,
``"1.5 GiB"``, ``"4096"`` (binary multiples; k/m/g/t with an optional ``b`` or ``ib``).

Counts (``num_workers``, ``canonical_replicas``, ...) are ints. The environment holds only
strings, so a variable holds decimal digits; ``options()`` takes ints and refuses strings,
floats and bools (``canonical_replicas="1"`` or ``1.9`` would otherwise slip through an
``int()`` somewhere and quietly become 1).
"""

from __future__ import annotations

import numbers
import re
from typing import Any
from urllib.parse import urlsplit

__all__ = ["parse_size_bytes", "check_int", "parse_env_int", "parse_store_uri"]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE_RE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgt])(?:i?b)?|b)?$", re.IGNORECASE)
_INT_RE = re.compile(r"^[+-]?\d+$")
_SIZE_HINT = "a whole number of bytes or a string like '512mb', '50gb', '1.5tb'"


def parse_size_bytes(value: Any, name: str = "size") -> int | None:
    """``"50gb"`` -> 53687091200; ints pass through; None and ``""`` -> None (unset).

    Args:
        value: A whole number of bytes (an int, or a float with no fraction; not negative, not a
            bool), or a string: digits, optionally with a fraction and a unit ``k``, ``m``,
            ``g`` or ``t`` (binary multiples: ``"1.5gb"`` is 1.5 * 2**30, rounded down), with an
            optional ``b`` or ``ib``, any case, blanks around; ``"4096"`` and ``"4096b"`` are
            bytes and must be whole. None or a blank string: unset.
        name: The option or variable name that a ``ValueError`` says was wrong.

    Returns:
        The number of bytes, or None when unset.

    Raises:
        ValueError: Anything else (names ``name`` and the value).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise ValueError(f"{name} must be {_SIZE_HINT}, got {value!r}")
    if isinstance(value, numbers.Real):
        if value < 0 or value != int(value):
            raise ValueError(f"{name} must be {_SIZE_HINT}, got {value!r}")
        return int(value)
    text = value.strip()
    if not text:
        return None
    m = _SIZE_RE.match(text)
    if m is None:
        raise ValueError(f"{name}: cannot parse size {value!r}: expected {_SIZE_HINT}")
    number, unit = m.group(1), (m.group(2) or "").lower()
    if not unit and not number.isdigit():
        raise ValueError(f"{name}: cannot parse size {value!r}: a number of bytes is whole")
    return int(float(number) * _UNITS[unit])


def check_int(value: Any, name: str, minimum: int | None = None) -> int | None:
    """An int option given to ``options()`` (None: unset). Strings, floats and bools are
    refused: ``"2"`` is not 2 and ``1.9`` is not 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def parse_env_int(text: str, name: str, minimum: int | None = None) -> int:
    """An int from an environment variable: decimal digits (surrounding blanks allowed)."""
    stripped = str(text).strip()
    if not _INT_RE.match(stripped):
        raise ValueError(f"{name} must be a whole number, got {text!r}")
    return check_int(int(stripped), name, minimum)  # type: ignore[return-value]


def parse_store_uri(uri: Any) -> tuple[str, int] | None:
    """``"torch://"`` -> None (``MASTER_ADDR``/``MASTER_PORT`` when used), ``"torch://h:p"``
    -> (h, p). Anything else is refused with ``ValueError`` (``TypeError`` for non-strings)."""
    if not isinstance(uri, str):
        raise TypeError(f"aggregate_store must be a string such as 'torch://', got "
                        f"{type(uri).__name__}")
    parts = urlsplit(uri)
    if parts.scheme != "torch":
        raise ValueError(f"aggregate_store {uri!r}: only torch:// stores are supported")
    if parts.username or parts.password or parts.path not in ("", "/") or parts.query \
            or parts.fragment:
        raise ValueError(f"aggregate_store {uri!r}: give only torch:// or torch://host:port "
                         "(no credentials, path or query)")
    if not parts.netloc:
        return None
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or not 0 < port < 65536:
        raise ValueError(f"aggregate_store {uri!r}: needs host:port with a port in 1..65535")
    return parts.hostname, port
