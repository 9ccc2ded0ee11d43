"""The ledger of records not delivered whole: counts per dataset and reason, said once."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from zephon import accounting
from zephon.engine.observe import metrics


def test_counts_travel_with_the_operator_counters_and_are_named_by_dataset():
    accounting.LOCAL.take_delta()
    accounting.count("pack_flat", "oversized", np.array([0, 1, 1]), np.array([10, 20, 30]))
    accounting.count_tokens("pack_flat", "discarded_tokens", np.array([1]), np.array([7]))
    delta = metrics.LOCAL.take_delta()  # what a worker ships
    assert accounting.LOCAL.take_delta() == []
    coordinator = metrics.Registry()
    coordinator.merge(delta)  # ... and what the coordinator passes on with its own
    passed_on = metrics.LOCAL.take_delta()
    ledger = accounting.Ledger(["code", "web"])
    with pytest.warns(RuntimeWarning, match="pack_flat") as caught:
        ledger.merge(passed_on["losses"])
    assert len(caught) == 2  # one per (operator, reason)
    assert "web: 2 records, 50 tokens" in str(caught[0].message) + str(caught[1].message)
    snap = ledger.snapshot()
    assert snap["by_dataset"]["web"]["oversized"] == {"records": 2, "tokens": 50,
                                                     "operators": ["pack_flat"]}
    assert snap["by_dataset"]["web"]["discarded_tokens"]["tokens"] == 7
    assert snap["by_dataset"]["web"]["discarded_tokens"]["records"] == 0
    assert snap["records"] == 3 and snap["tokens"] == 67
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same reason again: counted, not warned again
        ledger.merge([("pack_flat", "oversized", 0, 1, 5)])
    assert ledger.snapshot()["by_dataset"]["code"]["oversized"]["records"] == 2
    assert "code" in ledger.summary()


def test_nothing_counted_means_no_summary():
    assert accounting.Ledger(["a"]).summary() is None
    assert accounting.Ledger(["a"]).snapshot() == {"by_dataset": {}, "records": 0, "tokens": 0}
