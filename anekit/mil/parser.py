"""MIL text parser: reads the program(1.3) and legacy program(1.0) dialects into a verified Program."""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import MilSyntaxError, MilTypeError, WeightFileError
from anekit.mil import blob
from anekit.mil.ops import registry
from anekit.mil.program import BlobRef, Function, Operation, Program, Value
from anekit.mil.types import DType, TensorType
from anekit.mil.verify import check_function, check_op
from anekit.mil.weights import WeightSource

_TOKEN = re.compile(
    r"tensor<\s*\w+\s*,\s*\[[\w\s,.+-]*\]\s*>"  # a whole tensor type, parsed once and cached
    r'|"(?:[^"\\\n]|\\.)*"'  # string
    r"|[-+]?0[xX][0-9a-fA-F]*\.?[0-9a-fA-F]*(?:[pP][-+]?\d+)?"  # hex float / hex int
    r"|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"  # decimal
    r"|[A-Za-z_@][\w.@/-]*"  # identifier, keyword, type
    r"|->"
    r"|(?://|#).*"  # comment to end of line
    r"|\S"  # any other single character (punctuation, or an error)
)
_IDENT = re.compile(r"[A-Za-z_][\w]*\Z")
_TYPE_PARTS = re.compile(r"tensor<\s*(?P<dtype>\w+)\s*,\s*\[(?P<dims>[^\]]*)\]\s*>")
# type token -> type; scalar type names are tokens too
_TYPES: dict[str, TensorType] = {d.value: TensorType(d, ()) for d in DType}
_SCALAR_NAMES = {d.value for d in DType}
# A whole-line const statement: `TYPE name = const()[name = string("op"), val = LITERAL];`
_CONST_LINE = re.compile(
    r'\s*(?P<type>tensor<[^>]*>|\w+) (?P<name>\w+) = const\(\)'
    r'\[name = string\("(?P<op_name>\w+)"\), val = (?P<literal>.*)\];\s*\Z'
)
# A whole-line op whose arguments are names or tuples of names (see _Parser.op_line)
_OP_LINE = re.compile(
    r"\s*(?P<type>tensor<[^>]*>|\w+) (?P<name>\w+) = (?P<op>\w+)\((?P<args>[\w =,()]*)\)"
    r'\[name = string\("(?P<op_name>\w+)"\)\];\s*\Z'
)
_ARG = re.compile(r"(\w+) = (\([\w, ]*\)|\w+)")
_BLOB_LITERAL = re.compile(
    r'(?P<type>tensor<[^>]*>)\(BLOBFILE\(path = string\("(?P<path>[^"\\]*)"\), '
    r"offset = uint64\((?P<offset>\d+)\)\)\)\Z"
)
# literal text -> its parsed, read-only Value (see _Parser.const_line)
_LITERALS: dict[str, Value] = {}
_INT_RANGES = {d: (int(np.iinfo(d.numpy).min), int(np.iinfo(d.numpy).max)) for d in DType if d.is_int}


def parse(
    text: str,
    weights: dict[str, bytes] | str | Path | None = None,
    *,
    file: str | None = None,
) -> Program:
    """Parse MIL text into a verified Program.

    Args:
        text (str): the program, in the program(1.3) or legacy program(1.0) dialect.
        weights (dict | path): weight files as ``{"@model_path/weights/x.bin": bytes}``,
            or the directory holding ``weights/`` (a model directory) or the files.
        file (str): a name for error messages.
    """
    return _Parser(text, WeightSource(weights), file).program()


def load(directory: str | Path) -> Program:
    """Load a program saved with ``Program.save``: ``model.mil`` and ``weights/``."""
    root = Path(directory)
    mil_path = root / "model.mil"
    try:
        text = mil_path.read_text(encoding="utf-8")
    except OSError as e:
        raise FileNotFoundError(f"{mil_path}: cannot read model.mil ({e.strerror})") from e
    return parse(text, root / "weights", file=str(mil_path))


