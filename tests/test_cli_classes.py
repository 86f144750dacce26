"""``anekit classes``: says clearly, with exit 1, that it needs macOS and the framework."""

from __future__ import annotations

import pytest

from anekit import cli
from anekit.backends import ane


def test_classes_says_clearly_it_needs_macos(capsys: pytest.CaptureFixture[str]) -> None:
    ok, reason = ane.available()
    if ok:
        pytest.skip("this machine has the framework")
    assert cli.main(["classes"]) == 1
    err = capsys.readouterr().err
    assert "needs macOS" in err and reason in err
