"""``from_torch``: a PyTorch module to a verified, ANE-friendly MIL program; ``convert_file``
does the same for an ExportedProgram saved with ``torch.export.save`` (``anekit convert``)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import torch

from anekit import hw
from anekit.errors import ConversionError, NumericsOverflow
from anekit.frontends.conversion import Conversion, save_conversion
from anekit.frontends.fidelity import TOLERANCE, Fidelity, verify
from anekit.frontends.torch.archive import load_exported
from anekit.frontends.torch.capture import as_kwargs, capture, decompose, without_cache
from anekit.frontends.torch.compare import (
    compare,
    in_program_order,
    program_inputs,
    torch_outputs,
)
from anekit.frontends.torch.lower import ProgressFn, convert_exported
from anekit.mil import Program
from anekit.passes import Pass, chip_profile
from anekit.passes import convert as convert_pipeline


def from_torch(
    module: torch.nn.Module,
    example_inputs: Any,
    kwargs: dict[str, Any] | None = None,
    *,
    outputs: Sequence[str] | str | None = None,
    dynamic: Any = None,
    name: str = "main",
    passes: Sequence[Pass | str] | None = None,
    chip: str | hw.Chip | None = None,
    verify: bool = True,
    tolerance: float = TOLERANCE,
    progress: ProgressFn | None = None,
    numerics: Any = None,
) -> Program:
    """Convert ``module`` to a MIL program through ``torch.export``.

    Args:
        module (torch.nn.Module): the model (switched to eval mode).
        example_inputs (tensor or tuple): ``forward()``'s positional arguments. The
            program's inputs follow them in order and keep their names; fp32 become fp16
            inputs, int64 token ids int32.
        kwargs (dict): ``forward()``'s keyword arguments; tensors become program inputs
            named after their keyword (``attention_mask``), other values are fixed at
            export. A Hugging Face model whose config enables its KV cache is converted with
            ``use_cache=False`` (a warning says so) unless ``kwargs`` sets ``use_cache``.
        outputs (str or sequence of str): the outputs to keep, by name. Default: all.
        dynamic: ``dynamic_shapes`` for ``torch.export``. Default: None (static).
        name (str): the MIL function's name. Default: ``"main"``.
        passes (sequence of Pass or str): the rewrite passes, in order. Default: None, i.e.
            ``anekit.passes.CONVERT_PASSES``; ``()`` keeps the fp32 program in
            PyTorch's layout.
        chip (str or Chip): the chip whose limits the passes respect. Default: None, this Mac's chip, else m4.
        verify (bool): run the program once on the reference backend and raise
            ConversionError if an output's relative error exceeds ``tolerance``.
            Default: True.
        tolerance (float): see ``verify``. Default: 2e-2.
        progress (callable): ``progress(done, total)`` over the graph's nodes.
        numerics (str or NumericsProfile): the profile the fidelity gate runs on
            (:mod:`anekit.hw.numerics`). Default: the profile of ``chip`` (with no chip, the
            reference backend's default).

    Returns:
        mil.Program: outputs named after their pytree path (``output`` for a lone tensor,
        ``logits``, ``last_hidden_state``, ``output_0``, ``hidden_states_1``); each keeps
        PyTorch's shape and layout.
    """
    kwargs = as_kwargs(module, kwargs)
    try:
        exported = capture(module, example_inputs, kwargs, dynamic=dynamic)
    except ConversionError as e:  # a cache object in the outputs: convert without the cache
        retry = without_cache(module, kwargs) if "Cache" in str(e) else None
        if retry is None:
            raise
        kwargs = retry
        exported = capture(module, example_inputs, kwargs, dynamic=dynamic)
    converted = convert_exported(exported, name=name, progress=progress, outputs=outputs)
    program = convert_pipeline(converted, passes, chip)
    if verify:
        gate = numerics if numerics is not None else chip
        program = _gated(module, example_inputs, kwargs, program, tolerance, gate, chip, exported)
    return program


def _gated(module: Any, example_inputs: Any, kwargs: dict[str, Any] | None, program: Program,
           tolerance: float, numerics: Any, chip: Any, exported: Any) -> Program:  # fmt: skip
    """``program`` through the fidelity gate on the chip's numerics: kept, residual-scaled to
    fit the engine, or refused naming the op, line and bound (``anekit.frontends.envelope``)."""
    from anekit.frontends.envelope import within_envelope
    from anekit.frontends.torch.lower import source_line

    runnable = _runnable(program)
    want = in_program_order(runnable, torch_outputs(module, example_inputs, kwargs))
    inputs = program_inputs(runnable, example_inputs, kwargs)
    nodes = {n.name: n for n in exported.graph.nodes if n.op == "call_function"}
    (last,) = [n for n in exported.graph.nodes if n.op == "output"]
    made = [a for a in torch.utils._pytree.tree_leaves(last.args) if isinstance(a, torch.fx.Node)]
    for v, node in zip(runnable.main.outputs, made):  # an output's op is named after it
        nodes.setdefault(v.name, node)

    def source(name: str) -> str:  # an op is named after its node, plus suffixes
        parts = name.split("_")
        for end in range(len(parts), 0, -1):
            node = nodes.get("_".join(parts[:end]))
            if node is not None:
                return source_line(node)
        return ""

    gated, _ = within_envelope(runnable, inputs, want, tolerance=tolerance, numerics=numerics,
                               chip=chip_profile(chip), source=source)  # fmt: skip
    if gated is runnable:
        return program
    if runnable is program:
        return gated
    (fn_name,) = program.functions  # _runnable renamed the one function to main
    fn = dataclasses.replace(gated.main, name=fn_name)
    return Program({fn_name: fn}, version=gated.version, build_info=gated.build_info)


def check_fidelity(
    module: torch.nn.Module,
    example_inputs: Any,
    program: Program,
    tolerance: float = TOLERANCE,
    *,
    kwargs: dict[str, Any] | None = None,
    numerics: Any = None,
) -> Fidelity:
    """Compare ``program`` with ``module`` on the reference backend (under the ``numerics``
    profile; default: the backend's); raise if out of tolerance."""
    runnable = _runnable(program)
    fidelity = compare(module, example_inputs, runnable, kwargs=kwargs, numerics=numerics)
    verify(fidelity, tolerance)
    return fidelity


def _enveloped(program: Program, inputs: dict[str, Any], want: list[Any], numerics: Any,
               chip: hw.Chip) -> tuple[Program, Fidelity]:  # fmt: skip
    """``convert_file``'s gate: the program residual-scaled when it would overflow on the
    engine (``anekit.frontends.envelope``); a refusal is reported with its fidelity (the
    command exits 1), its op, line and bound as a warning."""
    import warnings

    from anekit.frontends.envelope import within_envelope

    try:
        return within_envelope(program, inputs, want, tolerance=TOLERANCE, numerics=numerics,
                               chip=chip)  # fmt: skip
    except ConversionError as e:
        fidelity = getattr(e, "fidelity", None)
        if fidelity is None:
            raise
        if isinstance(e, NumericsOverflow):
            warnings.warn(str(e), RuntimeWarning, stacklevel=3)
        return program, fidelity


def _runnable(program: Program) -> Program:
    """The program with its only function as ``main`` (backends run ``main``)."""
    if "main" in program.functions or len(program.functions) != 1:
        return program
    (fn,) = program.functions.values()
    return Program({"main": fn}, version=program.version, build_info=program.build_info)


def convert_file(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    chip: str | hw.Chip | None = None,
    check: bool = True,
    estimate: bool = True,
    passes: Sequence[Pass | str] | None = None,
    progress: ProgressFn | None = None,
    compress: str | None = None,
    max_error: float | None = None,
    verbose: bool = False,
    numerics: Any = None,
) -> Conversion:
    """Convert a saved ExportedProgram: write ``out_dir/model.mil`` + ``weights/``, compare with
    PyTorch on the example inputs saved with it, check and estimate for ``chip``.

    ``compress`` (a scheme of ``anekit.compress``, or "auto") compresses the converted
    program's weights for ``chip``, within ``max_error`` when given, measured on the saved
    example inputs (random ones if there are none); the fidelity is the conversion's, before
    compression, and ``Conversion.compression`` reports what compressing did. The file is
    read as data (``anekit.frontends.torch.archive``): one that would run code is refused;
    ``verbose`` lets torch's log through. The fidelity gate runs on ``numerics`` (default: the
    profile of ``chip``).
    """
    chip = chip_profile(chip)  # an unknown chip fails before the slow work
    exported = load_exported(path, verbose=verbose)
    decomposed = decompose(exported)
    program = convert_pipeline(convert_exported(decomposed, progress=progress), passes, chip)
    fidelity = None
    inputs = None
    example = exported.example_inputs
    if example is not None:
        args, kwargs = example
        want = in_program_order(program, torch_outputs(exported.module(), args, kwargs))
        inputs = program_inputs(program, args, kwargs)
        program, fidelity = _enveloped(program, inputs, want, numerics or chip, chip)
    return save_conversion(
        program, out_dir, nodes=len(decomposed.graph.nodes), chip=chip, check=check,
        estimate=estimate, fidelity=fidelity, inputs=inputs, compress=compress,
        max_error=max_error,
    )  # fmt: skip
