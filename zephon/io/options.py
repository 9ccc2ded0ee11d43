"""Storage options: the node-local shard cache, the Parquet row-group cache, remote reads.

The option objects accept the reference's names and defaults. Each remembers which fields were
given explicitly, so ``a.merged(b)`` (and ``Pipeline.options`` called twice) lets only the
explicitly supplied fields of ``b`` override ``a``. Environment variables fill what options leave
unset: ``ZEPHON_CACHE_DIR``, ``ZEPHON_CACHE_LIMIT`` (e.g. ``"50gb"``), ``ZEPHON_RG_CACHE_BYTES``,
``ZEPHON_REMOTE_READS`` (``auto`` | ``whole`` | ``ranges``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from zephon.option_values import check_int, parse_size_bytes

__all__ = [
    "CacheOptions",
    "ParquetRGCacheOptions",
    "StoreOptions",
    "parse_size_bytes",
    "ResolvedStore",
    "resolve_store",
]

REMOTE_READS = ("auto", "whole", "ranges")


class _Options:
    """Keyword-only option record that remembers which fields were supplied."""

    _defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(self._defaults))
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown option(s) {unknown}; "
                            f"known: {sorted(self._defaults)}")
        for name, default in self._defaults.items():
            object.__setattr__(self, name, self._check(name, kwargs.get(name, default)))
        object.__setattr__(self, "_given", frozenset(kwargs))

    def _check(self, name: str, value: Any) -> Any:
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; use .merged({name}=...)")

    @classmethod
    def coerce(cls, value: Any) -> Any:
        """An instance from an instance, a dict of fields, or None (all defaults).

        Args:
            value: The instance, dict or None.

        Returns:
            The options.

        Raises:
            TypeError: Anything else.
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            return cls(**value)
        raise TypeError(f"expected {cls.__name__}, dict or None, got {type(value).__name__}")

    def merged(self, other: Any = None, **kwargs: Any) -> Any:
        """A copy where the explicitly supplied fields of ``other`` / ``kwargs`` override.

        Args:
            other: Options (instance or dict) whose supplied fields win.
            **kwargs: Fields that win over both.

        Returns:
            The new options; this one is unchanged (options are immutable).
        """
        update = {}
        if other is not None:
            other = self.coerce(other)
            update = {k: getattr(other, k) for k in other._given}
        update.update(kwargs)
        fields = {k: getattr(self, k) for k in self._given}
        for k, v in update.items():
            if isinstance(v, _Options) and isinstance(fields.get(k), _Options):
                v = fields[k].merged(v)
            fields[k] = v
        return type(self)(**fields)

    def to_dict(self) -> dict[str, Any]:
        """Every field's effective value (nested options as dicts)."""
        return {k: (v.to_dict() if isinstance(v, _Options) else v)
                for k, v in ((k, getattr(self, k)) for k in self._defaults)}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:  # consistent with __eq__, which compares effective values
        return hash(repr(sorted(self.to_dict().items())))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._defaults if k in self._given)
        return f"{type(self).__name__}({shown})"

    def __reduce__(self):
        return (_rebuild, (type(self), {k: getattr(self, k) for k in self._given}))


def _rebuild(cls, fields):
    return cls(**fields)


