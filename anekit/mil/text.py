"""MIL text printer: the program(1.3) dialect of ANE_NOTES section 3, and legacy program(1.0)."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.ops import registry
from anekit.mil.ops.traits import ATTRIBUTES
from anekit.mil.types import DType, TensorType, type_text
from anekit.mil.values import BlobRef, Value
from anekit.mil.verify import check_op
from anekit.mil.weights import layout

if TYPE_CHECKING:
    from anekit.mil.program import Function, Operation, Program

DIALECTS = {"ios18": ("1.3", None), "legacy": ("1.0", "ios16")}


def print_program(program: Program, dialect: str = "ios18") -> str:
    """Return the MIL text of a program in the given dialect."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {sorted(DIALECTS)}")
    version, forced_opset = DIALECTS[dialect]
    legacy = dialect == "legacy"
    p = _Printer(legacy, layout(program))
    out = [f"program({version})"]
    if program.build_info:
        out.append(f"[buildInfo = {p.dict_literal(program.build_info)}]")
    out.append("{")
    for fn in program.functions.values():
        opset = forced_opset or fn.opset
        if forced_opset:
            _check_opset(fn, opset)
        params = ", ".join(f"{p.type(v.type)} {v.name}" for v in fn.inputs)
        out.append(f"    func {fn.name}<{opset}>({params}) {{")
        out.extend(p.statement(op) for op in fn.ops)
        out.append(f"    }} -> ({', '.join(v.name for v in fn.outputs)});")
    out.append("}")
    return "\n".join(out) + "\n"


def _check_opset(fn: Function, opset: str) -> None:
    """Verify every op again under ``opset``: printing it there must not change its meaning."""
    for op in fn.ops:
        opdef = registry.get(op.op_type, opset)  # raises, naming the minimum opset
        if opdef is op.opdef:
            continue
        types = check_op(opdef, op.inputs)
        if types != tuple(v.type for v in op.outputs):
            raise MilTypeError(
                f"infers {', '.join(map(str, types))} under {opset} but "
                f"{', '.join(str(v.type) for v in op.outputs)} under {fn.opset}",
                op=op.op_type,
            )


class _Printer:
    def __init__(self, legacy: bool, weight_layout: dict[int, tuple[str, int]]) -> None:
        self.legacy = legacy
        self.layout = weight_layout

    def type(self, t: TensorType) -> str:
        return _type_text(t, self.legacy)

    def statement(self, op: Operation) -> str:
        lhs = ", ".join(f"{self.type(v.type)} {v.name}" for v in op.outputs)
        attribute_only = ATTRIBUTES in op.opdef.traits
        args, attrs = [], [f"name = {self.scalar(DType.string, op.name)}"]
        for key in sorted(op.inputs):
            v = op.inputs[key]
            if attribute_only:
                attrs.append(f"{key} = {self.literal(v)}")
            elif isinstance(v, tuple):
                args.append(f"{key} = ({', '.join(self.ref(x) for x in v)})")
            else:
                args.append(f"{key} = {self.ref(v)}")
        for key in sorted(op.attrs):
            if key != "name":
                attrs.append(f"{key} = {self.python_literal(op.attrs[key])}")
        return f"        {lhs} = {op.op_type}({', '.join(args)})[{', '.join(attrs)}];"

    def ref(self, v: Value) -> str:
        return self.literal(v) if v.is_inline else v.name

    def literal(self, v: Value) -> str:
        t = v.type
        if v.blob is not None:
            path, offset = self.layout[id(v)]
            return (
                f"{self.type(t)}(BLOBFILE(path = {self.scalar(DType.string, path)}, "
                f"offset = {self.uint64(offset)}))"
            )
        if t.is_scalar:
            return self.scalar(t.dtype, v.const)
        items = ", ".join(_element(t.dtype, x) for x in np.asarray(v.const).ravel().tolist())
        return f"{self.type(t)}([{items}])"

    def scalar(self, dtype: DType, value: Any) -> str:
        text = _element(dtype, value.item() if isinstance(value, np.ndarray) else value)
        return f"tensor<{dtype.value}, []>({text})" if self.legacy else f"{dtype.value}({text})"

    def uint64(self, n: int) -> str:
        return f"tensor<uint64, []>({n})" if self.legacy else f"uint64({n})"

    def dict_literal(self, d: dict[str, Any]) -> str:
        key_type = "tensor<string, []>" if self.legacy else "string"
        entries = ", ".join(f"{{{_string(k)}, {self._dict_value(v)}}}" for k, v in d.items())
        return f"dict<{key_type}, {self._dict_type(d)}>({{{entries}}})"

    def _dict_type(self, d: dict[str, Any]) -> str:
        inner = next(iter(d.values()), "")
        if isinstance(inner, dict):
            key_type = "tensor<string, []>" if self.legacy else "string"
            return f"dict<{key_type}, {self._dict_type(inner)}>"
        return "tensor<string, []>" if self.legacy else "string"

    def _dict_value(self, v: Any) -> str:
        if isinstance(v, dict):
            return (
                "{"
                + ", ".join(f"{{{_string(k)}, {self._dict_value(x)}}}" for k, x in v.items())
                + "}"
            )
        return _string(str(v))

    def python_literal(self, value: Any) -> str:
        if isinstance(value, dict):
            return self.dict_literal(value)
        if isinstance(value, BlobRef):
            raise TypeError("BLOBFILE attributes belong to a value")
        return self.literal(value)


@lru_cache(maxsize=4096)
def _type_text(t: TensorType, legacy: bool) -> str:
    return type_text(t, legacy=legacy)


def _string(s: str) -> str:
    # \r too: a reader that translates newlines would otherwise split the line
    escaped = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + escaped + '"'


def _element(dtype: DType, x: Any) -> str:
    if dtype is DType.string:
        return _string(str(x))
    if dtype is DType.bool:
        return "true" if x else "false"
    if dtype.is_float:
        return _float(float(x))
    return str(int(x))


def _float(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    h = x.hex()  # exact, and what coremltools prints: 0x1.8p+1
    mantissa, exponent = h.split("p")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}p{exponent}"
