"""Types and literals read from MIL tokens: scalars, tensors, BLOBFILE weights, buildInfo dicts.

:class:`LiteralReader` adds to the token reader (:mod:`anekit.mil.lexer`) the grammar of
types and literals that the parser and the literal cache share. A value a literal's dtype
cannot hold (overflow to inf, a nonzero value flushed to 0, an integer out of range) is an
error at its place; nesting is bounded (:data:`MAX_NESTING`).
"""

from __future__ import annotations

import re
from struct import pack_into as _pack_into
from typing import Any

import numpy as np

from anekit.errors import MilSyntaxError, MilTypeError, WeightFileError
from anekit.mil.lexer import (
    INT_TOKEN,
    MAX_DIGITS,
    NUMBER,
    TOKEN,
    TokenReader,
    beyond_float,
    int_token,
    is_name,
    show,
    unquote,
)
from anekit.mil.literals import FLOAT_LIMITS, FLOAT_TOKEN, PACK_CODES, float_list, float_scalar
from anekit.mil.types import DType, TensorType, storage_loss
from anekit.mil.typetokens import (  # noqa: F401
    _LITERALS,
    CACHE_ENTRIES,
    CACHED_LITERAL_CHARS,
    MAX_DIM,
    MAX_RANK,
    SCALAR_NAMES,
    SCALAR_TYPES,
    TYPE_PARTS,
    BadTypeToken,
    _tensor_type,
    clear_caches,
    dim_message,
    known_type,
    rank_message,
    read_type,
    remember_literal,
    tensor_type,
)
from anekit.mil.values import BlobRef, Value

_STRING = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"\Z')
MAX_NESTING = 64  # brackets in a literal, dicts in a dict type: far beyond any real program
_BLOB_LITERAL = re.compile(  # both dialects' spelling (tensor<string, []>, tensor<uint64, []>)
    r'(?P<type>tensor<[^>]*>)\(BLOBFILE\(path = (?:string|tensor<string, \[\]>)\("(?P<path>[^"\\]*)"\), '
    r"offset = (?:uint64|tensor<uint64, \[\]>)\((?P<offset>\d+)\)\)\)\Z",
    re.ASCII,
)
_INT_RANGES = {
    d: (int(np.iinfo(d.numpy).min), int(np.iinfo(d.numpy).max)) for d in DType if d.is_int
}
_INF = (float("inf"), float("-inf"))
# the members the readers test for, as module globals: ``DType.string`` is an attribute
# lookup through the Enum metaclass, several times the cost of a global
_STR, _BOOL, _INT32 = DType.string, DType.bool, DType.int32
_NOT_DECIMAL = re.compile(r"[.eEpPxX]")  # in a list of numbers: one that is not a decimal integer
_RUN_ITEMS = 1024  # numbers per chunk of number_run
_NUMBER_STARTS = frozenset("0123456789+-.")
_FLOAT_RUN = re.compile(rf"{NUMBER}(?:,{NUMBER})*\Z", re.ASCII)
_INT_RUN = re.compile(
    r"[-+]?(?:0[xX][0-9a-fA-F]+|\d+)(?:,[-+]?(?:0[xX][0-9a-fA-F]+|\d+))*\Z", re.ASCII
)


