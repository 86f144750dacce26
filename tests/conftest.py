"""Shared test configuration: hardware tests skip, with the reason, where there is no ANE.

Tests marked ``ane`` (and ``isolated``) run each in a fresh process (``tests/isolation.py``),
and the session's caches (the ANE self-check's verdict, compiled CoreML models) go to a
private temporary directory, never the user's.
"""

from __future__ import annotations

import os
import tempfile

import pytest

pytest_plugins = ["tests.isolation"]


def pytest_configure(config: pytest.Config) -> None:
    from anekit import config as anekit_config

    if not os.environ.get(anekit_config.ENV_CACHE_DIR):
        cache = tempfile.mkdtemp(prefix="anekit-test-cache-")
        os.environ[anekit_config.ENV_CACHE_DIR] = cache  # children (isolated tests) inherit it


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
