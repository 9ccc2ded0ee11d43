"""What a dataset holds: discovery of shards and row counts, ``index.json``, and the rule that
every shard lies inside its dataset root."""
