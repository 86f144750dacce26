"""Generic verification: an op's arguments against its declared parameters, then its inference."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anekit.errors import AnekitError, MilTypeError
from anekit.mil.ops.registry import Args, OpDef, as_tuple
from anekit.mil.ops.traits import CONSTEXPR
from anekit.mil.types import TensorType
from anekit.mil.values import Value

if TYPE_CHECKING:
    from anekit.mil.program import Function


def check_op(opdef: OpDef, inputs: dict[str, Any]) -> tuple[TensorType, ...]:
    """Check arguments against the op's parameter spec and return the inferred output types."""
    for name, given in inputs.items():
        p = opdef.by_name.get(name)
        if p is None:
            expected = ", ".join(q.name for q in opdef.params) or "none"
            raise MilTypeError(
                f"unknown parameter; expected one of: {expected}", op=opdef.name, param=name
            )
        if p.variadic != isinstance(given, tuple):
            kind = "a tuple of values" if p.variadic else "a single value"
            raise MilTypeError(f"expected {kind}", op=opdef.name, param=name)
        for v in given if isinstance(given, tuple) else (given,):
            _check_value(opdef, p.name, p.dtypes, p.ranks, p.const, v)
    for p in opdef.params:
        if not p.optional and p.name not in inputs:
            raise MilTypeError("required parameter is missing", op=opdef.name, param=p.name)
    _check_domains(opdef, inputs)
    try:
        return as_tuple(opdef.infer(Args(opdef, inputs)))
    except AnekitError:
        raise
    except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, OverflowError) as e:
        raise MilTypeError(f"arguments rejected by type inference: {e}", op=opdef.name) from e


def _check_value(opdef: OpDef, name: str, dtypes, ranks, const: bool, v: Value) -> None:
    t = v.type
    if dtypes is not None and t.dtype not in dtypes:
        allowed = ", ".join(sorted(d.value for d in dtypes))
        raise MilTypeError(
            f"expected dtype in ({allowed}), found {t.dtype} ({v.name or 'literal'})",
            op=opdef.name,
            param=name,
        )
    if ranks is not None and t.rank not in ranks:
        raise MilTypeError(
            f"expected rank in {list(ranks)}, found rank {t.rank} {t} ({v.name or 'literal'})",
            op=opdef.name,
            param=name,
        )
    if const and v.const is None and not _decompressed(v):
        raise MilTypeError(
            f"must be a compile-time constant, found runtime value {v.name!r}",
            op=opdef.name,
            param=name,
        )


def _decompressed(v: Value) -> bool:
    """The value is a constexpr op's result: known at compile time, stored compressed."""
    return v.producer is not None and CONSTEXPR in v.producer.opdef.traits


def _check_domains(opdef: OpDef, inputs: dict[str, Any]) -> None:
    seen: dict[str, tuple[str, TensorType]] = {}
    for p in opdef.params:
        if p.domain is None or p.name not in inputs:
            continue
        given = inputs[p.name]
        for v in given if isinstance(given, tuple) else (given,):
            first = seen.setdefault(p.domain, (p.name, v.type))
            if first[1].dtype != v.type.dtype:
                raise MilTypeError(
                    f"dtype {v.type.dtype} differs from {first[1].dtype} of {first[0]!r} "
                    f"(both must share type {p.domain})",
                    op=opdef.name,
                    param=p.name,
                )


def check_function(fn: Function) -> None:
    """Check SSA form: names unique, every use defined earlier, outputs defined."""
    defined: set[str] = set()
    for v in fn.inputs:
        _define(defined, v, None)
    for op in fn.ops:
        for v in op.input_values():
            if v.name and v.name not in defined:
                raise MilTypeError(
                    f"value {v.name!r} is used before it is defined", op=op.op_type, line=op.line
                )
        for v in op.outputs:
            _define(defined, v, op.line)
    returned: set[str] = set()
    for v in fn.outputs:
        if v.name not in defined:
            raise MilTypeError(f"function {fn.name!r} returns undefined value {v.name!r}")
        if v.name in returned:  # output names are a kernel's interface: each names one output
            raise MilTypeError(f"function {fn.name!r} returns {v.name!r} more than once")
        returned.add(v.name)


def _define(defined: set[str], v: Value, line: int | None) -> None:
    if v.name in defined:
        raise MilTypeError(f"value {v.name!r} is defined twice", line=line)
    defined.add(v.name)
