"""Imported first by zephon's fork servers (``spawning.preload``), only there: gives the process
a name of its own, so that ``ps``, ``top`` and ``Pipeline.metrics_snapshot()["processes"]`` tell
the helper that forks replacement workers from the workers it forks (they rename themselves)."""

from zephon.engine.process.spawning import FORK_SERVER_NAME, name_process

name_process(FORK_SERVER_NAME)
