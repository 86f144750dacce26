"""Export a Program as a CoreML ML Program (``.mlpackage``) through coremltools' MIL builder.

The public route to the engine: the same MIL, handed to Apple's CoreML instead of the
private framework. Each op of ``main`` becomes the coremltools builder op of the same
name with the same arguments (anekit's op set is coremltools' MIL), the function's
opset becomes the deployment target (``ios18`` -> iOS18, the legacy dialect's ``ios16``
-> iOS16), inputs and outputs keep their names and dtypes (fp16 stays fp16), and
constants keep their values (coremltools writes the large ones to
``weights/weight.bin``). coremltools runs with an empty pass pipeline: its default
passes fuse, fold and rename ops, and the package must hold this program, not an
optimised cousin.

coremltools ties a variable's name to its op's (``y = mul(...)[name = "y"]``); where an
op's ``name`` attribute differs from its variable's, the variable's name is kept (it is
the interface). Where coremltools' own type inference rejects an op anekit's accepts,
:class:`~anekit.errors.ConversionError` names the op, its type and its MIL line.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import ConversionError, UsageError
from anekit.mil.ops import traits
from anekit.mil.program import Operation, Program, Value

COREML_HINT = "pip install 'anekit[coreml]' (coremltools)"
# The tensor types a CoreML model's inputs and outputs may have (an ML Program's
# MultiArray: fp16 from iOS16, fp32, int32); ct.convert would insert casts for others.
IO_DTYPES = ("fp16", "fp32", "int32")
# The deployment target each MIL opset needs (coremltools' ct.target names).
TARGETS = {"ios15": "iOS15", "ios16": "iOS16", "ios17": "iOS17", "ios18": "iOS18"}


def coremltools() -> Any:
    """coremltools, imported on first use (its import warns about versions it was not tested with)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import coremltools as ct
    except ImportError as e:
        raise UsageError(f"exporting to CoreML needs coremltools ({e}); {COREML_HINT}") from e
    return ct


def to_pymil(program: Program) -> Any:
    """``program``'s ``main`` as a coremltools MIL program (``coremltools.converters.mil``)."""
    ct = coremltools()
    from coremltools.converters.mil.mil import Builder as mb
    from coremltools.converters.mil.mil import Function
    from coremltools.converters.mil.mil import Program as PyMilProgram

    fn = program.main
    target = _target(ct, fn.opset)
    specs = {v.name: _placeholder(mb, v) for v in fn.inputs}
    with _quiet(), Function(specs, opset_version=target) as func:
        made: dict[int, Any] = {id(v): func.inputs[v.name] for v in fn.inputs}
        for op in fn.ops:
            _add(mb, op, made)
        func.set_outputs([_output(mb, v, made) for v in fn.outputs])
    pymil = PyMilProgram()
    pymil.add_function("main", func)
    return pymil


