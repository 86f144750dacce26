"""Backends and their selection: ``compile(program, backend=None)`` returns a Kernel."""

from __future__ import annotations

import importlib
from typing import Any

from anekit import config
from anekit.backends.base import Kernel, TensorSpec
from anekit.errors import BackendUnavailable
from anekit.mil.program import Program

# name -> module exposing available() -> (bool, reason) and compile(program, **options) -> Kernel
BACKENDS: dict[str, str] = {
    "ane": "anekit.backends.ane",
    "reference": "anekit.backends.reference",
}

__all__ = ["BACKENDS", "Kernel", "TensorSpec", "available_backends", "compile", "resolve_backend"]


def _module(name: str) -> Any:
    return importlib.import_module(BACKENDS[name])


def available_backends() -> dict[str, str]:
    """Map every known backend to why it is or is not usable here."""
    return {name: _module(name).available()[1] for name in BACKENDS}


def _usable() -> tuple[str, ...]:
    return tuple(name for name in BACKENDS if _module(name).available()[0])


def resolve_backend(backend: str | None = None) -> str:
    """Pick a backend: the argument, else $ANEKIT_BACKEND, else "ane" if usable, else "reference"."""
    name = backend or config.env_backend()
    if name is None:
        return "ane" if _module("ane").available()[0] else "reference"
    if name not in BACKENDS:
        raise BackendUnavailable(
            f"unknown backend {name!r}; known backends: {', '.join(BACKENDS)}",
            backend=name,
            available=_usable(),
        )
    ok, reason = _module(name).available()
    if not ok:
        raise BackendUnavailable(
            f"backend {name!r} is unavailable: {reason}", backend=name, available=_usable()
        )
    return name


def compile(
    program: Program, backend: str | None = None, *, isolate: bool = False, **options: Any
) -> Kernel:
    """Compile a verified Program for a backend (see ``resolve_backend``) and return its Kernel.

    ``isolate=True`` hosts the kernel in a worker process recycled before the ANE's
    compile budget runs out (``recycle_after=`` sets how many compiles it takes;
    see :mod:`anekit.backends.worker`).
    """
    if not isinstance(program, Program):
        raise TypeError(f"compile() takes a mil.Program, found {type(program).__name__}")
    name = resolve_backend(backend)
    if isolate:
        from anekit.backends import worker

        return worker.compile(program, name, **options)
    return _module(name).compile(program, **options)
