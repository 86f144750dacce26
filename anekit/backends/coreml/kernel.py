"""A program run through CoreML: exported, compiled once (cached by hash), loaded, placed.

The pieces are separate so they can be tested off macOS: :func:`program_hash` names a
program with its weights; :func:`compiled_model` exports and compiles it once into the
cache (``<cache>/<hash>.mlmodelc``, made in a private directory and renamed into place,
so a crash leaves no half-compiled model); :func:`op_placements` reads
``MLComputePlan``'s device per operation and matches it to the program's ops (by
output name, which the export keeps) with their MIL lines.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from anekit import config
from anekit.backends.base import Kernel
from anekit.backends.placement import OpPlacement, Placement
from anekit.errors import CompileError, EvaluationError, UsageError
from anekit.mil.program import Program

# MLComputePlan's device classes (coremltools.models.compute_device) -> a Placement device.
DEVICE_CLASSES = {
    "MLNeuralEngineComputeDevice": "ane",
    "MLGPUComputeDevice": "gpu",
    "MLCPUComputeDevice": "cpu",
}
ROUTE = "CoreML (exported .mlpackage, compiled .mlmodelc, coremltools CompiledMLModel)"


def program_hash(program: Program, *salt: str) -> str:
    """A hex digest of the program's text, its weight files and ``salt`` (tool versions)."""
    h = hashlib.sha256(program.to_text().encode())
    for path, blob in sorted(program.weight_files().items()):
        h.update(path.encode() + b"\0" + hashlib.sha256(blob).digest())
    for part in salt:
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:32]


def compiled_model(
    program: Program, cache: Path, compile_package: Callable[[Path, Path], None], salt: str
) -> tuple[Path, bool]:
    """The cached ``.mlmodelc`` of ``program`` (compiled now if missing) and whether it was cached.

    ``compile_package(package, destination)`` compiles an ``.mlpackage`` into an
    ``.mlmodelc`` directory (coremltools' ``compile_model`` on a Mac).
    """
    from anekit.passes.coreml import export_mlpackage

    target = cache / f"{program_hash(program, salt)}.mlmodelc"
    if target.is_dir():
        return target, True
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".compiling-") as scratch:
        package = export_mlpackage(program, Path(scratch) / "model.mlpackage")
        staged = Path(scratch) / "model.mlmodelc"
        try:
            compile_package(package, staged)
        except Exception as e:  # CoreML's compiler raises its own types; say which program
            raise CompileError(f"CoreML could not compile the exported program: {e}") from e
        if not target.is_dir():  # another process may have finished first: keep theirs
            staged.rename(target)
    return target, False


def op_placements(plan: Any, program: Program) -> tuple[OpPlacement, ...]:
    """Each operation's device from an ``MLComputePlan``, with the program's op name and line."""
    ours = {v.name: op for op in program.main.ops for v in op.outputs}
    placed = []
    for operation in plan.model_structure.program.functions["main"].block.operations:
        names = [o.name for o in operation.outputs]
        op = next((ours[n] for n in names if n in ours), None)
        usage = plan.get_compute_device_usage_for_mlprogram_operation(operation)
        device = _device(usage.preferred_compute_device) if usage is not None else "unknown"
        supported = tuple(_device(d) for d in usage.supported_compute_devices) if usage else ()
        placed.append(
            OpPlacement(
                op=op.name if op is not None else (names[0] if names else "?"),
                kind=str(operation.operator_name),
                device=device,
                line=op.line if op is not None else None,
                supported=supported,
            )
        )
    return tuple(placed)


def _device(device: Any) -> str:
    return DEVICE_CLASSES.get(type(device).__name__, "unknown")


class CoreMLKernel(Kernel):
    """A program compiled by CoreML and run with ``CPU_AND_NE`` compute units (by default)."""

    backend = "coreml"
    engine = "CoreML: CPU and Neural Engine"
    route = ROUTE

    def __init__(
        self,
        program: Program,
        *,
        compute_units: str = "CPU_AND_NE",
        cache_dir: str | Path | None = None,
    ) -> None:
        from anekit.backends.coreml import COMPUTE_UNITS
        from anekit.passes.coreml import coremltools

        if compute_units not in COMPUTE_UNITS:
            raise UsageError(
                f"compute_units must be one of {COMPUTE_UNITS}, found {compute_units!r}"
            )
        super().__init__(program)
        ct = coremltools()
        units = getattr(ct.ComputeUnit, compute_units)
        cache = Path(cache_dir) if cache_dir is not None else config.cache_dir() / "coreml"
        path, cached = compiled_model(
            program, cache, _compile_with(ct), f"coremltools {ct.__version__}"
        )
        self.compiled_path = path
        self._model = ct.models.CompiledMLModel(str(path), compute_units=units)
        ops = op_placements(ct.models.compute_plan.MLComputePlan.load_from_path(
            str(path), compute_units=units), program)  # fmt: skip
        note = f"compiled model {'reused from' if cached else 'cached in'} {path}"
        self.placement = Placement("coreml", f"CoreML: {compute_units}", ROUTE, ops=ops,
                                   notes=(note,))  # fmt: skip

    def evaluate(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            got = self._model.predict({k: np.ascontiguousarray(v) for k, v in inputs.items()})
        except Exception as e:  # CoreML's runtime raises its own types
            raise EvaluationError(f"CoreML prediction failed: {type(e).__name__}: {e}") from e
        return {s.name: np.asarray(got[s.name]).astype(s.dtype.numpy) for s in self.outputs}


def _compile_with(ct: Any) -> Callable[[Path, Path], None]:
    def compile_package(package: Path, destination: Path) -> None:
        ct.models.utils.compile_model(str(package), destination_path=str(destination))

    return compile_package
