"""The Builder: write MIL programs in Python, one method per registered op."""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.literals import literal_value
from anekit.mil.ops import registry
from anekit.mil.ops.registry import Args, OpDef
from anekit.mil.ops.traits import ATTRIBUTES, CONST
from anekit.mil.program import Function, Operation, Program
from anekit.mil.types import DType, TensorType, dtype_of, storage_loss
from anekit.mil.values import WEIGHTS_PREFIX, BlobRef, Value
from anekit.mil.verify import check_function, check_op

_CONST = "const"


class Builder:
    """Build one MIL function (``main`` by default) op by op, then ``build()`` a verified Program.

    Ops are methods named after the MIL op, with MIL parameter names as
    keywords; Python scalars, lists and arrays become named consts::

        b = Builder()
        x = b.input("x", (1, 64, 1, 32), "fp16")
        y = b.conv(x=x, weight=b.weight("w", w))
        b.output(y, "y")
        prog = b.build()
    """

    def __init__(self, opset: str = "ios18", function: str = "main") -> None:
        if opset not in registry.OPSETS:
            raise MilTypeError(f"unknown opset {opset!r}; expected one of {registry.OPSETS}")
        _check_name(function, "function name")
        self.opset = opset
        self.function = function
        self._inputs: list[Value] = []
        self._ops: list[Operation] = []
        self._outputs: list[Value] = []
        self._names: set[str] = set()
        self._inlined: set[int] = set()  # const ops whose value an attribute-only op took in
        self._built: set[int] = set()  # values a built Program holds: renaming them would change it
        self._own: set[int] = set()  # every value this function defines (inputs, op outputs)

    # -- values ---------------------------------------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype: str | DType = "fp16") -> Value:
        """Declare a function input of the given shape and dtype."""
        v = Value(self._claim(name), TensorType(DType(dtype), _dims(name, shape)))
        self._inputs.append(v)
        self._own.add(id(v))
        return v

    def const(self, value: Any, name: str | None = None, dtype: str | DType | None = None) -> Value:
        """Add an inline constant (small tensors, scalars, strings); ``dtype`` is kept as
        declared (a sub-byte "uint4" is stored one value per uint8 but typed uint4)."""
        arr = value if isinstance(value, str) else _as_array(value, dtype)
        if dtype is not None and not isinstance(arr, str):
            inline = Value("", TensorType(DType(dtype), tuple(arr.shape)), None, arr)
        else:
            inline = literal_value(arr, registry.get(_CONST).by_name["val"])
        return self._const_op(inline, name or "c")

    def weight(self, name: str, array: Any, dtype: str | DType | None = None) -> Value:
        """Add a constant stored in its own weight file (``BLOBFILE``), as the ANE compiler prefers.

        A sub-byte ``dtype`` ("uint4", "int4", ...) takes one value per element and packs
        them in the weight file.
        """
        try:
            arr = _as_array(array, dtype)
        except MilTypeError as e:
            raise MilTypeError(f"weight {name!r}: {e.message}") from None
        if arr.size == 0:
            raise MilTypeError(
                f"weight {name!r}: shape {arr.shape} is empty; a weight file cannot hold it"
            )
        file = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "weight"
        mil_dtype = dtype_of(arr) if dtype is None else DType(dtype)
        inline = Value("", TensorType(mil_dtype, tuple(arr.shape)), None, arr)
        inline.blob = BlobRef(f"{WEIGHTS_PREFIX}{self._claim_file(file)}.bin", 64)
        return self._const_op(inline, name)

    def output(self, value: Value, name: str | None = None) -> Value:
        """Mark a value as a function output, renaming it to ``name``."""
        self._check_own(value)
        if any(v is value for v in self._outputs):
            raise MilTypeError(f"value {value.name!r} is already an output")
        if name is not None and name != value.name:
            _check_name(name, "output name")
            if id(value) in self._built:
                raise MilTypeError(
                    f"cannot rename {value.name!r} to {name!r}: a Program built earlier holds it; "
                    "name outputs before build()"
                )
            if name in self._names:
                raise MilTypeError(f"output name {name!r} is already used by another value")
            self._names.discard(value.name)
            self._names.add(name)
            producer = value.producer
            if producer is not None and producer.attrs.get("name") == value.name:
                producer.attrs["name"] = name
            value.name = name
        self._outputs.append(value)
        return value

    def build(self) -> Program:
        """Return the verified Program; the builder can keep adding ops afterwards."""
        if not self._outputs:
            raise MilTypeError(f"function {self.function!r} has no outputs; call output() first")
        fn = Function(
            self.function, tuple(self._inputs), self._live_ops(), tuple(self._outputs), self.opset
        )
        check_function(fn)
        self._built.update(id(v) for v in fn.inputs)
        self._built.update(id(v) for op in fn.ops for v in op.outputs)
        return Program({self.function: fn})

    # -- ops ------------------------------------------------------------------------------
    def add_op(self, op_type: str, params: dict[str, Any], name: str | None = None) -> Any:
        """Append an op; returns its output Value (or a tuple for multi-output ops)."""
        opdef = registry.get(op_type, self.opset)
        base = self._unique(name or op_type)
        given = {k: v for k, v in params.items() if v is not None}
        # Arguments already typed (Values, typed NumPy arrays) fix the dtype of the
        # Python numbers that share their type domain.
        partial = Args(opdef, {k: _tuple(v) for k, v in given.items()})
        place = self._inline if ATTRIBUTES in opdef.traits else self._materialize
        inputs: dict[str, Any] = {}
        for key, raw in given.items():
            p = opdef.by_name.get(key)
            if p is None:
                inputs[key] = raw  # let the verifier name the unknown parameter
            elif p.variadic:
                inputs[key] = tuple(
                    place(literal_value(r, p, partial), f"{base}_{key}_{i}")
                    for i, r in enumerate(raw)
                )
            else:
                inputs[key] = place(literal_value(raw, p, partial), f"{base}_{key}")
        args = Args(opdef, inputs)
        for p in opdef.params:
            if p.name not in inputs and p.has_default:
                default = getattr(args, p.name)
                if default is not None:
                    inputs[p.name] = place(default, f"{base}_{p.name}")
        types = check_op(opdef, inputs)
        return self._append(opdef, inputs, types, base)

    def __getattr__(self, op_type: str) -> Any:
        if op_type.startswith("_"):
            raise AttributeError(op_type)
        try:
            registry.get(op_type, self.opset)
        except MilTypeError as e:
            raise AttributeError(f"Builder has no op {op_type!r}: {e}") from None

        def add(name: str | None = None, **params: Any) -> Any:
            return self.add_op(op_type, params, name)

        add.__name__ = op_type
        add.__doc__ = registry.get(op_type, self.opset).doc
        return add

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(registry.names()))

    # -- internals ------------------------------------------------------------------------
    def _live_ops(self) -> tuple[Operation, ...]:
        """All ops but the const ops that were inlined into attributes and are used nowhere else."""
        if not self._inlined:
            return tuple(self._ops)
        used = {id(v) for op in self._ops for v in op.input_values()}
        used.update(id(v) for v in self._outputs)
        return tuple(
            op
            for op in self._ops
            if id(op) not in self._inlined or any(id(v) in used for v in op.outputs)
        )

    def _append(self, opdef: OpDef, inputs: dict, types: tuple[TensorType, ...], base: str) -> Any:
        self._names.add(base)
        names = (
            [base] if len(types) == 1 else [self._unique(f"{base}_{i}") for i in range(len(types))]
        )
        outs = tuple(Value(n, t) for n, t in zip(names, types))
        self._names.update(names)
        op = Operation(opdef, inputs, outs, {"name": base})
        for v in outs:
            v.producer = op
        if CONST in opdef.traits:
            outs[0].const = inputs["val"].const
        self._ops.append(op)
        self._own.update(id(v) for v in outs)
        return outs[0] if len(outs) == 1 else outs

    def _const_op(self, inline: Value, name: str) -> Value:
        opdef = registry.get(_CONST, self.opset)
        base = self._unique(name)
        return self._append(opdef, {"val": inline}, check_op(opdef, {"val": inline}), base)

    def _materialize(self, v: Value, name: str) -> Value:
        return self._const_op(v, name) if v.is_inline else v

    def _inline(self, v: Value, name: str) -> Value:
        """For attribute-only ops: the literal itself, taken out of its const op if it has one."""
        producer = v.producer
        if producer is None or CONST not in producer.opdef.traits:
            return v
        self._inlined.add(id(producer))
        return producer.inputs["val"]

    def _check_own(self, value: Any) -> None:
        """Reject what is not a Value of this builder's function."""
        if not isinstance(value, Value):
            raise MilTypeError(f"expected a Value of this Builder, found {type(value).__name__}")
        if id(value) not in self._own:
            raise MilTypeError(f"value {value.name!r} does not belong to this Builder's function")

    def _claim(self, name: str) -> str:
        _check_name(name, "MIL name")
        if name in self._names:
            raise MilTypeError(f"name {name!r} is already used in this function")
        self._names.add(name)
        return name

    def _unique(self, name: str) -> str:
        name = re.sub(r"[^A-Za-z0-9_]", "_", name)
        if not re.match(r"[A-Za-z_]", name):
            name = "v_" + name
        if name not in self._names:
            return name
        i = 1
        while f"{name}_{i}" in self._names:
            i += 1
        return f"{name}_{i}"

    def _claim_file(self, stem: str) -> str:
        used = {v.blob.path for op in self._ops for v in op.input_values() if v.blob is not None}
        candidate, i = stem, 1
        while f"{WEIGHTS_PREFIX}{candidate}.bin" in used:
            candidate, i = f"{stem}_{i}", i + 1
        return candidate


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise MilTypeError(f"invalid {what} {name!r}: use letters, digits and underscores")