class LiteralReader(TokenReader):
    """A token reader that also reads types and literals."""

    def literal_text(self, text: str, parts: tuple[str, str] | None = None) -> Value | None:
        """The Value of a whole literal, or None to let the general path read it (and its errors).

        ``parts``: its type and body, if the caller matched it as ``TYPE(body)`` (as
        ``standalone_literal`` would).
        """
        if "BLOBFILE" in text:
            return self.blob_literal(text)
        value = _LITERALS.get(text)
        if value is None and len(text) <= CACHED_LITERAL_CHARS:
            value = standalone_literal(text, parts)
            if value is not None:
                remember_literal(text, value)
        return value

    def blob_literal(self, text: str) -> Value | None:
        """A ``BLOBFILE`` literal read directly, or None to let the general path report errors."""
        m = _BLOB_LITERAL.match(text)
        if m is None:
            return None
        type_text, path, offset_text = m.group("type", "path", "offset")
        t = known_type(type_text)
        if t is None or not t.is_static:
            return None
        offset = int(offset_text)
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
            raise self.error(f"expected a type, found {show(tok)}", index)
        self.expect("<")
        dtype = self.dtype()
        self.expect(",")
        if _is_list(self.peek()):  # [1, 2] of numbers, one token
            index = self.i
            dims = self.number_list(self.next(), _INT32, index, check=dim_message)
            if len(dims) > MAX_RANK:
                raise self.error(rank_message(len(dims)), index)
            self.expect(">")
            return TensorType(dtype, tuple(dims))
        self.expect("[")
        dims = []
        while self.peek() != "]":
            if len(dims) >= MAX_RANK:
                raise self.error(rank_message(None))  # the rest is not read
            self.number_run(_INT32, dims, check=dim_message, limit=MAX_RANK)
            tok = self.peek()
            if is_name(tok):
                dims.append(self.next())
            else:
                value = self.integer("a dimension")
                if not 0 <= value <= MAX_DIM:
                    raise self.error(dim_message(value), self.i - 1)
                dims.append(value)
            if not self.accept(","):
                break
        self.expect("]")
        self.expect(">")
        return TensorType(dtype, tuple(dims))

    def type_token(self, tok: str, index: int) -> TensorType:
        """Parse a whole ``tensor<dtype, [dims]>`` token; errors point inside it."""
        try:
            return tensor_type(tok) if len(tok) <= CACHED_LITERAL_CHARS else read_type(tok)
        except BadTypeToken as e:
            raise self.error_in(index, e.offset, e.message) from None

    def dtype(self) -> DType:
        index = self.i
        tok = self.next()
        if tok == "uint64":
            raise self.error("uint64 is only allowed in BLOBFILE offsets", index)
        if tok not in SCALAR_NAMES:
            raise self.error(
                f"unknown dtype {show(tok)}; expected one of {', '.join(sorted(SCALAR_NAMES))}",
                index,
            )
        return DType(tok)

    def literal_or_dict(self) -> Any:
        if self.peek() == "dict":
            return self.dict_literal()
        return self.literal()

    def literal(self) -> Value:
        """Parse ``fp16(0x1p-3)``, ``tensor<int32, [2]>([1, 2])`` or a BLOBFILE tensor."""
        index = self.i
        toks = self.toks
        if index + 3 < len(toks) and toks[index + 1] == "(" and toks[index + 3] == ")":
            t = known_type(toks[index])  # TYPE ( token ): the common literals, read in one step
            body = toks[index + 2]
            if t is not None and t.is_static and body not in ("-", "+"):
                if t.dtype is _STR:  # names and other strings: rarely repeated, not remembered
                    value = self.one_token_literal(t, body, index)
                else:  # remembered by its text, as a whole-line const's literal is
                    text = f"{toks[index]}({body})"
                    value = _LITERALS.get(text)
                    if value is None:
                        value = self.one_token_literal(t, body, index)
                        remember_literal(text, value)
                self.i = index + 4
                return value
        if self.peek() == "uint64":
            raise self.error("uint64 literal outside BLOBFILE", index)
        t = self.type()
        self.expect("(")
        if t.dtype is _STR and not t.shape and self.peek_at(1) == ")":
            value = Value("", t, None, self.element(_STR))  # names: the common case
        elif self.peek() == "BLOBFILE":
            value = self.blobfile(t, index)
        else:
            value = self.values(t, index)
        self.expect(")")
        return value

    def one_token_literal(self, t: TensorType, body: str, index: int) -> Value:
        """The literal ``t(body)``, body one token: a scalar, a string or a list of numbers."""
        code = PACK_CODES.get(t.dtype)
        if code is not None:  # fp16/fp32: the common case in one step (None: read it below)
            array = float_list(body, t, code) if body[0] == "[" else float_scalar(body, t)
            if array is not None:
                return Value("", t, None, array)
        if _is_list(body):
            flat = self.number_list(body, t.dtype, index + 2)
        else:
            flat = [self.element_of(body, t.dtype, index + 2)]
        if len(flat) != t.numel:
            raise self.error(f"{t} needs {t.numel} values, found {len(flat)}", index)
        if t.dtype is _STR:
            const: Any = flat[0] if t.is_scalar else np.array(flat, dtype=object).reshape(t.shape)
            return Value("", t, None, const)
        return Value("", t, None, self.checked_array(flat, t, index))

    def values(self, t: TensorType, index: int) -> Value:
        if not t.is_static:
            raise self.error(f"a literal needs a static shape, found {t}", index)
        flat: list[Any] = []
        if self.peek().startswith("["):
            self.flat_list(t.dtype, flat, 1)
        else:
            flat.append(self.element(t.dtype))
        if len(flat) != t.numel:
            raise self.error(f"{t} needs {t.numel} values, found {len(flat)}", index)
        if t.dtype is _STR:
            const: Any = flat[0] if t.is_scalar else np.array(flat, dtype=object).reshape(t.shape)
        else:
            const = self.checked_array(flat, t, index)
        return Value("", t, None, const)

    def checked_array(self, flat: list[Any], t: TensorType, index: int) -> np.ndarray:
        """The values as an array of the literal's dtype; a value the dtype cannot hold is an error."""
        if t.dtype.is_int:
            lo, hi = _INT_RANGES[t.dtype]
            if flat and (min(flat) < lo or max(flat) > hi):
                bad = next(x for x in flat if not lo <= x <= hi)
                raise self.error(f"value {bad} out of range for {t.dtype} ({lo}..{hi})", index)
            return _shaped(flat, t)
        if t.dtype is _BOOL:
            return _shaped(flat, t)
        largest, smallest = FLOAT_LIMITS[t.dtype]
        # the common cases, decided without the exact check below (a NaN takes it):
        if len(flat) == 1:  # a scalar: within range, and 0 or above what rounds to 0
            v = flat[0]
            if -largest < v < largest and (v == 0 or not -smallest <= v <= smallest):
                return _shaped(flat, t)
        elif not flat:
            return _shaped(flat, t)
        elif t.dtype in PACK_CODES:  # a list: packed by struct, which refuses an overflow
            array = np.empty(t.shape, t.dtype.numpy)
            try:  # into the array's own memory: no buffer object outlives the call
                _pack_into(f"<{len(flat)}{PACK_CODES[t.dtype]}", array, 0, *flat)
            except OverflowError:
                pass
            else:
                if np.count_nonzero(array) + flat.count(0.0) == len(flat):  # no value became 0
                    return array
        wide = np.array(flat, dtype=np.float64)
        loss = storage_loss(wide, t.dtype)
        if loss is not None:
            raise self.error(loss, index)
        return wide.astype(t.dtype.numpy).reshape(t.shape)

    def flat_list(self, dtype: DType, out: list[Any], depth: int) -> None:
        if depth > MAX_NESTING:
            raise self.error(f"literal nested deeper than {MAX_NESTING} brackets")
        if _is_list(self.peek()):
            index = self.i
            out.extend(self.number_list(self.next(), dtype, index))
            return
        self.expect("[")
        while self.peek() != "]":
            self.number_run(dtype, out)
            if self.peek().startswith("["):
                self.flat_list(dtype, out, depth + 1)
            else:
                out.append(self.element(dtype))
            if not self.accept(","):
                break
        self.expect("]")

    def number_run(
        self, dtype: DType, out: list[Any], check: Any = None, limit: int | None = None
    ) -> None:
        """Take whole chunks of ``n, n, ... n,`` (numbers the tokenizer split) a chunk at a time.

        A list the one-token pattern did not match (it is unclosed, or mixes in ``inf``)
        would otherwise cost several method calls per number; a chunk with anything but
        plain numbers is left to the element loop, which reports it. It stops once ``out``
        holds more than ``limit`` items (the caller's bound, reported by the caller).
        """
        toks, i, n = self.toks, self.i, _RUN_ITEMS
        while (
            (limit is None or len(out) <= limit)
            and i + 2 * n < len(toks)
            and toks[i][:1] in _NUMBER_STARTS  # strings, names, inf, nan: the element loop's
            and toks[i + 1] == ","
            and toks[i + 2 * n - 1] == ","
        ):
            items, commas = toks[i : i + 2 * n : 2], toks[i + 1 : i + 2 * n : 2]
            joined = ",".join(items)
            if commas.count(",") != n or not (_FLOAT_RUN if dtype.is_float else _INT_RUN).match(
                joined
            ):
                return
            try:
                values = self.number_list(f"[{joined}]", dtype, i, check)
            except MilSyntaxError:
                return  # the element loop reports it at its own token
            out.extend(values)
            i = self.i = i + 2 * n

    def number_list(
        self, tok: str, dtype: DType, index: int, check: Any = None
    ) -> list[int] | list[float]:
        """The numbers of a list token ``[a, b, c]`` as ``dtype`` elements; errors point at one.

        ``check(value)``, for integers, returns a message for a value to reject.
        """
        parts = tok[1:-1].split(",")
        try:
            if dtype.is_float:
                # every number is one NUMBER (the token's pattern), with at most one x: a list
                # all decimal or all hex (as coremltools writes) is converted by one map
                hexes = tok.count("x") + tok.count("X")
                if hexes == 0:
                    values: list[Any] = list(map(float, parts))
                elif hexes == len(parts):
                    values = list(map(float.fromhex, parts))
                else:
                    values = [float.fromhex(p) if "x" in p or "X" in p else float(p) for p in parts]
                if _INF[0] in values or _INF[1] in values or 0.0 in values:
                    bad = next(
                        (
                            k
                            for k, (v, p) in enumerate(zip(values, parts))
                            if beyond_float(v, p.strip())
                        ),
                        None,
                    )
                    if bad is not None:
                        raise _BadElement(bad)
            elif dtype.is_int and len(tok) <= MAX_DIGITS and not _NOT_DECIMAL.search(tok):
                values = list(map(int, parts))  # plain decimal integers, none too long
                if check is not None:
                    bad = next((k for k, v in enumerate(values) if check(v) is not None), None)
                    if bad is not None:
                        raise _BadElement(bad, check(values[bad]))
            elif dtype.is_int:
                values = []
                for k, p in enumerate(parts):
                    hexa = "x" in p or "X" in p
                    if "." in p or "p" in p or "P" in p or (not hexa and ("e" in p or "E" in p)):
                        raise _BadElement(k)  # a float
                    if len(p) > MAX_DIGITS:  # Python refuses to convert it
                        raise _BadElement(k, f"integer of {len(p.strip())} digits is out of range")
                    value = int(p, 16) if hexa else int(p)
                    if check is not None and check(value) is not None:
                        raise _BadElement(k, check(value))
                    values.append(value)
            else:
                raise _BadElement(0)
        except OverflowError:
            bad = next(k for k, p in enumerate(parts) if "x" in p or "X" in p)
            return self._bad_element(tok, parts, bad, dtype, index, None)
        except _BadElement as e:
            return self._bad_element(tok, parts, e.k, dtype, index, e.message)
        return values

    def _bad_element(
        self, tok: str, parts: list[str], k: int, dtype: DType, index: int, message: str | None
    ) -> Any:
        """Raise the error for element ``k`` of a list token, at its column."""
        text = parts[k].strip()
        offset = 1 + sum(len(p) + 1 for p in parts[:k]) + (len(parts[k]) - len(parts[k].lstrip()))
        if message is None:
            if dtype.is_float:
                message = (
                    f"value {show(text)} is beyond every float dtype: fp32 holds 0 and "
                    "magnitudes 1.4e-45 to 3.4e38"
                )
            elif dtype.is_int:
                message = f"expected an integer for {dtype}, found {show(text)}"
            else:
                what = "true or false" if dtype is _BOOL else "a string literal"
                message = f"expected {what}, found {show(text)}"
        raise self.error_in(index, offset, message)

    def element(self, dtype: DType) -> Any:
        index = self.i
        return self.element_of(self.next(), dtype, index)

    def element_of(self, tok: str, dtype: DType, index: int) -> Any:
        """The value of token ``index``, ``tok``, as an element of ``dtype``."""
        if dtype is _STR:
            if not _STRING.match(tok):
                what = "an unterminated string" if tok.startswith('"') else show(tok)
                raise self.error(f"expected a string literal, found {what}", index)
            return unquote(tok)
        if dtype is _BOOL:
            if tok not in ("true", "false"):
                raise self.error(f"expected true or false, found {show(tok)}", index)
            return tok == "true"
        if dtype.is_float:
            return self.float_token(tok, index)
        if not INT_TOKEN.match(tok) or len(tok) > MAX_DIGITS:
            raise self.error(f"expected an integer for {dtype}, found {show(tok)}", index)
        return int_token(tok)

    def float_token(self, tok: str, index: int) -> float:
        if tok in ("-", "+") and self.peek() in ("inf", "nan"):
            sign = -1.0 if tok == "-" else 1.0
            return sign * float(self.next())
        if tok in ("inf", "nan"):
            return float(tok)
        if not FLOAT_TOKEN.match(tok):
            raise self.error(f"expected a number, found {show(tok)}", index)
        try:
            value = float.fromhex(tok) if "x" in tok or "X" in tok else float(tok)
        except OverflowError:  # a hex float beyond float64
            value = _INF[0]
        if beyond_float(value, tok):
            raise self.error(
                f"value {show(tok)} is beyond every float dtype: fp32 holds 0 and magnitudes "
                "1.4e-45 to 3.4e38",
                index,
            )
        return value

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
        m = TYPE_PARTS.match(self.peek())
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
        nested = self.dict_type(1)
        self.expect(">")
        self.expect("(")
        value = self.dict_entries(nested)
        self.expect(")")
        return value

    def dict_type(self, depth: int) -> int:
        """Skip a dict value type; return how many dict levels it nests."""
        if depth > MAX_NESTING:
            raise self.error(f"dict type nested deeper than {MAX_NESTING} levels")
        if self.accept("dict"):
            self.expect("<")
            self.type()
            self.expect(",")
            levels = self.dict_type(depth + 1)
            self.expect(">")
            return levels + 1
        self.type()
        return 0

    def dict_entries(self, depth: int) -> dict[str, Any]:
        self.expect("{")
        result: dict[str, Any] = {}
        while self.peek() != "}":
            self.expect("{")
            key = self.element(_STR)
            self.expect(",")
            result[key] = self.dict_entries(depth - 1) if depth else self.element(_STR)
            self.expect("}")
            if not self.accept(","):
                break
        self.expect("}")
        return result


