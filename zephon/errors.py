"""Zephon's errors: one tree under ``ZephonError``.

Every error zephon raises on purpose derives from ``ZephonError``, and each also keeps the
builtin base that callers caught before it existed (``except ValueError`` around ``options()``,
``except RuntimeError`` around an iteration), by multiple inheritance::

    ZephonError
    ├── ConfigError (ValueError)          an option, argument or setting that cannot be used
    │   └── ConfigTypeError (TypeError)   ... because it has the wrong type
    ├── DataError (ValueError)            bad or unreadable data, naming dataset, shard, line/row
    │   ├── BadRecordError                    (io/formats/bad_records.py)
    │   ├── MissingFieldError (KeyError)      (ops/tokenize_input.py)
    │   ├── ConversationTypeError (TypeError) (ops/expand_chat.py)
    │   ├── ShardMissingError (FileNotFoundError)   (io/errors.py)
    │   └── StorageError (OSError)                  (io/errors.py)
    ├── CheckpointError (ValueError, RuntimeError)  a checkpoint refused, naming the field
    ├── OperatorError (RuntimeError)      an operator failed, naming it and the record
    │   └── UserFunctionError                 (ops/map_transform.py)
    ├── ValidationError (RuntimeError)    a user operator failed validation (``.report``)
    ├── EngineError (RuntimeError)        the engine cannot go on: a process ended, a frame is
    │   │                                 corrupt, a pipeline iterated twice at once
    │   ├── WorkerCrashedError                a worker died more often than retries allow
    │   └── ForkServerLost                    (engine/process/spawning.py, retried inside)
    └── ShmSpaceError (MemoryError)       /dev/shm cannot hold what the engine asked for

They live here, below every other module, so that any layer can raise them without importing
the layers above it. The old homes (``zephon.io.errors``, ``zephon.ops.errors``,
``zephon.validation``) hand the same classes on.
"""

from __future__ import annotations

from typing import Any


class ZephonError(Exception):
    """The base of every error zephon raises on purpose."""


class ConfigError(ZephonError, ValueError):
    """An option, builder argument or setting that cannot be used (a ``ValueError``)."""


class ConfigTypeError(ConfigError, TypeError):
    """An option, builder argument or setting of the wrong type (also a ``TypeError``)."""


class EngineError(ZephonError, RuntimeError):
    """The engine cannot go on: a process it started ended, a frame is corrupt, a pipeline is
    iterated twice at once (a ``RuntimeError``)."""


class WorkerCrashedError(EngineError):
    """A worker process died (signal, segfault, OOM kill) more often than retries allow."""


class ShmSpaceError(ZephonError, MemoryError):
    """/dev/shm cannot hold what the engine asked for."""


class DataError(ZephonError, ValueError):
    """Bad or unreadable data. ``dataset``, ``shard`` (file path or URL), ``line`` / ``row``
    (1-based, or None) say where; the message starts with them.

    Args:
        message: What is wrong.
        dataset: The dataset's name.
        shard: The shard's file path or URL.
        line: The 1-based line (JSONL).
        row: The 1-based row (Parquet, memory), when there is no line.
    """

    def __init__(
        self,
        message: str,
        *,
        dataset: str | None = None,
        shard: str | None = None,
        line: int | None = None,
        row: int | None = None,
    ) -> None:
        self.dataset = dataset
        self.shard = shard
        self.line = line
        self.row = row
        self.detail = message
        super().__init__(_format(message, dataset, shard, line, row))

    def __reduce__(self):  # keep the attributes when the error crosses a process boundary
        return (_rebuild, (type(self), self.detail, self.dataset, self.shard, self.line, self.row))


def _rebuild(cls, message, dataset, shard, line, row):
    return cls(message, dataset=dataset, shard=shard, line=line, row=row)


def _format(message: str, dataset, shard, line, row) -> str:
    where = []
    if dataset is not None:
        where.append(f"dataset {dataset!r}")
    if shard is not None:
        where.append(f"shard {shard}")
    if line is not None:
        where.append(f"line {line}")
    elif row is not None:
        where.append(f"row {row}")
    return f"{', '.join(where)}: {message}" if where else message


class CheckpointError(ZephonError, ValueError, RuntimeError):
    """A checkpoint that is malformed, tampered with or incompatible with this pipeline.

    ``field`` is the path of the offending entry (``lanes[3].base.ops[2].held.chunk_offset[17]``).
    It is a ``ValueError`` and a ``RuntimeError`` because restore used to raise both for the cases
    it already caught, and callers catch those.

    Args:
        field: The path of the offending entry ("" for the document as a whole).
        message: What is wrong with it.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"checkpoint {field}: {message}" if field else f"checkpoint: {message}")

    def __reduce__(self):
        return (CheckpointError, (self.field, self.message))


class OperatorError(ZephonError, RuntimeError):
    """An operator failed; ``op_name`` and, where known, ``sample_id`` say where.

    Args:
        op_name: The operator's name.
        sample_id: ``(dataset_id, shard_id, sample_idx)`` of the record at fault, or None.
        message: What went wrong.
    """

    def __init__(self, op_name: str, sample_id: Any, message: str) -> None:
        self.op_name = op_name
        self.sample_id = sample_id
        self.message = message
        where = f" on sample {sample_id}" if sample_id is not None else ""
        super().__init__(f"operator {op_name}{where}: {message}")

    def __reduce__(self):  # rebuilt from its parts: the operator is named once, not again
        return (OperatorError, (self.op_name, self.sample_id, self.message))


class ValidationError(ZephonError, RuntimeError):
    """A user operator failed validation; ``.report`` (a ``ValidationReport``) has the details.

    Args:
        report: The validation report.
    """

    def __init__(self, report: Any) -> None:
        self.report = report
        super().__init__(report.format())
