"""The op registry: every MIL op is declared here once, as an :class:`OpDef`.

A declaration carries everything the generic tools need: the parameter spec
(the verifier and the Builder), type inference (the verifier, the parser),
the NumPy reference semantics (the reference backend), cost terms (the cost
model), facts chip rules need (``contraction``) and traits (tools ask for a
trait from :mod:`anekit.mil.ops.traits`, never for an op name). Later opsets
override only what changed, with ``since``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.literals import literal_value
from anekit.mil.ops.ranges import RangeFn
from anekit.mil.ops.traits import VOCABULARY
from anekit.mil.types import Dim, DType, TensorType

OPSETS: tuple[str, ...] = ("ios15", "ios16", "ios17", "ios18")

_NO_DEFAULT = object()


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of an op: the types it accepts and how it may be given.

    Attributes:
        name: the MIL parameter name (a keyword of the Builder method).
        dtypes: accepted element types, or None for any.
        ranks: accepted ranks, or None for any.
        const: the value must be known at compile time.
        optional: the parameter may be omitted.
        default: value used when omitted: a Python value, or a callable of the
            op's :class:`Args` (e.g. strides that depend on the input rank).
        variadic: a tuple of values, as in ``concat(values = (a, b))``.
        domain: parameters sharing a domain name must share their dtype.
    """

    name: str
    dtypes: frozenset[DType] | None = None
    ranks: tuple[int, ...] | None = None
    const: bool = False
    optional: bool = False
    default: Any = _NO_DEFAULT
    variadic: bool = False
    domain: str | None = None

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT


def param(
    name: str,
    dtypes: Iterable[DType | str] | None = None,
    *,
    ranks: Iterable[int] | None = None,
    const: bool = False,
    optional: bool = False,
    default: Any = _NO_DEFAULT,
    variadic: bool = False,
    domain: str | None = None,
) -> Param:
    """Declare a parameter; a default makes it optional."""
    return Param(
        name=name,
        dtypes=None if dtypes is None else frozenset(DType(d) for d in dtypes),
        ranks=None if ranks is None else tuple(ranks),
        const=const,
        optional=optional or default is not _NO_DEFAULT,
        default=default,
        variadic=variadic,
        domain=domain,
    )


@dataclass(frozen=True, slots=True)
class Cost:
    """Work of one op: floating-point (or integer) operations and bytes moved."""

    flops: float
    bytes_read: float
    bytes_written: float

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


class Encoding(NamedTuple):
    """How a constexpr op stores its constant: the encoding and the bits of a stored element.

    ``kind`` is one of ``affine`` (constexpr_affine_dequantize), ``blockwise``
    (constexpr_blockwise_shift_scale), ``lut`` (constexpr_lut_to_dense) or ``sparse``
    (constexpr_sparse_to_dense): the names chip data (``anekit/hw/data/compression.json``)
    says each chip family streams natively or folds to dense fp16.
    """

    kind: str
    bits: int


@dataclass(frozen=True)
class Numerics:
    """How an op's stored output departs from IEEE fp16 on the engine; a profile gives the values.

    ``saturates``: the profile's saturation kind ("matmul", "conv", "exp"): an output above
    that magnitude becomes +-inf (N1, N9 in docs/numerics.md). ``hook(profile, args,
    result) -> (result, saturated)`` (or ``(result, (saturated, flushed))``): an arithmetic
    departure computed from the op's arguments (a dict) before the result is stored, run
    where the profile's field ``reads`` differs from the ideal profile's (round's half-away
    rule, softplus's exp cliff, logsumexp's missing max-shift, the width-offset slice clamp,
    the precise variants' rounded products).
    """

    saturates: str | None = None
    hook: Callable[[Any, dict[str, Any], Any], tuple[Any, int | tuple[int, int]]] | None = None
    reads: str | None = None


@dataclass(frozen=True)
class Ufunc:
    """An elementwise op as NumPy ufuncs writing into a given array (``out=``): the same bits as
    its ``reference`` wherever it applies. The reference backend plans its fast form from this
    (``mil/`` knows no buffers: the backend decides slots, aliasing and reuse).

    Attributes:
        ufunc: the NumPy ufunc of the op's tensor operands (``x``, or ``x`` and ``y``), in their
            dtype; or None when ``into`` is given.
        into: ``into(out, x, **consts)``: the reference's formula, one ``out=`` ufunc at a time,
            in the same order on the same operands (float32 only).
        floats: applies to float32 operands only (integers take the reference's exact path).
        inplace: the output may take x's buffer (False where the formula reads x after it
            has written ``out``).
    """

    ufunc: np.ufunc | None = None
    into: Callable[..., None] | None = None
    floats: bool = False
    inplace: bool = True


InferFn = Callable[["Args"], "TensorType | tuple[TensorType, ...]"]
CostFn = Callable[["Args", "tuple[TensorType, ...]"], Cost]


