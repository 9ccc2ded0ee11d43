"""Checkpoint state: cursors, recipes, held records, the checkpoint document, restore, gather.

Below ``zephon.ops`` (operators keep their held records in ``held_store`` and name them with
``refs``) and above blocks and work sources; it imports nothing from ``ops`` or ``engine``:
what it needs of a pipeline is handed in (``view.PipelineView``, ``restore.Rederive``).
"""