class _Parser:
    def __init__(self, text: str, weights: WeightSource, file: str | None) -> None:
        self.text = text
        self.weights = weights
        self.file = file
        self.lines = text.split("\n")
        self.toks: list[str] = []
        self.line_starts: list[int] = []
        # token index -> (name, declared type, literal, line number) of a whole-line const
        self.fast: dict[int, tuple[str, TensorType, Value, int]] = {}
        findall = _TOKEN.findall
        for line_no, line in enumerate(self.lines):
            self.line_starts.append(len(self.toks))
            if "const()" in line and self.fast_const(line, line_no):
                continue
            found = findall(line)
            if found and found[-1].startswith(("//", "#")):
                found.pop()
            self.toks.extend(found)
        self.toks.append("")  # end marker
        self.i = 0
        self.env: dict[str, Value] = {}

    # -- token helpers ---------------------------------------------------------------------
    def where(self, index: int) -> tuple[int, int]:
        """Return (line, column) of token ``index``, both 1-based."""
        index = min(index, len(self.toks) - 1)
        line_no = bisect_right(self.line_starts, index) - 1
        if index == len(self.toks) - 1:  # end of input
            line_no = len(self.lines) - 1
            return line_no + 1, len(self.lines[line_no]) + 1
        k = index - self.line_starts[line_no]
        for n, m in enumerate(_TOKEN.finditer(self.lines[line_no])):
            if n == k:
                return line_no + 1, m.start() + 1
        return line_no + 1, 1

    def error(self, message: str, index: int | None = None) -> MilSyntaxError:
        line, col = self.where(self.i if index is None else index)
        return MilSyntaxError(
            message, line=line, column=col, source_line=self.lines[line - 1], file=self.file
        )

    def type_error(self, err: MilTypeError, index: int) -> MilTypeError:
        line, col = self.where(index)
        return MilTypeError(
            err.message, op=err.op, param=err.param, line=line, column=col, file=self.file
        )

    def peek(self) -> str:
        return self.toks[self.i]

    def next(self) -> str:
        tok = self.toks[self.i]
        if not tok:
            raise self.error("unexpected end of input")
        self.i += 1
        return tok

    def expect(self, expected: str) -> None:
        tok = self.toks[self.i]
        if tok != expected:
            raise self.error(f"expected {expected!r}, found {tok or 'end of input'!r}")
        self.i += 1

    def accept(self, tok: str) -> bool:
        if self.toks[self.i] == tok:
            self.i += 1
            return True
        return False

    def ident(self, what: str) -> str:
        tok = self.toks[self.i]
        if not _IDENT.match(tok):
            raise self.error(f"expected {what}, found {tok or 'end of input'!r}")
        self.i += 1
        return tok

    def integer(self, what: str) -> int:
        tok = self.toks[self.i]
        try:
            value = int(tok, 16) if tok.lower().startswith(("0x", "-0x")) else int(tok)
        except ValueError:
            raise self.error(f"expected {what} (an integer), found {tok or 'end of input'!r}") from None
        self.i += 1
        return value

    # -- grammar ---------------------------------------------------------------------------
    def program(self) -> Program:
        self.expect("program")
        self.expect("(")
        version = self.next()
        if version not in ("1.0", "1.3"):
            raise self.error(f"unsupported program version {version!r}; expected 1.0 or 1.3", self.i - 1)
        self.expect(")")
        build_info: dict[str, Any] = {}
        if self.accept("["):
            while True:
                key = self.ident("an attribute name")
                self.expect("=")
                value_index = self.i
                value = self.literal_or_dict()
                if key == "buildInfo":
                    if not isinstance(value, dict):
                        raise self.error("buildInfo must be a dict", value_index)
                    build_info = value
                if not self.accept(","):
                    break
            self.expect("]")
        self.expect("{")
        functions: dict[str, Function] = {}
        while self.peek() == "func":
            start = self.i
            fn = self.function()
            if fn.name in functions:
                raise self.error(f"function {fn.name!r} is defined twice", start + 1)
            functions[fn.name] = fn
        self.expect("}")
        if self.peek():
            raise self.error(f"unexpected {self.peek()!r} after the program")
        if not functions:
            raise self.error("a program needs at least one function", self.i - 1)
        return Program(functions, version=version, build_info=build_info)

    def function(self) -> Function:
        self.expect("func")
        name = self.ident("a function name")
        self.expect("<")
        opset_index = self.i
        opset = self.ident("an opset such as ios18")
        if opset not in registry.OPSETS:
            raise self.error(f"unknown opset {opset!r}; expected one of {', '.join(registry.OPSETS)}", opset_index)
        self.expect(">")
        self.expect("(")
        self.env = {}
        inputs: list[Value] = []
        while self.peek() != ")":
            t = self.type()
            index = self.i
            v = Value(self.ident("an input name"), t)
            self.define(v, index)
            inputs.append(v)
            if not self.accept(","):
                break
        self.expect(")")
        self.expect("{")
        ops: list[Operation] = []
        while self.peek() != "}":
            ops.append(self.statement(opset))
        self.expect("}")
        self.expect("->")
        self.expect("(")
        outputs: list[Value] = []
        while self.peek() != ")":
            outputs.append(self.use(self.ident("an output name"), self.i - 1))
            if not self.accept(","):
                break
        self.expect(")")
        self.expect(";")
        fn = Function(name, tuple(inputs), tuple(ops), tuple(outputs), opset)
        check_function(fn)
        return fn

    def statement(self, opset: str) -> Operation:
        start = self.i
        fast = self.const_line(start, opset) or self.op_line(start, opset)
        if fast is not None:
            return fast
        declared: list[tuple[TensorType, str, int]] = []
        while True:
            t = self.type()
            index = self.i
            declared.append((t, self.ident("a value name"), index))
            if not self.accept(","):
                break
        self.expect("=")
        op_index = self.i
        op_type = self.ident("an op name")
        try:
            opdef = registry.get(op_type, opset)
        except MilTypeError as e:
            raise self.type_error(e, op_index) from None
        inputs: dict[str, Any] = {}
        positions: dict[str, int] = {}
        self.expect("(")
        while self.peek() != ")":
            key_index = self.i
            key = self.ident("a parameter name")
            if key in inputs:
                raise self.error(f"parameter {key!r} is given twice", key_index)
            self.expect("=")
            positions[key] = key_index
            inputs[key] = self.argument()
            if not self.accept(","):
                break
        self.expect(")")
        attrs: dict[str, Any] = {}
        if self.accept("["):
            while self.peek() != "]":
                key_index = self.i
                key = self.ident("an attribute name")
                self.expect("=")
                value = self.literal_or_dict()
                if key in opdef.by_name and isinstance(value, Value):
                    if key in inputs:
                        raise self.error(f"parameter {key!r} is given twice", key_index)
                    inputs[key] = value
                    positions[key] = key_index
                elif key == "name":
                    if not (isinstance(value, Value) and value.type.dtype is DType.string):
                        raise self.error("attribute 'name' must be a string", key_index)
                    attrs["name"] = value.const
                else:
                    attrs[key] = value
                if not self.accept(","):
                    break
            self.expect("]")
        self.expect(";")
        try:
            types = check_op(opdef, inputs)
        except MilTypeError as e:
            raise self.type_error(e, positions.get(e.param or "", op_index)) from None
        if len(types) != len(declared):
            raise self.type_error(
                MilTypeError(f"declares {len(declared)} outputs, the op produces {len(types)}", op=op_type),
                start,
            )
        line = bisect_right(self.line_starts, start)
        outs = []
        for (declared_type, name, _), inferred in zip(declared, types):
            if declared_type != inferred:
                raise self.type_error(
                    MilTypeError(
                        f"declared type {declared_type} of {name!r} differs from inferred {inferred}",
                        op=op_type,
                    ),
                    start,
                )
            outs.append(Value(name, inferred))
        op = Operation(opdef, inputs, tuple(outs), attrs, line)
        for v, (_, _, index) in zip(outs, declared):
            v.producer = op
            self.define(v, index)
        if "const" in opdef.traits:
            outs[0].const = inputs["val"].const
        return op

    def fast_const(self, line: str, line_no: int) -> bool:
        """Take a whole-line ``const`` statement as one token if its literal is known.

        Most statements of a real program are small consts repeated many times
        (strides, pads, names); reusing their parsed literal, and not tokenizing the
        line, makes parsing several times faster. Anything unusual takes the general
        path, which also reports errors with exact positions.
        """
        m = _CONST_LINE.match(line)
        if m is None or not _IDENT.match(m.group("name")):
            return False
        declared = _TYPES.get(m.group("type"))
        text = m.group("literal")
        literal = _LITERALS.get(text) or self.cache_literal(text) or self.blob_literal(text)
        if declared is None or literal is None or literal.type != declared:
            return False
        self.fast[len(self.toks)] = (m.group("name"), declared, literal, line_no)
        self.toks.append(line.strip())  # readable if an error message ever shows it
        return True

    def const_line(self, start: int, opset: str) -> Operation | None:
        """The const op of a line ``fast_const`` took, or None for an ordinary statement."""
        fast = self.fast.get(start)
        if fast is None:
            return None
        name, declared, literal, line_no = fast
        if name in self.env:
            line = self.lines[line_no]
            raise MilTypeError(
                f"value {name!r} is defined twice",
                line=line_no + 1,
                column=line.index(f" {name} = const()") + 2,
                file=self.file,
            )
        out = Value(name, declared, None, literal.const)
        op_name = _CONST_LINE.match(self.lines[line_no]).group("op_name")  # type: ignore[union-attr]
        opdef = _const_def(opset)
        op = Operation(opdef, {"val": literal}, (out,), {"name": op_name}, line_no + 1)
        out.producer = op
        self.env[name] = out
        self.i = start + 1
        return op

    def op_line(self, start: int, opset: str) -> Operation | None:
        """A whole-line single-output op whose arguments are all names, or None.

        The common statement shape is read with one regular expression instead of
        token by token. Anything that does not fit exactly, or fails a check, returns
        None so the general path parses it and reports errors with their position.
        """
        line_no = bisect_right(self.line_starts, start) - 1
        if self.line_starts[line_no] != start:
            return None
        m = _OP_LINE.match(self.lines[line_no])
        if m is None:
            return None
        declared = _TYPES.get(m.group("type"))
        name, args_text = m.group("name"), m.group("args")
        pairs = _ARG.findall(args_text)
        if declared is None or name in self.env or ", ".join(f"{k} = {v}" for k, v in pairs) != args_text:
            return None
        inputs: dict[str, Any] = {}
        for key, ref in pairs:
            if key in inputs:
                return None
            names = ref[1:-1].split(", ") if ref.startswith("(") else None
            try:
                inputs[key] = tuple(self.env[n] for n in names) if names is not None else self.env[ref]
            except KeyError:
                return None
        try:
            opdef = registry.get(m.group("op"), opset)
            types = check_op(opdef, inputs)
        except MilTypeError:
            return None
        if types != (declared,):
            return None
        out = Value(name, declared)
        op = Operation(opdef, inputs, (out,), {"name": m.group("op_name")}, line_no + 1)
        out.producer = op
        self.env[name] = out
        self.i = self.line_starts[line_no + 1]
        return op

    def blob_literal(self, text: str) -> Value | None:
        """A ``BLOBFILE`` literal read directly, or None to let the general path report errors."""
        m = _BLOB_LITERAL.match(text)
        t = _TYPES.get(m.group("type")) if m else None
        if m is None or t is None or not t.is_static:
            return None
        path, offset = m.group("path"), int(m.group("offset"))
        try:
            data = self.weights.read(path)
            array = blob.read_tensor(data, offset, t.dtype.numpy, t.shape, file=path, copy=False)  # type: ignore[arg-type]
        except WeightFileError:
            return None
        return Value("", t, None, array, BlobRef(path, offset))

    def cache_literal(self, text: str) -> Value | None:
        """Parse a literal on its own and remember it (read-only) for the lines that repeat it."""
        if "BLOBFILE" in text or len(_LITERALS) > 4096:
            return None
        try:
            sub = _Parser(text, self.weights, None)
            value = sub.literal()
        except (MilSyntaxError, MilTypeError):
            return None
        if sub.peek():
            return None
        if isinstance(value.const, np.ndarray):
            value.const.flags.writeable = False  # shared by every line that repeats it
        _LITERALS[text] = value
        return value

    def argument(self) -> Value | tuple[Value, ...]:
        if self.accept("("):
            items: list[Value] = []
            while self.peek() != ")":
                items.append(self.value_ref())
                if not self.accept(","):
                    break
            self.expect(")")
            return tuple(items)
        return self.value_ref()

    def value_ref(self) -> Value:
        tok = self.peek()
        if tok == "tensor" or tok in _SCALAR_NAMES or tok == "dict":
            value = self.literal_or_dict()
            if not isinstance(value, Value):
                raise self.error("a dict cannot be an op argument", self.i - 1)
            return value
        known = self.env.get(tok)
        if known is not None:
            self.i += 1
            return known
        index = self.i
        return self.use(self.ident("a value name or literal"), index)

    def use(self, name: str, index: int) -> Value:
        try:
            return self.env[name]
        except KeyError:
            raise self.type_error(MilTypeError(f"undefined value {name!r}"), index) from None

    def define(self, v: Value, index: int) -> None:
        if v.name in self.env:
            raise self.type_error(MilTypeError(f"value {v.name!r} is defined twice"), index)
        self.env[v.name] = v

    # -- types and literals ----------------------------------------------------------------
    def type(self) -> TensorType:
        index = self.i
        tok = self.next()
        cached = _TYPES.get(tok)
        if cached is not None:
            return cached
        if tok.startswith("tensor<"):
            return self.type_token(tok, index)
        if tok != "tensor":
            raise self.error(f"expected a type, found {tok!r}", index)
        self.expect("<")
        dtype = self.dtype()
        self.expect(",")
        self.expect("[")
        dims: list[int | str] = []
        while self.peek() != "]":
            tok = self.peek()
            if _IDENT.match(tok):
                dims.append(self.next())
            else:
                value = self.integer("a dimension")
                if value < 0:
                    raise self.error(f"dimension must be >= 0, found {value}", self.i - 1)
                dims.append(value)
            if not self.accept(","):
                break
        self.expect("]")
        self.expect(">")
        return TensorType(dtype, tuple(dims))

    def type_token(self, tok: str, index: int) -> TensorType:
        """Parse a whole ``tensor<dtype, [dims]>`` token; errors point inside it."""
        m = _TYPE_PARTS.match(tok)
        assert m is not None  # the tokenizer only emits tokens of this shape
        name = m.group("dtype")
        if name not in _SCALAR_NAMES:
            raise self.error_in(index, m.start("dtype"), f"unknown dtype {name!r}; expected one of {', '.join(sorted(_SCALAR_NAMES))}")
        dims: list[int | str] = []
        body_start = m.start("dims")
        for d in re.finditer(r"[^\s,]+", m.group("dims")):
            text = d.group()
            if _IDENT.match(text):
                dims.append(text)
                continue
            try:
                value = int(text)
            except ValueError:
                raise self.error_in(index, body_start + d.start(), f"expected a dimension (an integer), found {text!r}") from None
            if value < 0:
                raise self.error_in(index, body_start + d.start(), f"dimension must be >= 0, found {value}")
            dims.append(value)
        t = TensorType(DType(name), tuple(dims))
        _TYPES[tok] = t
        return t

    def error_in(self, index: int, offset: int, message: str) -> MilSyntaxError:
        """A syntax error ``offset`` characters into token ``index``."""
        line, col = self.where(index)
        return MilSyntaxError(
            message, line=line, column=col + offset, source_line=self.lines[line - 1], file=self.file
        )

    def dtype(self) -> DType:
        index = self.i
        tok = self.next()
        if tok == "uint64":
            raise self.error("uint64 is only allowed in BLOBFILE offsets", index)
        if tok not in _SCALAR_NAMES:
            raise self.error(f"unknown dtype {tok!r}; expected one of {', '.join(sorted(_SCALAR_NAMES))}", index)
        return DType(tok)

    def literal_or_dict(self) -> Any:
        if self.peek() == "dict":
            return self.dict_literal()
        return self.literal()

    def literal(self) -> Value:
        """Parse ``fp16(0x1p-3)``, ``tensor<int32, [2]>([1, 2])`` or a BLOBFILE tensor."""
        index = self.i
        if self.peek() == "uint64":
            raise self.error("uint64 literal outside BLOBFILE", index)
        t = self.type()
        self.expect("(")
        if t.dtype is DType.string and not t.shape and self.toks[self.i + 1] == ")":
            value = Value("", t, None, self.element(DType.string))  # names: the common case
        elif self.peek() == "BLOBFILE":
            value = self.blobfile(t, index)
        else:
            value = self.values(t, index)
        self.expect(")")
        return value

    def values(self, t: TensorType, index: int) -> Value:
        if not t.is_static:
            raise self.error(f"a literal needs a static shape, found {t}", index)
        flat: list[Any] = []
        if self.peek() == "[":
            self.flat_list(t.dtype, flat)
        else:
            flat.append(self.element(t.dtype))
        if len(flat) != t.numel:
            raise self.error(f"{t} needs {t.numel} values, found {len(flat)}", index)
        if t.dtype is DType.string:
            const: Any = flat[0] if t.is_scalar else np.array(flat, dtype=object).reshape(t.shape)
        else:
            const = self.checked_array(flat, t, index)
        return Value("", t, None, const)

    def checked_array(self, flat: list[Any], t: TensorType, index: int) -> np.ndarray:
        if t.dtype.is_int:
            lo, hi = _INT_RANGES[t.dtype]
            if flat and (min(flat) < lo or max(flat) > hi):
                bad = next(x for x in flat if not lo <= x <= hi)
                raise self.error(f"value {bad} out of range for {t.dtype}", index)
        with np.errstate(over="ignore"):
            arr = np.array(flat, dtype=t.dtype.numpy)
        if t.dtype is DType.fp16:
            finite = np.isfinite(np.array(flat, dtype=np.float64))
            if (finite & ~np.isfinite(arr)).any():
                raise self.error("value overflows fp16", index)
        return arr.reshape(t.shape)

    def flat_list(self, dtype: DType, out: list[Any]) -> None:
        self.expect("[")
        while self.peek() != "]":
            if self.peek() == "[":
                self.flat_list(dtype, out)
            else:
                out.append(self.element(dtype))
            if not self.accept(","):
                break
        self.expect("]")

    def element(self, dtype: DType) -> Any:
        index = self.i
        tok = self.next()
        if dtype is DType.string:
            if len(tok) < 2 or tok[0] != '"' or tok[-1] != '"':
                raise self.error(f"expected a string literal, found {tok!r}", index)
            return _unquote(tok)
        if dtype is DType.bool:
            if tok not in ("true", "false"):
                raise self.error(f"expected true or false, found {tok!r}", index)
            return tok == "true"
        if dtype.is_float:
            return self.float_token(tok, index)
        try:
            return int(tok, 16) if "x" in tok.lower() else int(tok)
        except ValueError:
            raise self.error(f"expected an integer for {dtype}, found {tok!r}", index) from None

    def float_token(self, tok: str, index: int) -> float:
        if tok in ("-", "+") and self.peek() in ("inf", "nan"):
            sign = -1.0 if tok == "-" else 1.0
            return sign * float(self.next())
        if tok in ("inf", "nan"):
            return float(tok)
        try:
            return float.fromhex(tok) if "x" in tok.lower() else float(tok)
        except ValueError:
            raise self.error(f"expected a number, found {tok!r}", index) from None

    def blobfile(self, t: TensorType, index: int) -> Value:
        self.expect("BLOBFILE")
        self.expect("(")
        self.expect("path")
        self.expect("=")
        path_value = self.literal()
        if path_value.type != TensorType(DType.string, ()):
            raise self.error("BLOBFILE path must be a string", index)
        self.expect(",")
        self.expect("offset")
        self.expect("=")
        offset = self.uint64()
        self.expect(")")
        path = str(path_value.const)
        if not t.is_static:
            raise self.error(f"a weight needs a static shape, found {t}", index)
        try:
            data = self.weights.read(path)
            array = blob.read_tensor(data, offset, t.dtype.numpy, t.shape, file=path, copy=False)  # type: ignore[arg-type]
        except WeightFileError as e:
            line = self.where(index)[0]
            where = f"{self.file or '<mil>'}:{line}"
            raise WeightFileError(f"{e.message} (BLOBFILE at {where})", file=path, offset=e.offset) from None
        return Value("", t, None, array, BlobRef(path, offset))

    def uint64(self) -> int:
        index = self.i
        m = _TYPE_PARTS.match(self.peek())
        if m and m.group("dtype") == "uint64" and not m.group("dims").strip():
            self.i += 1  # the legacy spelling tensor<uint64, []>
        else:
            self.expect("uint64")
        self.expect("(")
        value = self.integer("an offset")
        self.expect(")")
        if not 0 <= value < 2**64:
            raise self.error(f"offset {value} is not a uint64", index)
        return value

    def dict_literal(self) -> dict[str, Any]:
        self.expect("dict")
        self.expect("<")
        self.type()
        self.expect(",")
        nested = self.dict_type()
        self.expect(">")
        self.expect("(")
        value = self.dict_entries(nested)
        self.expect(")")
        return value

    def dict_type(self) -> int:
        """Skip a dict value type; return how many dict levels it nests."""
        if self.accept("dict"):
            self.expect("<")
            self.type()
            self.expect(",")
            depth = self.dict_type()
            self.expect(">")
            return depth + 1
        self.type()
        return 0

    def dict_entries(self, depth: int) -> dict[str, Any]:
        self.expect("{")
        result: dict[str, Any] = {}
        while self.peek() != "}":
            self.expect("{")
            key = self.element(DType.string)
            self.expect(",")
            result[key] = self.dict_entries(depth - 1) if depth else self.element(DType.string)
            self.expect("}")
            if not self.accept(","):
                break
        self.expect("}")
        return result


@cache
def _const_def(opset: str) -> registry.OpDef:
    return registry.get("const", opset)


def _unquote(tok: str) -> str:
    body = tok[1:-1]
    if "\\" not in body:
        return body
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)
