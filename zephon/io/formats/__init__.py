"""Shard formats: the ``ShardFormat`` protocol (base.py), the registry of formats (registry.py)
and one module per format with its reader."""
