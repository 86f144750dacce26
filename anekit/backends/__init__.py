"""Backends and their selection: ``compile(program, backend=None)`` returns a Kernel."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from anekit import config
from anekit.backends.base import Buffer, BufferSet, Kernel, TensorSpec
from anekit.errors import BackendUnavailable
from anekit.mil.program import Program

# name -> module exposing available() -> (bool, reason) and compile(program, **options) -> Kernel;
# a module may also expose default_ready() -> (bool, reason): whether the default order may
# pick it (the ANE's cached self-check), beyond merely being available.
BACKENDS: dict[str, str] = {
    "ane": "anekit.backends.ane",
    "coreml": "anekit.backends.coreml",
    "reference": "anekit.backends.reference",
}
# The order compile(backend=None) tries them in: the private route if its self-check passed
# on this macOS build, else Apple's public one, else the reference (docs/coreml.md).
DEFAULT_ORDER = ("ane", "coreml", "reference")

__all__ = [
    "BACKENDS",
    "Buffer",
    "BufferSet",
    "Capabilities",
    "Kernel",
    "TensorSpec",
    "available_backends",
    "capabilities",
    "choose_backend",
    "compile",
    "compile_budget",
    "resolve_backend",
]


def _module(name: str) -> Any:
    return importlib.import_module(BACKENDS[name])


def available_backends() -> dict[str, str]:
    """Map every known backend to why it is or is not usable here."""
    return {name: _module(name).available()[1] for name in BACKENDS}


def _usable() -> tuple[str, ...]:
    return tuple(name for name in BACKENDS if _module(name).available()[0])


def _check_known(name: str) -> None:
    if name not in BACKENDS:
        raise BackendUnavailable(
            f"unknown backend {name!r}; known backends: {', '.join(BACKENDS)}",
            backend=name,
            available=_usable(),
        )


Skipped = tuple[tuple[str, str], ...]


def choose_backend(backend: str | None = None) -> tuple[str, Skipped, str]:
    """The backend to use, the ``(name, reason)`` of each default passed over, and how it was chosen.

    The argument, else ``$ANEKIT_BACKEND`` ("asked for": BackendUnavailable if it cannot
    run), else the first of :data:`DEFAULT_ORDER` that is ready here ("default order").
    """
    name = backend or config.env_backend()
    if name is not None:
        _check_known(name)
        ok, reason = _module(name).available()
        if not ok:
            raise BackendUnavailable(
                f"backend {name!r} is unavailable: {reason}", backend=name, available=_usable()
            )
        return name, (), "asked for" if backend else f"asked for by ${config.ENV_BACKEND}"
    skipped: list[tuple[str, str]] = []
    for candidate in DEFAULT_ORDER:
        ok, reason = _ready(candidate)
        if ok:
            return candidate, tuple(skipped), "default order"
        skipped.append((candidate, reason))
    raise BackendUnavailable(f"no backend can run here: {dict(skipped)}")


def _ready(name: str) -> tuple[bool, str]:
    """Whether the default order may pick ``name``: available, and its own readiness check."""
    module = _module(name)
    ok, reason = module.available()
    ready = getattr(module, "default_ready", None)
    if ok and ready is not None:
        return ready()
    return ok, reason


def resolve_backend(backend: str | None = None) -> str:
    """Pick a backend: the argument, else $ANEKIT_BACKEND, else the default order's first."""
    return choose_backend(backend)[0]


@dataclass(frozen=True)
class Capabilities:
    """What a backend declares about itself, so that no code outside ``backends/`` tests its name.

    Attributes:
        compile_budget: compiles one process can make before it must be replaced (the ANE's,
            ANE_NOTES 2.4); None: no limit. Declared as ``COMPILE_BUDGET``.
        host_fp16: host arrays holding fp16 cost nothing per call (the ANE's buffers are fp16);
            otherwise fp16 values held as float32 do (the reference computes in float32).
            Declared as ``HOST_FP16``.
        shared_buffer_options: compile options a kernel needs for its buffers to be bound into
            other kernels' sets (``share=``). Declared as ``SHARED_BUFFER_OPTIONS``.
    """

    compile_budget: int | None
    host_fp16: bool
    shared_buffer_options: Mapping[str, Any]


def capabilities(name: str) -> Capabilities:
    """The capabilities backend ``name``'s module declares (absent ones: none)."""
    _check_known(name)
    module = _module(name)
    return Capabilities(
        getattr(module, "COMPILE_BUDGET", None),
        getattr(module, "HOST_FP16", False),
        dict(getattr(module, "SHARED_BUFFER_OPTIONS", {})),
    )


def compile_budget(name: str) -> int | None:
    """How many compiles one process can make on a backend before it must be replaced; None: no limit."""
    return capabilities(name).compile_budget


def compile(
    program: Program,
    backend: str | None = None,
    *,
    isolate: bool | str = False,
    **options: Any,
) -> Kernel:
    """Compile a verified Program for a backend (see ``resolve_backend``) and return its Kernel.

    ``isolate=True`` hosts the kernel in a worker process recycled before the ANE's
    compile budget runs out (``recycle_after=`` sets how many compiles it takes;
    see :mod:`anekit.backends.worker`). ``isolate="auto"`` does so only on a backend
    that declares a compile budget (:func:`compile_budget`): the ANE, not the reference.
    """
    if not isinstance(program, Program):
        raise TypeError(f"compile() takes a mil.Program, found {type(program).__name__}")
    program.require_weights("compile")  # before any backend or worker does work
    name, skipped, chosen_by = choose_backend(backend)
    if _isolates(name, isolate):
        from anekit.backends import worker

        kernel = worker.compile(program, name, **options)
    else:
        kernel = _module(name).compile(program, **options)
    kernel.placement = kernel.placement.chosen(skipped, chosen_by)
    return kernel


def _isolates(name: str, isolate: bool | str) -> bool:
    if isolate == "auto":
        return compile_budget(name) is not None
    if isinstance(isolate, bool):
        return isolate
    raise ValueError(f"compile(isolate=...): expected True, False or 'auto', found {isolate!r}")