def _dims(name: str, shape: Sequence[int]) -> tuple[int, ...]:
    """The dims of input ``name``: non-negative integers, nothing rounded."""
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise MilTypeError(
            f"input {name!r}: expected a shape of integers, found {shape!r}"
        ) from None
    if any(d < 0 for d in dims):
        raise MilTypeError(f"input {name!r}: dimensions must be >= 0, found {list(dims)}")
    return dims


def _tuple(v: Any) -> Any:
    return tuple(v) if isinstance(v, (list, tuple)) else v


def _as_array(value: Any, dtype: str | DType | None) -> np.ndarray:
    arr = np.asarray(value)
    if dtype is not None:
        target = DType(dtype)
        if arr.dtype.kind in "iuf":
            loss = storage_loss(arr, target)
            if loss is not None:
                how = (
                    "out of range or not integers"
                    if target.is_int
                    else f"pass an array already of {target} to store what it rounds to"
                )
                raise MilTypeError(f"values do not fit in {target} ({how}): {loss}")
        return arr.astype(target.numpy)
    if arr.dtype == np.float64:
        raise MilTypeError(
            "float64 arrays have no MIL type: pass dtype='fp16' or 'fp32' (or convert first)"
        )
    if arr.dtype == np.int64:
        converted = arr.astype(np.int32)
        if not np.array_equal(converted, arr):
            raise MilTypeError("int64 values do not fit in int32")
        return converted
    dtype_of(arr)  # raises for dtypes MIL cannot hold
    return arr
