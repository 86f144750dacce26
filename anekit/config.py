"""Environment variables anekit reads: all of them, here and nowhere else."""

from __future__ import annotations

import os

ENV_BACKEND = "ANEKIT_BACKEND"


def env_backend() -> str | None:
    """The backend named by ``$ANEKIT_BACKEND``, or None when unset or empty."""
    value = os.environ.get(ENV_BACKEND, "").strip()
    return value or None