class CacheOptions(_Options):
    """Node-local shard cache. ``enabled=None`` (our default) means on; an explicit ``root`` or
    ``limit_bytes`` also turns it on; ``enabled=False`` gives each process a private temporary
    cache instead of the shared one.

    Keyword Args:
        enabled (bool | None): None or True: the shared cache; False: a private one per process.
        root (str | None): The cache directory (default ``$ZEPHON_CACHE_DIR``, else
            ``$XDG_CACHE_HOME/zephon``, else ``~/.cache/zephon``).
        limit_bytes (int | str | None): Size limit, e.g. ``"50gb"`` (default ``$ZEPHON_CACHE_LIMIT``, else none);
            least recently used shards are evicted.
        download_retry (int): Attempts of a download (at least 1).
        download_timeout (float | None): Seconds a download may take.
        open_retry_attempts (int): Attempts to open a remote file.
        open_retry_initial_backoff (float): First wait between those attempts, in seconds.
        open_retry_max_backoff (float): Longest wait between them.
        min_slack_bytes (int | str): Least room an eviction frees beyond what is needed.
        max_slack_bytes (int | str): Most room an eviction frees beyond what is needed.
        rg_cache_bytes (int | str | None): Old name of ``ParquetRGCacheOptions.limit_bytes``.
        keep_zip (bool): Accepted for compatibility.
        validate_hash (bool | None): Accepted for compatibility.
    """

    _defaults: ClassVar[dict[str, Any]] = {
        "enabled": None,
        "root": None,  # None -> $ZEPHON_CACHE_DIR, else $XDG_CACHE_HOME/zephon, else ~/.cache/zephon
        "limit_bytes": None,  # None -> $ZEPHON_CACHE_LIMIT, else unlimited
        "keep_zip": False,
        "validate_hash": None,  # None/True: check downloads against the store's MD5 (ETag)
        "download_retry": 12,
        "download_timeout": 180.0,
        "open_retry_attempts": 5,
        "open_retry_initial_backoff": 0.1,
        "open_retry_max_backoff": 2.0,
        "min_slack_bytes": 512 << 10,
        "max_slack_bytes": 64 << 20,
        "rg_cache_bytes": None,  # deprecated alias of ParquetRGCacheOptions.limit_bytes
    }

    def _check(self, name: str, value: Any) -> Any:
        if name in ("limit_bytes", "min_slack_bytes", "max_slack_bytes", "rg_cache_bytes"):
            return parse_size_bytes(value, f"CacheOptions.{name}")
        if name in ("download_retry", "open_retry_attempts"):
            if value is None:
                raise ValueError(f"CacheOptions.{name} must be an int >= 1, got None")
            return check_int(value, f"CacheOptions.{name}", 1)
        if name == "download_timeout" and value is not None and float(value) <= 0:
            raise ValueError(f"CacheOptions.download_timeout must be > 0, got {value!r}")
        return value


class ParquetRGCacheOptions(_Options):
    """Decoded Parquet row groups kept per process (an in-memory LRU in this implementation).

    Keyword Args:
        enabled (bool | None): False keeps no decoded row group.
        limit_bytes (int | str | None): Bytes of decoded row groups per process (default
            ``$ZEPHON_RG_CACHE_BYTES``, else 256 MiB).
        root (str | None): Accepted for compatibility (the cache is in memory).
        min_free_bytes (int | str): Accepted for compatibility.
    """

    _defaults: ClassVar[dict[str, Any]] = {
        "enabled": None,
        "root": None,
        "limit_bytes": None,  # None -> $ZEPHON_RG_CACHE_BYTES, else 256 MiB per process
        "min_free_bytes": 1 << 30,
    }

    def _check(self, name: str, value: Any) -> Any:
        if name in ("limit_bytes", "min_free_bytes"):
            return parse_size_bytes(value, f"ParquetRGCacheOptions.{name}")
        return value


