"""MIL text tokens and literals: the token reader the parser is built on.

It splits text into tokens line by line (so any token maps back to a line and
column), and reads types and literals: scalars, tensors, BLOBFILE weights and
the dicts of buildInfo.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache
from typing import Any

import numpy as np

from anekit.errors import MilSyntaxError, MilTypeError, WeightFileError
from anekit.mil.types import DType, TensorType
from anekit.mil.values import BlobRef, Value
from anekit.mil.weights import WeightSource

TOKEN = re.compile(
    r"tensor<\s*\w+\s*,\s*\[[\w\s,.+-]*\]\s*>"  # a whole tensor type, parsed once and cached
    r'|"(?:[^"\\\n]|\\.)*"'  # string
    r"|[-+]?0[xX][0-9a-fA-F]*\.?[0-9a-fA-F]*(?:[pP][-+]?\d+)?"  # hex float / hex int
    r"|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"  # decimal
    r"|[A-Za-z_@][\w.@/-]*"  # identifier, keyword, type
    r"|->"
    r"|(?://|#).*"  # comment to end of line
    r"|\S"  # any other single character (punctuation, or an error)
)
IDENT = re.compile(r"[A-Za-z_][\w]*\Z")
_TYPE_PARTS = re.compile(r"tensor<\s*(?P<dtype>\w+)\s*,\s*\[(?P<dims>[^\]]*)\]\s*>")
_TYPE_TOKEN = re.compile(r"tensor<\s*\w+\s*,\s*\[[\w\s,.+-]*\]\s*>\Z")  # as TOKEN emits them
SCALAR_TYPES: dict[str, TensorType] = {d.value: TensorType(d, ()) for d in DType}
SCALAR_NAMES = {d.value for d in DType}
# The parser remembers the types and small literals it has read, across programs, because real
# programs repeat a few of them thousands of times; bounded, so the memory is not kept for good.
CACHE_ENTRIES = 4096
CACHED_LITERAL_CHARS = 256  # a longer literal is read each time it occurs
_BLOB_LITERAL = re.compile(
    r'(?P<type>tensor<[^>]*>)\(BLOBFILE\(path = string\("(?P<path>[^"\\]*)"\), '
    r"offset = uint64\((?P<offset>\d+)\)\)\)\Z"
)
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}  # what a backslash and letter stand for in a string
_INT_RANGES = {
    d: (int(np.iinfo(d.numpy).min), int(np.iinfo(d.numpy).max)) for d in DType if d.is_int
}


class TokenReader:
    """Tokens of MIL text with their positions, and the readers of types and literals."""

    def __init__(self, text: str, weights: WeightSource, file: str | None) -> None:
        self.text = text
        self.weights = weights
        self.file = file
        self.lines = text.split("\n")
        self.toks: list[str] = []
        self.line_starts: list[int] = []
        findall = TOKEN.findall
        for line_no, line in enumerate(self.lines):
            self.line_starts.append(len(self.toks))
            if self.take_line(line, line_no):
                continue
            found = findall(line)
            if found and found[-1].startswith(("//", "#")):
                found.pop()
            self.toks.extend(found)
        self.toks.append("")  # end marker
        self.i = 0

    def take_line(self, line: str, line_no: int) -> bool:
        """Let a subclass read a whole line itself (as one token); the default never does."""
        return False

    def literal_text(self, text: str) -> Value | None:
        """The Value of a whole literal, or None to let the general path read it (and its errors)."""
        if "BLOBFILE" in text:
            return self.blob_literal(text)
        if len(text) <= CACHED_LITERAL_CHARS:
            return _cached_literal(text)
        return _standalone_literal(text)

    def where(self, index: int) -> tuple[int, int]:
        """Return (line, column) of token ``index``, both 1-based."""
        index = min(index, len(self.toks) - 1)
        line_no = bisect_right(self.line_starts, index) - 1
        if index == len(self.toks) - 1:  # end of input
            line_no = len(self.lines) - 1
            return line_no + 1, len(self.lines[line_no]) + 1
        k = index - self.line_starts[line_no]
        for n, m in enumerate(TOKEN.finditer(self.lines[line_no])):
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
        if not IDENT.match(tok):
            raise self.error(f"expected {what}, found {tok or 'end of input'!r}")
        self.i += 1
        return tok

    def integer(self, what: str) -> int:
        tok = self.toks[self.i]
        try:
            value = int(tok, 16) if tok.lower().startswith(("0x", "-0x")) else int(tok)
        except ValueError:
            raise self.error(
                f"expected {what} (an integer), found {tok or 'end of input'!r}"
            ) from None
        self.i += 1
        return value

    # -- grammar ---------------------------------------------------------------------------
    def blob_literal(self, text: str) -> Value | None:
        """A ``BLOBFILE`` literal read directly, or None to let the general path report errors."""
        m = _BLOB_LITERAL.match(text)
        t = known_type(m.group("type")) if m else None
        if m is None or t is None or not t.is_static:
            return None
        path, offset = m.group("path"), int(m.group("offset"))
        try:
            array = self.weights.tensor(path, offset, t)
        except WeightFileError:
            return None
        return Value("", t, None, array, BlobRef(path, offset))

    def type(self) -> TensorType:
        index = self.i
        tok = self.next()
        cached = SCALAR_TYPES.get(tok)
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
            if IDENT.match(tok):
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
        try:
            return _tensor_type(tok)
        except _BadTypeToken as e:
            raise self.error_in(index, e.offset, e.message) from None

    def error_in(self, index: int, offset: int, message: str) -> MilSyntaxError:
        """A syntax error ``offset`` characters into token ``index``."""
        line, col = self.where(index)
        return MilSyntaxError(
            message,
            line=line,
            column=col + offset,
            source_line=self.lines[line - 1],
            file=self.file,
        )

    def dtype(self) -> DType:
        index = self.i
        tok = self.next()
        if tok == "uint64":
            raise self.error("uint64 is only allowed in BLOBFILE offsets", index)
        if tok not in SCALAR_NAMES:
            raise self.error(
                f"unknown dtype {tok!r}; expected one of {', '.join(sorted(SCALAR_NAMES))}", index
            )
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
        if t.dtype is DType.string and not t.shape and self.toks[self.i + 1 : self.i + 2] == [")"]:
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
            array = self.weights.tensor(path, offset, t)
        except WeightFileError as e:
            line = self.where(index)[0]
            where = f"{self.file or '<mil>'}:{line}"
            raise WeightFileError(
                f"{e.message} (BLOBFILE at {where})", file=path, offset=e.offset
            ) from None
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


class _BadTypeToken(Exception):
    """A tensor type token that is not a type: what is wrong, and where inside the token."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset
        self.message = message


