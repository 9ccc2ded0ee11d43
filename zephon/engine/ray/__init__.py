"""The Ray runner: the stateless stage in Ray actors (Ray is imported only when chosen)."""
