"""The reference backend: runs any verified Program with NumPy, numerically modelling the ANE.

Storage model: each op's output is rounded to its declared dtype (fp16 on the ANE, so
overflow gives inf and NaN propagates); ops compute in fp32. fp16 values are held as
float32 arrays that are exactly fp16-representable, so a consumer never converts them
again.

Execution is planned at compile time (``planner.py``): one prepared step per op, with
constants bound, and for the elementwise ops that declare a ``registry.Ufunc`` and the ops
of ``forms.py`` a form that writes with ``out=`` into
preallocated buffers, shared by values whose lives do not overlap, and rounded in
place (:mod:`anekit.fp16`). Other ops run their registry ``reference``. Each evaluation
in flight has its own buffers, allocated when first needed, so ``submit()`` is safe.
"""

from __future__ import annotations

from typing import Any

from anekit.backends.reference.kernel import (
    NAME,
    STORAGE_MODES,
    ReferenceKernel,
    default_memory_budget,
)
from anekit.errors import UsageError
from anekit.fp16 import round_fp16 as round_to_fp16
from anekit.hw.numerics import NumericsProfile, numerics_profile
from anekit.mil.program import Program

# Capabilities (anekit.backends.capabilities): no compile budget; it computes in float32, so
# host arrays of fp16 values held in float32 convert nothing per call; any buffer can be shared.
HOST_FP16 = False
SHARED_BUFFER_OPTIONS: dict[str, Any] = {}

__all__ = [
    "HOST_FP16",
    "NAME",
    "SHARED_BUFFER_OPTIONS",
    "STORAGE_MODES",
    "ReferenceKernel",
    "available",
    "compile",
    "default_memory_budget",
    "round_to_fp16",
]


def available() -> tuple[bool, str]:
    """The reference backend runs everywhere."""
    return True, "NumPy reference backend"


def compile(
    program: Program,
    *,
    storage: str = "fp16",
    memory_budget: int | None = None,
    numerics: str | NumericsProfile | None = None,
    **options: Any,
) -> ReferenceKernel:
    """Prepare a program for execution.

    Args:
        storage (str): ``"fp16"`` (default) rounds every fp16 op output to fp16, as the ANE
            stores it; ``"fp32"`` keeps fp16 intermediates in fp32 and rounds only the
            program's outputs (faster, for debugging and comparisons, not ANE-faithful).
        memory_budget (int): bytes one evaluation may hold at its peak; a program that
            needs more (or one tensor larger) is a CompileError before anything is
            allocated. Default: half of physical memory (``default_memory_budget()``).
        numerics (str | NumericsProfile): how fp16 results are stored (:mod:`anekit.hw.numerics`):
            ``"ideal"`` (IEEE), a chip or family ("m4", "Apple M1 Max", "A16"), or a
            profile file. Default: ``$ANEKIT_NUMERICS``, else the default chip's profile.
            ``storage="fp32"`` implies ``"ideal"``.
    """
    if options:
        raise TypeError(
            "reference backend options are: storage, memory_budget, numerics; found "
            f"{sorted(options)}"
        )
    if storage not in STORAGE_MODES:
        raise ValueError(f"storage must be one of {STORAGE_MODES}, found {storage!r}")
    if memory_budget is not None and (
        isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or memory_budget < 1
    ):
        raise ValueError(
            f"memory_budget must be a positive number of bytes, found {memory_budget!r}"
        )
    profile = numerics_profile("ideal" if storage == "fp32" and numerics is None else numerics)
    if storage == "fp32" and not profile.is_ideal:
        raise UsageError(
            f"storage='fp32' keeps fp16 values in fp32 and implies numerics='ideal'; found "
            f"numerics={profile.name!r}"
        )
    return ReferenceKernel(program, storage=storage, memory_budget=memory_budget, profile=profile)