@lru_cache(maxsize=CACHE_ENTRIES)
def _tensor_type(tok: str) -> TensorType:
    """The type of a ``tensor<dtype, [dims]>`` token; raises _BadTypeToken (not cached)."""
    m = _TYPE_PARTS.match(tok)
    assert m is not None  # the tokenizer only emits tokens of this shape
    name = m.group("dtype")
    if name not in SCALAR_NAMES:
        known = ", ".join(sorted(SCALAR_NAMES))
        raise _BadTypeToken(m.start("dtype"), f"unknown dtype {name!r}; expected one of {known}")
    dims: list[int | str] = []
    body_start = m.start("dims")
    for d in re.finditer(r"[^\s,]+", m.group("dims")):
        text = d.group()
        if IDENT.match(text):
            dims.append(text)
            continue
        try:
            value = int(text)
        except ValueError:
            raise _BadTypeToken(
                body_start + d.start(), f"expected a dimension (an integer), found {text!r}"
            ) from None
        if value < 0:
            raise _BadTypeToken(body_start + d.start(), f"dimension must be >= 0, found {value}")
        dims.append(value)
    return TensorType(DType(name), tuple(dims))


def known_type(tok: str) -> TensorType | None:
    """The type a whole type token spells (``fp16``, ``tensor<fp16, [2]>``), None if it is none."""
    scalar = SCALAR_TYPES.get(tok)
    if scalar is not None or not _TYPE_TOKEN.match(tok):
        return scalar
    try:
        return _tensor_type(tok)
    except _BadTypeToken:
        return None


@lru_cache(maxsize=CACHE_ENTRIES)
def _cached_literal(text: str) -> Value | None:
    """:func:`_standalone_literal`, remembered (read-only) for the lines that repeat it."""
    value = _standalone_literal(text)
    if value is not None and isinstance(value.const, np.ndarray):
        value.const.flags.writeable = False  # shared by every line that repeats it
    return value


def _standalone_literal(text: str) -> Value | None:
    """A literal (no BLOBFILE) parsed on its own; None if the text is not exactly one literal."""
    try:
        sub = TokenReader(text, WeightSource(None), None)
        value = sub.literal()
    except (MilSyntaxError, MilTypeError):
        return None
    return None if sub.peek() else value


def _unquote(tok: str) -> str:
    body = tok[1:-1]
    if "\\" not in body:
        return body
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)
