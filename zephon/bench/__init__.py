"""The comparative benchmark runner behind ``python -m zephon bench``."""
