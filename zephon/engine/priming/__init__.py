"""Token-aware mixtures: each dataset's tokens per byte, from a checkpoint, an index, the
node cache or a measurement through the pipeline's own operators."""
