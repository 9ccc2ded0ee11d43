"""The engine: compiles a pipeline into a plan and runs it (inline, threads or worker processes),
puts results back in order, and takes and restores checkpoints. See ``docs/INTERNALS.md``."""
