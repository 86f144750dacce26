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
