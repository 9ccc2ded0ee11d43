"""What a running pipeline is doing: operator counters, ``metrics_snapshot()``, the realised
mixture check and the start-up breakdown. Below every engine: they all report here."""