def export_mlpackage(program: Program, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``program`` as a CoreML ``.mlpackage`` at ``path``; returns the path.

    The package is written in a private directory beside ``path`` first and moved into
    place, so a failed export leaves nothing half-written; an existing ``path`` is
    replaced only with ``overwrite=True``.
    """
    out = Path(path)
    if out.suffix != ".mlpackage":
        raise UsageError(f"a CoreML package's name ends in .mlpackage, found {out.name!r}")
    if out.exists() and not overwrite:
        raise UsageError("exists; pass overwrite=True (--force) to replace it", path=str(out))
    program.require_weights("export")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as scratch:
        staged = Path(scratch) / out.name
        with _quiet():
            convert(program, Path(scratch) / "weights").save(str(staged))
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    return out


def convert(program: Program, weights_dir: Path) -> Any:
    """``program`` as a coremltools ``MLModel`` (not loaded), its weight file in ``weights_dir``.

    The MIL program goes straight to coremltools' ML Program serializer: ``ct.convert``
    would run its backend pipeline even with an empty pass pipeline, and that pipeline
    fuses ``x * sigmoid(x)`` into ``silu`` and ``sqrt(x * x)`` patterns, renames
    variables and casts I/O types (``_BACKEND_MIL_PASSES`` in coremltools 9).
    """
    ct = coremltools()
    from coremltools.converters.mil.backend.mil.load import load

    _check_io(program)
    pymil = to_pymil(program)
    weights_dir.mkdir(parents=True, exist_ok=True)
    target = _target(ct, program.main.opset)
    with _quiet():
        try:
            proto = load(pymil, str(weights_dir), specification_version=target)
        except Exception as e:  # coremltools' serializer raises many types; each is a finding
            raise ConversionError(
                f"coremltools' ML Program serializer rejects the program: {type(e).__name__}: {e}"
            ) from e
        return ct.models.MLModel(proto, weights_dir=str(weights_dir), skip_model_load=True)


# -- one op ---------------------------------------------------------------------------------------
def _add(mb: Any, op: Operation, made: dict[int, Any]) -> None:
    """Add ``op`` through the builder; its outputs join ``made``."""
    name = op.outputs[0].name if len(op.outputs) == 1 else op.name
    if traits.CONST in op.opdef.traits:
        value = op.outputs[0]
        made[id(value)] = mb.const(val=_literal(value), name=name)
        return
    arguments = {param: _argument(v, made) for param, v in op.inputs.items()}
    results = _build(mb, op, arguments, name)
    wrong = _disagreement(op, results)
    if wrong and traits.ELEMENTWISE in op.opdef.traits:
        # coremltools 9 infers select(a=scalar, b=scalar, cond=[...]) as a scalar: constants
        # broadcast to the output's shape give the same elements and the right type
        results[0].op.enclosing_block.remove_ops([results[0].op])
        shape = tuple(int(d) for d in op.outputs[0].shape)
        arguments = {p: _broadcast(mb, a, shape, f"{name}_{p}") for p, a in arguments.items()}
        results = _build(mb, op, arguments, name)
        wrong = _disagreement(op, results)
    if wrong:
        raise _rejected(op, ValueError(wrong))
    for ours, theirs in zip(op.outputs, results):
        made[id(ours)] = theirs


def _build(mb: Any, op: Operation, arguments: dict[str, Any], name: str) -> tuple[Any, ...]:
    try:
        result = getattr(mb, op.op_type)(**arguments, name=name)
    except Exception as e:  # coremltools' inference raises many types; each is a finding
        raise _rejected(op, e) from e
    return tuple(result) if isinstance(result, (list, tuple)) else (result,)


def _disagreement(op: Operation, results: tuple[Any, ...]) -> str | None:
    """How coremltools' inferred output types differ from anekit's, or None if they agree."""
    from coremltools.converters.mil.mil import types

    for ours, theirs in zip(op.outputs, results):
        shape = tuple(int(d) if isinstance(d, int) else d for d in theirs.shape)
        kind = types.builtin_to_string(theirs.dtype)
        if shape != tuple(ours.shape) or kind != str(ours.dtype):
            return (
                f"coremltools infers {ours.name!r} as {kind} {list(shape)}, anekit as "
                f"{ours.dtype} {list(ours.shape)}"
            )
    return None


def _broadcast(mb: Any, argument: Any, shape: tuple[int, ...], name: str) -> Any:
    """A constant argument broadcast to ``shape`` (tensors and other arguments as they are)."""
    value = getattr(argument, "val", None)
    if isinstance(value, np.ndarray | np.generic) and np.ndim(value) < len(shape):
        return mb.const(val=np.ascontiguousarray(np.broadcast_to(value, shape)), name=name)
    return argument


def _argument(v: Value | tuple[Value, ...], made: dict[int, Any]) -> Any:
    if isinstance(v, tuple):
        return [_argument(x, made) for x in v]
    if id(v) in made:
        return made[id(v)]
    return _literal(v)  # an inline literal: no op produced it


def _literal(v: Value) -> Any:
    """A constant's value as coremltools' builder takes it (NumPy arrays, Python scalars;
    sub-byte integers in coremltools' own NumPy dtypes, which say their width)."""
    from coremltools.converters.mil.mil import types

    value = v.const
    sub_byte = getattr(types, f"np_{v.dtype}_dtype", None)
    if sub_byte is not None and isinstance(value, np.ndarray):
        return value.astype(sub_byte)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item() if value.dtype.kind in "biu" or value.dtype == object else value
    return value


def _output(mb: Any, v: Value, made: dict[int, Any]) -> Any:
    """The variable ``main`` returns as ``v``; an input returned as it is gets an identity."""
    var = made[id(v)]
    if var.name != v.name:
        return mb.identity(x=var, name=v.name)
    return var


def _rejected(op: Operation, e: Exception) -> ConversionError:
    where = f"line {op.line}" if op.line else ""
    return ConversionError(
        f"coremltools' MIL builder rejects {op.op_type} {op.name!r}, which anekit accepts: "
        f"{type(e).__name__}: {e}",
        problems=((op.name, op.op_type, where),),
    )


# -- types ---------------------------------------------------------------------------------------
def _check_io(program: Program) -> None:
    """ConversionError naming every input and output CoreML cannot take as it is."""
    fn = program.main
    problems = []
    for kind, values in (("input", fn.inputs), ("output", fn.outputs)):
        for v in values:
            if str(v.dtype) not in IO_DTYPES:
                problems.append((v.name, kind, f"dtype {v.dtype}, not one of {IO_DTYPES}"))
            elif not v.shape:
                problems.append((v.name, kind, "rank 0: a CoreML MultiArray has rank 1 or more"))
    if problems:
        raise ConversionError(
            "CoreML cannot take these inputs and outputs as they are", problems=tuple(problems)
        )


def _target(ct: Any, opset: str) -> Any:
    return getattr(ct.target, TARGETS[opset])


def _placeholder(mb: Any, v: Value) -> Any:
    """A function input of ``v``'s shape and dtype; ConversionError where CoreML has none."""
    from coremltools.converters.mil.mil import types

    problem = None
    if not all(isinstance(d, int) for d in v.shape):
        problem = f"a symbolic shape {list(v.shape)}: CoreML export needs fixed shapes"
    elif not v.shape:
        problem = "rank 0: coremltools' placeholders have rank 1 or more"
    if problem is not None:
        raise ConversionError(f"input {v.name!r} has {problem}", problems=((v.name, "input", ""),))
    return mb.placeholder(shape=tuple(int(d) for d in v.shape), dtype=getattr(types, str(v.dtype)))


@contextmanager
def _quiet() -> Iterator[None]:
    """coremltools warns about versions it was not tested with; an export is silent."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
