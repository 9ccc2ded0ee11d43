"""Before anything runs: the operator chain compiled into stages, the lanes a rank owns, the
memory plan, and the pipeline as its checkpoints see it."""
