"""Generic verification: an op's arguments against its declared parameters, then its inference."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit.errors import AnekitError, MilTypeError
from anekit.mil.ops.registry import Args, OpDef, as_tuple
from anekit.mil.ops.traits import CONSTEXPR
from anekit.mil.types import TensorType
from anekit.mil.values import Value

if TYPE_CHECKING:
    from anekit.mil.program import Function


# Type inference is cached per (op, argument types, constness, the values it may read): a
# program repeats a few op signatures thousands of times. Bounded: the oldest entry goes, a
# value of up to KEYED_BYTES is keyed by its bytes, one up to DIGESTED_BYTES by a 128-bit
# BLAKE2b digest of them, and an op reading a larger value is not cached.
INFER_CACHE_ENTRIES = 4096
KEYED_BYTES = 256
DIGESTED_BYTES = 1 << 16
_INFER_CACHE: OrderedDict[tuple, tuple[OpDef, tuple[TensorType, ...]]] = OrderedDict()


def clear_cache() -> None:
    """Forget every cached inference (benchmarks measure verification cold)."""
    _INFER_CACHE.clear()


def check_op(opdef: OpDef, inputs: dict[str, Any]) -> tuple[TensorType, ...]:
    """Check arguments against the op's parameter spec and return the inferred output types."""
    key = _signature(opdef, inputs)
    if key is not None:
        hit = _INFER_CACHE.get(key)
        if hit is not None and hit[0] is opdef:
            return hit[1]
    types = _check_op(opdef, inputs)
    if key is not None:
        if len(_INFER_CACHE) >= INFER_CACHE_ENTRIES:
            _INFER_CACHE.popitem(last=False)  # the oldest goes
        _INFER_CACHE[key] = (opdef, types)
    return types


def _check_op(opdef: OpDef, inputs: dict[str, Any]) -> tuple[TensorType, ...]:
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
        return as_tuple(opdef.infer(Args(opdef, _hide_values(opdef, inputs))))
    except AnekitError:
        raise
    except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, OverflowError) as e:
        raise MilTypeError(f"arguments rejected by type inference: {e}", op=opdef.name) from e


class HiddenValue:
    """What ``infer`` sees as a constant's value it may not read (``OpDef.readable``).

    Type inference depends on such a value only through its type and being constant
    (``v.const is not None``); using the value raises, so an op that does read it must
    declare so (``OpDef.infer_values``, or not ``shape_only``), or the cache would be wrong.
    """

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "type inference read a constant's value its OpDef does not declare readable "
            "(see OpDef.shape_only and OpDef.infer_values)"
        )

    __array__ = __bool__ = __int__ = __float__ = __index__ = __len__ = __iter__ = _refuse
    __getitem__ = __eq__ = __lt__ = __gt__ = _refuse
    __hash__ = None  # type: ignore[assignment]


HIDDEN = HiddenValue()


def _hide_values(opdef: OpDef, inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs with the constant values ``infer`` may not read hidden (see HiddenValue)."""
    hidden = None
    readable = opdef.readable
    for name, given in inputs.items():
        if name in readable:
            continue
        values = given if isinstance(given, tuple) else (given,)
        if any(v.const is not None for v in values):
            masked = tuple(
                v if v.const is None else Value(v.name, v.type, v.producer, HIDDEN, v.blob)
                for v in values
            )
            hidden = hidden or dict(inputs)
            hidden[name] = masked if isinstance(given, tuple) else masked[0]
    return inputs if hidden is None else hidden


def _signature(opdef: OpDef, inputs: dict[str, Any]) -> tuple | None:
    """What inference depends on (see _hide_values), or None if a const is too large to key."""
    key: list[Any] = [id(opdef)]
    by_name, readable = opdef.by_name, opdef.readable
    for name, given in inputs.items():
        if name not in by_name:
            return None  # an error: not worth caching
        if given.__class__ is Value and given.const is None:  # the common case, inline
            producer = given.producer
            key += (name, given.type, producer is not None and CONSTEXPR in producer.opdef.traits)
            continue
        reads = name in readable
        if isinstance(given, tuple):
            parts = tuple(_value_key(v, reads) for v in given)
            if None in parts:
                return None
            key.append((name, parts))
        else:
            part = _value_key(given, reads)
            if part is None:
                return None
            key += (name, part)
    return tuple(key)


def _value_key(v: Any, reads: bool) -> Any:
    if not isinstance(v, Value):
        return None
    c = v.const
    if c is None:
        producer = v.producer
        return (v.type, producer is not None and CONSTEXPR in producer.opdef.traits)
    if not reads:
        return (v.type, True)
    if isinstance(c, np.ndarray):
        dtype = c.dtype  # keyed as itself: equal dtypes, equal .str (which costs 0.3 us)
        if dtype.kind == "O" or c.nbytes > DIGESTED_BYTES:
            return None
        data = c.tobytes()
        if len(data) > KEYED_BYTES:
            data = hashlib.blake2b(data, digest_size=16).digest()
        return (v.type, dtype, c.shape, data)
    if isinstance(c, (str, bool, int, float)):
        return (v.type, type(c), c)
    if isinstance(c, np.generic):
        return (v.type, c.dtype.str, c.tobytes())
    return None


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
    for v in fn.outputs:
        if v.name not in defined:
            raise MilTypeError(f"function {fn.name!r} returns undefined value {v.name!r}")
    check_returns(fn)


def check_returns(fn: Function) -> None:
    """Check that a function returns each value once.

    All that check_function checks beyond what a parser that resolves every name in
    definition order has made sure of already (each name defined once, each use after its
    definition, each output defined): the parser calls only this.
    """
    returned: set[str] = set()
    for v in fn.outputs:
        if v.name in returned:  # output names are a kernel's interface: each names one output
            raise MilTypeError(f"function {fn.name!r} returns {v.name!r} more than once")
        returned.add(v.name)


def _define(defined: set[str], v: Value, line: int | None) -> None:
    if v.name in defined:
        raise MilTypeError(f"value {v.name!r} is defined twice", line=line)
    defined.add(v.name)
