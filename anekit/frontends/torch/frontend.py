"""``from_torch``: a PyTorch module to a verified, ANE-friendly MIL program; ``convert_file``
does the same for an ExportedProgram saved with ``torch.export.save`` (``anekit convert``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from anekit import hw
from anekit.errors import ConversionError
from anekit.frontends.conversion import Conversion, save_conversion
from anekit.frontends.fidelity import TOLERANCE, Fidelity, compare_arrays, verify
from anekit.frontends.torch.capture import capture, decompose
from anekit.frontends.torch.compare import compare, program_inputs, torch_outputs
from anekit.frontends.torch.lower import ProgressFn, convert_exported
from anekit.mil import Program
from anekit.passes import Pass, chip_profile
from anekit.passes import convert as convert_pipeline


def from_torch(
    module: torch.nn.Module,
    example_inputs: Any,
    *,
    dynamic: Any = None,
    name: str = "main",
    passes: Sequence[Pass | str] | None = None,
    chip: str | hw.Chip = "m4",
    verify: bool = True,
    tolerance: float = TOLERANCE,
    progress: ProgressFn | None = None,
) -> Program:
    """Convert ``module`` to a MIL program through ``torch.export``.

    Args:
        module (torch.nn.Module): the model (switched to eval mode).
        example_inputs (tensor or tuple): ``forward()``'s tensor arguments. The program's
            inputs follow them in order and keep their names; fp32 become fp16 inputs,
            int64 token ids int32.
        dynamic: ``dynamic_shapes`` for ``torch.export``. Default: None (static).
        name (str): the MIL function's name. Default: ``"main"``.
        passes (sequence of Pass or str): the rewrite passes, in order. Default: None, i.e.
            ``anekit.passes.CONVERT_PASSES``; ``()`` keeps the fp32 program in
            PyTorch's layout.
        chip (str or Chip): the chip whose limits the passes respect. Default: ``"m4"``.
        verify (bool): run the program once on the reference backend and raise
            ConversionError if an output's relative error exceeds ``tolerance``.
            Default: True.
        tolerance (float): see ``verify``. Default: 2e-2.
        progress (callable): ``progress(done, total)`` over the graph's nodes.

    Returns:
        mil.Program: a single-tensor result is output ``output``, a tuple ``output_0..``,
        a dict or ModelOutput its keys; each keeps PyTorch's shape and layout.
    """
    exported = capture(module, example_inputs, dynamic=dynamic)
    program = convert_pipeline(
        convert_exported(exported, name=name, progress=progress), passes, chip
    )
    if verify:
        check_fidelity(module, example_inputs, program, tolerance)
    return program


def check_fidelity(
    module: torch.nn.Module, example_inputs: Any, program: Program, tolerance: float = TOLERANCE
) -> Fidelity:
    """Compare ``program`` with ``module`` on the reference backend; raise if out of tolerance."""
    fidelity = compare(module, example_inputs, _runnable(program))
    verify(fidelity, tolerance)
    return fidelity


def _runnable(program: Program) -> Program:
    """The program with its only function as ``main`` (backends run ``main``)."""
    if "main" in program.functions or len(program.functions) != 1:
        return program
    (fn,) = program.functions.values()
    return Program({"main": fn}, version=program.version, build_info=program.build_info)


def load_exported(path: str | os.PathLike[str]) -> torch.export.ExportedProgram:
    """Read a ``torch.export.save`` file; ConversionError says what is wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise ConversionError(f"{path}: no such file (expected a torch.export.save .pt2 file)")
    try:
        return torch.export.load(str(path))
    except Exception as e:  # torch raises many kinds for a bad archive
        raise ConversionError(
            f"{path}: not an ExportedProgram saved with torch.export.save ({type(e).__name__}: {e})"
        ) from e


def convert_file(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    chip: str | hw.Chip = "m4",
    check: bool = True,
    estimate: bool = True,
    passes: Sequence[Pass | str] | None = None,
    progress: ProgressFn | None = None,
    compress: str | None = None,
    max_error: float | None = None,
) -> Conversion:
    """Convert a saved ExportedProgram: write ``out_dir/model.mil`` + ``weights/``, compare with
    PyTorch on the example inputs saved with it, check and estimate for ``chip``.

    ``compress`` (a scheme of ``anekit.compress``, or "auto") compresses the converted
    program's weights for ``chip``, within ``max_error`` when given, measured on the saved
    example inputs (random ones if there are none); the fidelity is the conversion's, before
    compression, and ``Conversion.compression`` reports what compressing did.
    """
    chip = chip_profile(chip)  # an unknown chip fails before the slow work
    exported = load_exported(path)
    decomposed = decompose(exported)
    program = convert_pipeline(convert_exported(decomposed, progress=progress), passes, chip)
    fidelity = None
    inputs = None
    example = exported.example_inputs
    if example is not None:
        args, kwargs = example
        want = _exported_outputs(exported, args, kwargs)
        inputs = program_inputs(program, args)
        fidelity = compare_arrays(program, inputs, want, "reference")
    return save_conversion(
        program, out_dir, nodes=len(decomposed.graph.nodes), chip=chip, check=check,
        estimate=estimate, fidelity=fidelity, inputs=inputs, compress=compress,
        max_error=max_error,
    )  # fmt: skip


def _exported_outputs(exported: torch.export.ExportedProgram, args: Any, kwargs: Any) -> list:
    if kwargs:
        raise ConversionError(
            "the saved example inputs include keyword arguments; export with positional ones"
        )
    return torch_outputs(exported.module(), args)
