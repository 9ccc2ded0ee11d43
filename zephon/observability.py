"""Observability configuration: tracking modes and metric sinks (log lines or statsd gauges)."""

from __future__ import annotations

import json
import logging
import socket
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from zephon.timing_stats import (
    FetchStageSummary,
    FetchTimingSummary,
    FetchTimingTotals,
    PrefetchTimingSummary,
    PrefetchTimingTotals,
)

__all__ = ["ExecutionTrackingMode", "FetchStageSummary", "FetchTimingSummary",
           "FetchTimingTotals", "MetricsSink", "MetricsSinkConfig", "MetricsSinkMode",
           "PrefetchTimingSummary", "PrefetchTimingTotals"]


class ExecutionTrackingMode(str, Enum):
    OFF = "off"
    STAGES = "stages"
    NODES = "nodes"


class MetricsSinkMode(str, Enum):
    LOG = "log"
    STATSD = "statsd"
    BOTH = "both"


@dataclass
class MetricsSinkConfig:
    mode: str = "log"
    namespace: str = "zephon.pipeline"
    statsd_host: str = "127.0.0.1"
    statsd_port: int = 8125
    default_tags: dict[str, str] = field(default_factory=dict)
    json_logs: bool = True
    max_batch_size: int = 32
    flush_interval_s: float = 5.0

    def __post_init__(self) -> None:
        self.mode = MetricsSinkMode(self.mode).value


class MetricsSink:
    """Emits a snapshot every ``flush_interval_s`` of delivery (called from the iterator)."""

    def __init__(self, config: MetricsSinkConfig) -> None:
        self.config = config
        self.last = time.monotonic()
        self.log = logging.getLogger(config.namespace)
        self._sock: socket.socket | None = None

    def maybe_emit(self, snapshot_fn) -> None:
        if time.monotonic() - self.last < self.config.flush_interval_s:
            return
        self.last = time.monotonic()
        self.emit(snapshot_fn())

    def emit(self, snap: dict[str, Any]) -> None:
        mode = self.config.mode
        if mode in ("log", "both"):
            if self.config.json_logs:
                self.log.info(json.dumps(_flat(snap), default=str))
            else:
                self.log.info("%s", _flat(snap))
        if mode in ("statsd", "both"):
            self._statsd(_flat(snap))

    def _statsd(self, flat: dict[str, Any]) -> None:
        if self._sock is None:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tags = ",".join(f"{k}:{v}" for k, v in self.config.default_tags.items())
        lines = []
        for k, v in flat.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                line = f"{self.config.namespace}.{k}:{v}|g"
                lines.append(line + (f"|#{tags}" if tags else ""))
        for i in range(0, len(lines), self.config.max_batch_size):
            payload = "\n".join(lines[i:i + self.config.max_batch_size]).encode()
            try:
                self._sock.sendto(payload, (self.config.statsd_host, self.config.statsd_port))
            except OSError:
                pass  # metrics must never break training


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out