@dataclass(frozen=True)
class OpDef:
    """The single declaration of a MIL op (see module docstring)."""

    name: str
    params: tuple[Param, ...]
    infer: InferFn
    reference: Callable[..., Any] | None = None
    cost: CostFn | None = None
    traits: frozenset[str] = frozenset()  # from the vocabulary in anekit.mil.ops.traits
    since: str = "ios15"
    doc: str = ""
    flops_per_element: float = 1.0
    # Facts chip rules read here, never by parameter name. contraction: the length of the
    # summed axis of a multiply-accumulate op (matmul's K; see inner_dim); in_channels: the
    # channels (axis 1) of a conv's activation input.
    contraction: Callable[[Args], Dim] | None = None
    in_channels: Callable[[Args], Dim] | None = None
    # Facts weight compression reads (anekit.compress, the checker, the cost model).
    # output_axis(args, param): the axis of a constant operand that runs over the op's
    # output channels (what per-channel compression scales along), or None where the
    # operand must stay dense. encoding: for a constexpr op, how its constant is stored.
    output_axis: Callable[[Args, str], int | None] | None = None
    encoding: Callable[[Args], Encoding] | None = None
    # The attention-mask fact (the finite_masks pass reads it): the operands through which an
    # additive mask reaches the output still a mask (add's x and y, select's a and b).
    mask_operands: frozenset[str] = frozenset()
    # Which argument values ``infer`` may read (the verifier hides the others from it and caches
    # its result by types, constness and the readable values): every const parameter but those
    # in ``shape_only`` (weights: only their type matters), and the non-const parameters in
    # ``infer_values`` (gather's indices, for validate_indices).
    shape_only: frozenset[str] = frozenset()
    infer_values: frozenset[str] = frozenset()
    # How the engine's storage of this op's output departs from IEEE fp16 (numerics profiles).
    numerics: Numerics | None = None
    # Range analysis (anekit.hw.ranges): the output's bound from the inputs' (a transfer function
    # of anekit.mil.ops.ranges; None: unbounded), and the operands where a value flushed to 0
    # (N12) is divided by, logged or rsqrt'ed (the subnormal-flush rule reads them).
    ranges: RangeFn | None = None
    flush_sensitive: frozenset[str] = frozenset()
    # For an op with an index output: the length of the axis its indices count along (the
    # index-precision rule: fp16 indices are exact only below 2048, N22).
    indexes_along: Callable[[Args], Dim] | None = None
    # An elementwise op as NumPy ufuncs writing with ``out=`` (the reference backend's fast form).
    ufunc: Ufunc | None = None
    by_name: dict[str, Param] = field(init=False, repr=False, compare=False)
    readable: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {p.name: p for p in self.params})
        consts = {p.name for p in self.params if p.const} - self.shape_only
        object.__setattr__(self, "readable", frozenset(consts | self.infer_values))

    def evolve(self, **changes: Any) -> OpDef:
        """Return this declaration with some fields replaced (for a later opset)."""
        return dataclasses.replace(self, **changes)

    def inner_dim(self, args: Args) -> int | None:
        """The contraction length for these arguments; None if the op has none or it is symbolic."""
        return _static(self.contraction, args)

    def weight_axis(self, args: Args, param: str) -> int | None:
        """The output-channel axis of constant operand ``param`` (non-negative), or None."""
        if self.output_axis is None:
            return None
        axis = self.output_axis(args, param)
        return None if axis is None else axis % getattr(args, param).rank

    def index_range(self, args: Args) -> int | None:
        """The length of the axis the op's index output counts along; None if none or symbolic."""
        return _static(self.indexes_along, args)

    def input_channels(self, args: Args) -> int | None:
        """The activation input's channel count; None if the op declares none or it is symbolic."""
        return _static(self.in_channels, args)

    def op_cost(self, args: Args, outs: tuple[TensorType, ...]) -> Cost:
        """Return this op's cost for concrete argument and output types."""
        if self.cost is not None:
            return self.cost(args, outs)
        return elementwise_cost(args, outs, self.flops_per_element)


def _static(fact: Callable[[Args], Dim] | None, args: Args) -> int | None:
    value = None if fact is None else fact(args)
    return value if isinstance(value, int) else None


def elementwise_cost(args: Args, outs: tuple[TensorType, ...], per_element: float = 1.0) -> Cost:
    """Default cost: a fixed number of operations per output element; read all inputs once."""
    written = sum(t.nbytes or 0 for t in outs)
    return Cost(
        flops=per_element * sum(t.numel or 0 for t in outs),
        bytes_read=args.input_bytes(),
        bytes_written=written,
    )


