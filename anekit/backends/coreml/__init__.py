"""The CoreML backend: Apple's public route to the Neural Engine (macOS only).

``compile(program)`` exports the program as an ``.mlpackage``
(:func:`anekit.passes.coreml.export_mlpackage`), compiles it once to an
``.mlmodelc`` (cached by the program's hash, so a second compile of the same program
loads the cached model), loads it with ``CPU_AND_NE`` compute units and runs it through
coremltools' ``CompiledMLModel``. Where ``MLComputePlan`` exists (macOS 14.4+), the
kernel's placement lists the device CoreML chose for every operation. Importing this
package never imports coremltools; off macOS ``available()`` says why not, and
``compile`` raises BackendUnavailable with the reason.
"""

from __future__ import annotations

import functools
import platform
import sys
from typing import Any

from anekit.mil.program import Program

NAME = "coreml"
# Capabilities (anekit.backends.capabilities): no per-process compile budget (CoreML
# manages its own compiler); fp16 inputs and outputs pass to CoreML as fp16 arrays, so
# fp16 host arrays convert nothing per call; buffer sets are host arrays (no options).
HOST_FP16 = True
SHARED_BUFFER_OPTIONS: dict[str, Any] = {}
COMPUTE_UNITS = ("CPU_AND_NE", "ALL", "CPU_ONLY", "CPU_AND_GPU")
MIN_MACOS = (14, 4)  # MLComputePlan, and so the per-op placement this backend reports

__all__ = ["COMPUTE_UNITS", "HOST_FP16", "NAME", "SHARED_BUFFER_OPTIONS", "available", "compile"]


@functools.cache
def available() -> tuple[bool, str]:
    """Whether CoreML can run programs here, and why not; never raises (asked once: on a Mac
    the answer imports coremltools, which takes seconds)."""
    if sys.platform != "darwin":
        return False, f"CoreML runs only on macOS; this is {sys.platform}"
    version = platform.mac_ver()[0]
    try:
        numbers = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return False, f"cannot read the macOS version ({version!r})"
    if numbers < MIN_MACOS:
        return False, (
            f"macOS {version} is older than {'.'.join(map(str, MIN_MACOS))}, which the CoreML "
            "backend needs (MLComputePlan for per-op placement)"
        )
    try:
        from anekit.passes.coreml import coremltools

        ct = coremltools()
    except Exception as e:  # an ImportError, or coremltools failing to load its native part
        return False, f"coremltools cannot be used: {e}"
    return True, f"CoreML through coremltools {ct.__version__} (macOS {version})"


def compile(program: Program, **options: Any) -> Any:
    r"""Export, compile (once per program) and load ``program`` through CoreML.

    Args:
        program (Program): the verified program.
        compute_units (str): one of :data:`COMPUTE_UNITS`. Default: "CPU_AND_NE".
        cache_dir (str | Path): where compiled models are kept, by program hash. Default:
            ``config.cache_dir() / "coreml"``.
        numerics (str): accepted only when it names this Mac's chip (CoreML computes with the
            device's own arithmetic): a UsageError otherwise, checked before availability.
    Returns:
        CoreMLKernel: raises BackendUnavailable where CoreML cannot run.
    """
    from anekit.backends.coreml.kernel import CoreMLKernel
    from anekit.errors import BackendUnavailable
    from anekit.hw.chips import resolve
    from anekit.hw.numerics import require_device_chip

    require_device_chip(options.pop("numerics", None), resolve(None), NAME)
    ok, reason = available()
    if not ok:
        raise BackendUnavailable(f"backend 'coreml' is unavailable: {reason}", backend=NAME)
    return CoreMLKernel(program, **options)
