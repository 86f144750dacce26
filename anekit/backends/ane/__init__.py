"""The ANE backend: AppleNeuralEngine.framework through PyObjC (macOS on Apple silicon only)."""

from __future__ import annotations

import platform
import sys
from typing import Any

from anekit.errors import BackendUnavailable

NAME = "ane"
FRAMEWORK = "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework"


def available() -> tuple[bool, str]:
    """Whether this machine can run the ANE backend, and why not."""
    if sys.platform != "darwin":
        return False, f"needs macOS on Apple silicon; this is {sys.platform} ({platform.machine()})"
    return False, "the ANE backend is not built yet"


def compile(program: Any, **options: Any) -> Any:
    """Compile a Program for the ANE."""
    ok, reason = available()
    raise BackendUnavailable(f"backend 'ane' is unavailable: {reason}", backend=NAME)
