"""A test run against both implementations of a kernel: compiled, and its numpy twin.

``impl = twin_fixture("shuffle")`` in a test module gives its tests an ``impl`` fixture,
``"cython"`` (skipped when that extension is not built) then ``"numpy"``; the choice travels
through ``ZEPHON_DISABLE_EXT``, which ``zephon._ext.kernel`` reads at every call.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from zephon._ext import compiled


def twin_fixture(kernel: str):
    @pytest.fixture(params=["cython", "numpy"])
    def impl(request, monkeypatch):
        if request.param == "cython" and compiled(kernel) is None:
            pytest.skip(f"{kernel} extension not built")
        monkeypatch.setenv("ZEPHON_DISABLE_EXT", "1" if request.param == "numpy" else "0")
        return request.param

    return impl


def examples(n: int):
    """Hypothesis settings for ``n`` examples. The impl fixture only sets an environment
    variable, so sharing it across examples is safe."""
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