class Args:
    """An op's arguments as seen by ``infer`` and ``cost``: ``args.x`` is a Value.

    Omitted parameters resolve to their declared default (as an inline const
    value) or to None. Variadic parameters are tuples of values.
    """

    __slots__ = ("opdef", "given", "_resolved")

    def __init__(self, opdef: OpDef, given: dict[str, Any]) -> None:
        self.opdef = opdef
        self.given = given
        self._resolved: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        try:
            return self.given[name]
        except KeyError:
            pass
        try:
            return self._resolved[name]
        except KeyError:
            pass
        try:
            p = self.opdef.by_name[name]
        except KeyError:
            raise AttributeError(f"op {self.opdef.name!r} has no parameter {name!r}") from None
        value = None
        if p.has_default:
            if callable(p.default):
                raw = p.default(self)
                value = None if raw is None else literal_value(raw, p, self)
            elif p.default is not None:
                try:  # a fixed default in no type domain is the same Value every time
                    value = _constant_default(p) if p.domain is None else None
                except TypeError:  # an unhashable default: made each time
                    value = None
                if value is None:
                    value = literal_value(p.default, p, self)
        self._resolved[name] = value
        return value

    def const(self, name: str) -> Any:
        """Return a parameter's compile-time value (None if omitted without default)."""
        v = getattr(self, name)
        return None if v is None else v.const

    def input_bytes(self) -> int:
        """Bytes of every tensor argument given, consts included."""
        total = 0
        for v in self.given.values():
            for item in v if isinstance(v, tuple) else (v,):
                total += item.type.nbytes or 0
        return total


_REGISTRY: dict[str, list[OpDef]] = {}
# (name, opset) -> the declaration get() found, so a reader may look one up without a call (the
# parser, per statement); emptied by register, bounded (a program may spell any opset)
RESOLVED: dict[tuple[str, str], OpDef] = {}
_RESOLVED_ENTRIES = 4096


def register(opdef: OpDef) -> OpDef:
    """Add a declaration; a name may be registered once per opset (``since``)."""
    if opdef.since not in OPSETS:
        raise ValueError(f"op {opdef.name!r}: unknown opset {opdef.since!r}; known: {OPSETS}")
    unknown = sorted(opdef.traits - VOCABULARY.keys())
    if unknown:
        raise ValueError(
            f"op {opdef.name!r}: unknown traits {unknown}; declare them in anekit.mil.ops.traits "
            f"(known: {', '.join(sorted(VOCABULARY))})"
        )
    versions = _REGISTRY.setdefault(opdef.name, [])
    if any(v.since == opdef.since for v in versions):
        raise ValueError(f"op {opdef.name!r} is already registered for {opdef.since}")
    versions.append(opdef)
    versions.sort(key=lambda d: OPSETS.index(d.since))
    RESOLVED.clear()
    return opdef


def get(name: str, opset: str = OPSETS[-1]) -> OpDef:
    """Return the declaration of ``name`` in force for ``opset``; MilTypeError names what is wrong."""
    found = RESOLVED.get((name, opset))
    if found is not None:
        return found
    versions = _REGISTRY.get(name)
    if not versions:
        raise MilTypeError(f"unknown op {name!r}", op=name)
    level = OPSETS.index(opset) if opset in OPSETS else len(OPSETS) - 1
    for opdef in reversed(versions):
        if OPSETS.index(opdef.since) <= level:
            if len(RESOLVED) < _RESOLVED_ENTRIES:
                RESOLVED[(name, opset)] = opdef
            return opdef
    raise MilTypeError(
        f"needs opset {versions[0].since} or later; this function is {opset}", op=name
    )


def all_ops() -> list[OpDef]:
    """Return the newest declaration of every registered op, sorted by name."""
    return [_REGISTRY[name][-1] for name in sorted(_REGISTRY)]


def names() -> list[str]:
    return sorted(_REGISTRY)


def as_tuple(result: TensorType | tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    """Normalise an infer result to a tuple of output types."""
    return result if isinstance(result, tuple) else (result,)


@functools.lru_cache(maxsize=1024)
def _constant_default(p: Param) -> Any:
    """The Value of a default that depends on nothing else (made once; its array read-only)."""
    value = literal_value(p.default, p)
    if isinstance(value.const, np.ndarray):
        value.const.flags.writeable = False
    return value


def received(const: Any) -> Any:
    """A constant as every op's ``reference`` receives it (the one convention, for the reference
    backend, its interpreter and constant folding): fp16 upcast to float32, strings as str."""
    if isinstance(const, str):
        return const
    array = np.asarray(const)
    return array.astype(np.float32) if array.dtype == np.float16 else array


def const_ints(value: Any) -> list[int]:
    """A const int tensor or scalar as a Python list of ints."""
    flat = np.asarray(value).ravel()
    if flat.dtype.kind in "iu":
        return flat.tolist()  # Python ints already, without a call per element
    return [int(v) for v in flat]
