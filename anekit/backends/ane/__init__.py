"""The ANE backend: AppleNeuralEngine.framework through PyObjC (macOS on Apple silicon only).

``compile(program)`` runs the in-memory path (:mod:`.inmemory`, ANE_NOTES 2.1);
``compile_mlmodelc(path)`` runs a CoreML-compiled model through ``_ANEClient``
(:mod:`.client`, ANE_NOTES 2.2). Both return kernels on zero-copy IOSurfaces.
Importing this package never imports PyObjC; ``available()`` loads the framework
only on macOS/arm64 and says why it cannot where it cannot.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from anekit.backends.ane import framework as _framework
from anekit.backends.budget import DEFAULT_LIMIT as COMPILE_BUDGET  # isolate="auto" reads it
from anekit.mil.program import Program

NAME = "ane"
DEFAULT_QOS = 21  # the QoS every published client uses (ANE_NOTES 2.1)

__all__ = ["COMPILE_BUDGET", "DEFAULT_QOS", "NAME", "available", "compile", "compile_mlmodelc"]


def available() -> tuple[bool, str]:
    """Whether this machine can run the ANE backend, and why not."""
    reason = _framework.problem()
    if reason is not None:
        return False, reason
    fw = _framework.load()
    return True, (
        f"AppleNeuralEngine.framework via PyObjC {fw.pyobjc_version} "
        f"(macOS {platform.mac_ver()[0]}, {platform.machine()})"
    )


def compile(
    program: Program,
    *,
    qos: int = DEFAULT_QOS,
    pack_inputs: bool = True,
    stats: bool = False,
    framework: Any = None,
) -> Any:
    r"""Compile and load a Program on the ANE through the in-memory path.

    Args:
        program (Program): the verified program.
        qos (int): QoS passed to every framework call. Default: 21.
        pack_inputs (bool): rewrite a multi-input program to one packed input
            (:func:`anekit.mil.passes.pack_inputs`); when False, inputs are ordered
            by ascending size instead (ANE_NOTES 2.4). Default: True.
        stats (bool): attach ``_ANEPerformanceStats`` to requests so ``last_stats()``
            can report hardware time (unconfirmed on hardware). Default: False.
        framework: the Objective-C seam; default: the loaded framework (tests pass a fake).
    Returns:
        InMemoryKernel: raises BackendUnavailable off macOS, CompileError if the
        compiler rejects the program, CompileBudgetExhausted near the per-process limit.
    """
    from anekit.backends.ane.inmemory import InMemoryKernel

    fw = framework if framework is not None else _framework.load()
    return InMemoryKernel(program, fw, qos=qos, pack_inputs=pack_inputs, stats=stats)


def compile_mlmodelc(
    path: str | Path,
    *,
    program: Program | None = None,
    key: str = "anekit",
    qos: int = DEFAULT_QOS,
    stats: bool = False,
    framework: Any = None,
) -> Any:
    r"""Load a CoreML-compiled ``.mlmodelc`` through ``_ANEClient``; same Kernel API as ``compile``.

    Args:
        path (str | Path): the ``.mlmodelc`` directory (an ML Program with ``model.mil``).
        program (Program): I/O specs to use; default: parsed from ``path/model.mil``.
        key (str): the ``_ANEModel`` key. Default: "anekit".
        qos, stats, framework: as for :func:`compile`.
    """
    from anekit.backends.ane.client import ClientKernel

    fw = framework if framework is not None else _framework.load()
    return ClientKernel(path, fw, program=program, key=key, qos=qos, stats=stats)