class _BadElement(Exception):
    """Element ``k`` of a list token is wrong (``message``, or the usual one for its dtype)."""

    def __init__(self, k: int, message: str | None = None) -> None:
        super().__init__(message)
        self.k = k
        self.message = message


def _shaped(flat: list[Any], t: TensorType) -> np.ndarray:
    """The values as an array of ``t``; a scalar and a vector made without a reshape (half the cost)."""
    rank = len(t.shape)
    if rank == 0 and len(flat) == 1:
        return np.array(flat[0], dtype=t.dtype.numpy)
    if rank == 1:
        return np.array(flat, dtype=t.dtype.numpy)
    return np.array(flat, dtype=t.dtype.numpy).reshape(t.shape)


def _is_list(tok: str) -> bool:
    """A list-of-numbers token (``[1, 2]``), as opposed to the ``[`` punctuation token."""
    return len(tok) > 1 and tok[0] == "["


def standalone_literal(text: str, parts: tuple[str, str] | None = None) -> Value | None:
    """A literal (no BLOBFILE) read on its own; None if the text is not exactly one literal.

    ``parts``: ``_ONE_TOKEN_LITERAL``'s groups of ``text``, if the caller matched them.
    """
    if parts is None:
        m = _ONE_TOKEN_LITERAL.match(text)
        parts = None if m is None else m.groups()
    if parts is not None:  # TYPE(token), the common shape: read without tokenising it again
        t, body = known_type(parts[0]), parts[1]
        if t is not None and t.is_static and body not in ("-", "+") and _one_token(body):
            try:
                return _QUIET.one_token_literal(t, body, 0)
            except (MilSyntaxError, MilTypeError, ValueError):
                return None  # ValueError: a list's element float() or int() refuses
    sub = LiteralReader.of_line(text)
    try:
        value = sub.literal()
    except (MilSyntaxError, MilTypeError):
        return None
    return None if sub.peek() else value


def _one_token(body: str) -> bool:
    """The text is one token: a list of numbers is taken as one on its characters alone.

    Converting a list's elements (float, float.fromhex, int) accepts exactly the spellings
    of the token pattern's NUMBER over these characters, so the list-token match, which
    costs more than the conversion, is not needed; one the conversion refuses is not a
    literal here (the general path reports it).
    """
    if body[:1] == "[":
        return _LIST_BODY.match(body) is not None
    token = TOKEN.match(body)
    return token is not None and token.group(1) == body  # whole, without blanks


_LIST_BODY = re.compile(r"\[[0-9a-fA-FxXpP.+\-, \t]*\]\Z", re.ASCII)
# A literal's reader for text read without its own tokens: its errors only mean "not a literal"
# (standalone_literal returns None), so where they point does not matter; it holds no state.
_QUIET = LiteralReader.of_line("")
_ONE_TOKEN_LITERAL = re.compile(r"(tensor<[^<>()]*>|[a-z]\w*)\(([^()]*)\)\Z", re.ASCII)
