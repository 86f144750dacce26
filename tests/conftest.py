"""Shared test configuration: hardware tests skip, with the reason, where there is no ANE."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from anekit.backends import ane

    ok, reason = ane.available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs an Apple Neural Engine: {reason}")
    for item in items:
        # the marker itself, not item.keywords: keywords also hold directory names (a checkout
        # in a directory called "ane" would skip every test)
        if item.get_closest_marker("ane") is not None:
            item.add_marker(skip)


@pytest.fixture
def ieee_numerics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reference kernels store fp16 as IEEE does (numerics "ideal", not the chip's profile).

    For tests of the op references against NumPy's float16, of IEEE inf and NaN, and of
    bit-identity with autograd or the previous executor (docs/numerics.md, "Migration").
    """
    monkeypatch.setenv("ANEKIT_NUMERICS", "ideal")
