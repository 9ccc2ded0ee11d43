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


@pytest.mark.parametrize("workers", [0, 2])
def test_the_last_short_batch_is_kept_and_counted_when_dropped(workers):
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import StaticMixtureWorkSource

    def pipeline(**kw):
        ds = Dataset.from_dict("d", {0: [{"text": f"doc {i}"} for i in range(25)]})
        ws = StaticMixtureWorkSource([ds], {"d": 1.0}, seed=0)
        return Pipeline(ws).batch(10, **kw).options(num_workers=workers)

    kept = pipeline()
    assert [len(b) for b in kept] == [10, 10, 5]  # the default delivers the tail
    assert kept.metrics_snapshot()["losses"]["records"] == 0
    kept.close()
    dropped = pipeline(drop_last=True)
    with pytest.warns(RuntimeWarning, match="short_batch"):
        sizes = [len(b) for b in dropped]
    assert sizes == [10, 10]
    losses = dropped.metrics_snapshot()["losses"]
    dropped.close()
    assert losses["by_dataset"]["d"]["short_batch"]["records"] == 5


def test_a_loss_counted_in_every_pass_says_how_often_the_dataset_was_read(tmp_path, caplog):
    """One bad line in a small dataset read three times over is skipped three times: the
    end-of-run line says so, instead of leaving "code: 3 records" to puzzle over."""
    import json
    import logging

    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import StaticMixtureWorkSource

    (tmp_path / "code").mkdir()
    with open(tmp_path / "code" / "a.jsonl", "wb") as f:
        for i in range(9):
            f.write((json.dumps({"text": f"code {i}"}) + "\n").encode())
        f.write(b'{"text": "bad \xff bytes"}\n')
    web = Dataset.from_dict("web", {0: [{"text": f"web {i}"} for i in range(90)]})
    code = Dataset.from_path("code", tmp_path / "code", on_bad_record="skip")
    ws = StaticMixtureWorkSource([code, web], {"code": 0.25, "web": 0.75}, seed=0)
    p = Pipeline(ws).batch(8).options(num_workers=0)
    with caplog.at_level(logging.WARNING, logger="zephon"), \
            pytest.warns(RuntimeWarning, match="bad_record"):
        list(p)
    lost = p.metrics_snapshot()["losses"]["by_dataset"]["code"]["bad_record"]["records"]
    assert lost == 3
    (line,) = [r.getMessage() for r in caplog.records if "not delivered whole" in r.getMessage()]
    assert "code: 3 records" in line and "read over again: code 3.0 times" in line
