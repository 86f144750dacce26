"""The ANE backend: AppleNeuralEngine.framework through PyObjC (macOS on Apple silicon only).

``compile(program)`` runs the in-memory path (:mod:`.inmemory`, ANE_NOTES 2.1 and 2.5);
``compile_mlmodelc(path)`` runs a CoreML-compiled model through ``_ANEClient``
(:mod:`.client`, ANE_NOTES 2.2). Both return kernels on zero-copy IOSurfaces laid out
as the compiled model reports. Importing this package never imports PyObjC;
``available()`` loads the framework only on a native arm64 Python on a Mac that is
not a virtual machine, and says why it cannot everywhere else.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from anekit.backends.ane import dialect as _dialect
from anekit.backends.ane import framework as _framework
from anekit.backends.ane import host as _host
from anekit.backends.budget import DEFAULT_LIMIT as COMPILE_BUDGET  # isolate="auto" reads it
from anekit.mil.program import Program

NAME = "ane"
DEFAULT_QOS = 21  # the QoS every published client uses (ANE_NOTES 2.1)
# Capabilities (anekit.backends.capabilities reads them beside COMPILE_BUDGET):
HOST_FP16 = True  # buffers are fp16 IOSurfaces: host arrays in fp16 convert nothing per call
# surfaces bound into several requests need one per input (packing puts all inputs in one)
SHARED_BUFFER_OPTIONS = {"pack_inputs": False}

__all__ = [
    "COMPILE_BUDGET",
    "DEFAULT_QOS",
    "HOST_FP16",
    "NAME",
    "SHARED_BUFFER_OPTIONS",
    "available",
    "compile",
    "compile_mlmodelc",
    "default_ready",
]


def available() -> tuple[bool, str]:
    """Whether this machine can run the ANE backend, and why not; never raises."""
    return _availability()


@functools.cache
def _availability() -> tuple[bool, str]:
    try:
        return _probe()
    except Exception as e:  # any PyObjC or OS surprise is a reason, never a traceback
        return False, f"probing the ANE raised {type(e).__name__}: {e}"


def _probe() -> tuple[bool, str]:
    facts = _host.facts()
    reason = _host.problem(facts) or _framework.problem()
    if reason is not None:
        return False, reason
    info = _framework.device_info(_framework.load())
    if info.get("isVirtualMachine"):
        return False, "_ANEDeviceInfo reports a virtual machine: it has the framework but no ANE"
    if not info.get("hasANE"):
        return False, f"_ANEDeviceInfo reports no ANE on this Mac (hasANE = {info.get('hasANE')})"
    chip = _dialect.resolve_chip(facts.chip) if facts.chip else _dialect.host_chip()
    reason = _dialect.macos_problem(chip.dialect, facts.macos)
    if reason is not None:
        return False, f"{reason}; {chip.name} uses the {chip.dialect} dialect"
    return True, (
        f"AppleNeuralEngine.framework via PyObjC {_framework.load().pyobjc_version} "
        f"({facts.brand or chip.name}, ANE {info.get('aneSubType')}, macOS {facts.macos}, "
        f"dialect {chip.dialect})"
    )


def default_ready() -> tuple[bool, str]:
    """Whether ``compile(backend=None)`` may pick the private route: its self-check passed on
    this macOS build (:mod:`.selfcheck`, cached per build and anekit version)."""
    ok, reason = available()
    if not ok:
        return False, reason
    from anekit.backends.ane import selfcheck

    return selfcheck.verdict()


def compile(program: Program, *, framework: Any = None, **options: Any) -> Any:
    r"""Compile and load a Program on the ANE through the in-memory path.

    Args:
        program (Program): the verified program.
        qos (int): QoS passed to every framework call. Default: 21.
        pack_inputs (bool): rewrite a multi-input program to one packed input
            (:func:`anekit.passes.pack_inputs`). Default: True.
        stats (bool): set the performance-counter mask and attach ``_ANEPerformanceStats``
            to requests so ``last_stats()`` can report hardware time. Default: False.
        stats_mask (int): the counter mask ``stats=True`` sets; 0 sets none (the ladder compares
            both). Default: every counter bit (``data/facts.json``).
        dialect (str): ``"ios18"`` or ``"legacy"``; default: the chip's (legacy on M1/M2).
        chip (str | Chip): the chip to check and pick the dialect for. Default: the host's.
        numerics (str): accepted only when it names that chip (the device computes with its own
            arithmetic; other profiles are the reference backend's): a UsageError otherwise.
        check (bool): run the compatibility checker first and refuse a program it finds
            errors in. Default: True.
        layout (str): I/O row layout: ``"auto"`` (the model's, else computed 64-byte rows),
            ``"model"``, ``"dense"``, ``"pad64"``, ``"pad128"``. Default: "auto".
        binding (str): request indices: ``"auto"`` (the model's symbols, else signature order),
            ``"symbols"``, ``"signature"``, ``"alphabetical"``, ``"size"``. Default: "auto".
        canonical_io (bool): order the device program's I/O by size and rename it by index,
            so every binding rule agrees. Default: True.
        op_names (str): ``"match"`` renames a renamed output's op too (a compiler binding
            by op name agrees), ``"keep"`` leaves op names. Default: "match".
        stats_read (str): where hardware time is read: ``"request"`` (the request's
            ``perfStatsArray[0]``, then ``perfStats``, then the object passed in; tmc's
            order) or ``"attached"`` (only the object passed in). Default: "request".
        workdir_weights (str): a work directory in use by a kernel of the same text gets this
            kernel's weight files written again (``"rewrite"``, what maderix and Orion do) or
            must already hold them (``"verify"``). Default: "rewrite".
        autorelease (bool): run framework calls in autorelease pools. Default: True.
        framework: the Objective-C seam; default: the loaded framework (tests pass a fake).
    Returns:
        InMemoryKernel: raises BackendUnavailable off macOS, CompileError if the checker or
        the compiler rejects the program, CompileBudgetExhausted near the per-process limit.
    """
    from anekit.backends.ane.inmemory import InMemoryKernel
    from anekit.hw.numerics import require_device_chip

    numerics = options.pop("numerics", None)
    require_device_chip(numerics, _dialect.resolve_chip(options.get("chip")), NAME)
    fw = framework if framework is not None else _framework.load()
    return InMemoryKernel(program, fw, **options)


def compile_mlmodelc(
    path: str | Path,
    *,
    program: Program | None = None,
    key: str = "anekit",
    qos: int = DEFAULT_QOS,
    stats: bool = False,
    layout: str = "auto",
    binding: str = "auto",
    autorelease: bool = True,
    framework: Any = None,
) -> Any:
    r"""Load a CoreML-compiled ``.mlmodelc`` through ``_ANEClient``; same Kernel API as ``compile``.

    Args:
        path (str | Path): the ``.mlmodelc`` directory (an ML Program with ``model.mil``).
        program (Program): I/O specs to use; default: parsed from ``path/model.mil``.
        key (str): the ``_ANEModel`` key. Default: "anekit".
        qos, stats, layout, binding, autorelease, framework: as for :func:`compile`.
    """
    from anekit.backends.ane.client import ClientKernel

    fw = framework if framework is not None else _framework.load()
    return ClientKernel(path, fw, program=program, key=key, qos=qos, stats=stats, layout=layout,
                        binding=binding, autorelease=autorelease)  # fmt: skip