class StoreOptions(_Options):
    """Everything the dataset layer can be told; give it as ``options(io_options=...)`` or
    ``Dataset.with_store_options``.

    Keyword Args:
        cache (CacheOptions | dict | None): ``CacheOptions`` (or a dict of them).
        parquet_rg_cache (ParquetRGCacheOptions | dict | None): ``ParquetRGCacheOptions`` (or a dict of them).
        remote_reads (str | None): ``"auto"`` (whole JSONL shards into the cache; Parquet row groups by byte
            range until half a shard has been fetched, then the whole shard), ``"whole"`` or
            ``"ranges"`` (default ``$ZEPHON_REMOTE_READS``, else ``"auto"``).
        vortex_read_concurrency (int | None): Accepted for compatibility.
        vortex_segment_cache_bytes (int | str): Accepted for compatibility.
    """

    _defaults: ClassVar[dict[str, Any]] = {
        "cache": None,
        "parquet_rg_cache": None,
        "vortex_read_concurrency": None,
        "vortex_segment_cache_bytes": 256 << 20,
        "remote_reads": None,  # None -> $ZEPHON_REMOTE_READS, else "auto"
    }

    def _check(self, name: str, value: Any) -> Any:
        if name == "cache":
            return CacheOptions.coerce(value)
        if name == "parquet_rg_cache":
            return ParquetRGCacheOptions.coerce(value)
        if name == "vortex_read_concurrency":
            return check_int(value, "StoreOptions.vortex_read_concurrency", 1)
        if name == "vortex_segment_cache_bytes":
            value = parse_size_bytes(value, "StoreOptions.vortex_segment_cache_bytes")
            if value is None or value < 0:
                raise ValueError("vortex_segment_cache_bytes must be non-negative")
        if name == "remote_reads" and value is not None and value not in REMOTE_READS:
            raise ValueError(f"remote_reads must be one of {REMOTE_READS}, got {value!r}")
        return value


@dataclass(frozen=True)
class ResolvedStore:
    """Options after environment and defaults are applied: what the readers actually use."""

    cache_root: Path | None  # None: private per-process temporary cache
    cache_limit: int | None
    download_retry: int
    download_timeout: float | None
    open_retry_attempts: int
    open_retry_initial_backoff: float
    open_retry_max_backoff: float
    min_slack_bytes: int
    max_slack_bytes: int
    rg_cache_bytes: int
    remote_reads: str
    validate_hash: bool = True  # False: downloads are checked by size only (no MD5 to compute)


def default_cache_root() -> Path:
    env = os.environ.get("ZEPHON_CACHE_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "zephon"


def resolve_store(options: StoreOptions | dict | None = None) -> ResolvedStore:
    opts = StoreOptions.coerce(options)
    cache: CacheOptions = opts.cache
    rg: ParquetRGCacheOptions = opts.parquet_rg_cache
    enabled = cache.enabled
    if enabled is None or "root" in cache._given or "limit_bytes" in cache._given:
        enabled = enabled is not False
    root = Path(cache.root).expanduser() if cache.root else default_cache_root()
    limit = cache.limit_bytes
    if limit is None:
        limit = parse_size_bytes(os.environ.get("ZEPHON_CACHE_LIMIT", ""), "ZEPHON_CACHE_LIMIT")
    rg_bytes = rg.limit_bytes if rg.limit_bytes is not None else cache.rg_cache_bytes
    if rg_bytes is None:
        rg_bytes = parse_size_bytes(os.environ.get("ZEPHON_RG_CACHE_BYTES", ""),
                                    "ZEPHON_RG_CACHE_BYTES")
        if rg_bytes is None:
            rg_bytes = 256 << 20
    if rg.enabled is False:
        rg_bytes = 0
    reads = opts.remote_reads or os.environ.get("ZEPHON_REMOTE_READS", "").strip() or "auto"
    if reads not in REMOTE_READS:
        raise ValueError(f"ZEPHON_REMOTE_READS must be one of {REMOTE_READS}, got {reads!r}")
    return ResolvedStore(
        cache_root=root if enabled else None,
        cache_limit=limit,
        download_retry=int(cache.download_retry),
        download_timeout=None if cache.download_timeout is None else float(cache.download_timeout),
        open_retry_attempts=int(cache.open_retry_attempts),
        open_retry_initial_backoff=float(cache.open_retry_initial_backoff),
        open_retry_max_backoff=float(cache.open_retry_max_backoff),
        min_slack_bytes=int(cache.min_slack_bytes or 0),
        max_slack_bytes=int(cache.max_slack_bytes or 0),
        rg_cache_bytes=int(rg_bytes),
        remote_reads=reads,
        validate_hash=cache.validate_hash is not False,
    )
