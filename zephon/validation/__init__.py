"""The validation harness for user operators: ``pipeline.validate()`` and auto-validation.

harness.py feeds each ``add_op`` operator synthetic records and reports what breaks Zephon's
guarantees (nondeterminism, identity changes, grouping dependence); accumulator_checks.py
probes custom accumulators (records lost, duplicated, mixed across lanes, restores);
source_checks.py reads operators' code for writes to shared state and unseeded randomness.
"""

from zephon.validation.harness import (
    Issue,
    ValidationError,
    ValidationReport,
    ValidationWarning,
    auto_validate,
    validate_pipeline,
)

__all__ = ["Issue", "ValidationError", "ValidationReport", "ValidationWarning", "auto_validate",
           "validate_pipeline"]
