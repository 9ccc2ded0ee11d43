"""Where shard bytes come from: fsspec locations, the node-local shard cache (locks, durable
writes, private fallbacks) and checked downloads into it."""
