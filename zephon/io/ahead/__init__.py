"""Look-ahead: work started before the read that wants it (shard prefetch into the node cache,
downloads ahead of an in-order reader, row groups decoded ahead on background threads)."""
