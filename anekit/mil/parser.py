"""MIL text parser: reads the program(1.3) and legacy program(1.0) dialects into a verified Program."""

from __future__ import annotations

import gc
import re
import threading
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from anekit.errors import MilTypeError, WeightFileError
from anekit.mil.lexer import MORE, show
from anekit.mil.ops import registry
from anekit.mil.ops.traits import CONST
from anekit.mil.program import Function, Operation, Program, Value
from anekit.mil.reader import LiteralReader
from anekit.mil.types import DType, TensorType
from anekit.mil.typetokens import SCALAR_NAMES, known_type
from anekit.mil.values import BlobRef
from anekit.mil.verify import check_op, check_returns
from anekit.mil.weights import WeightSource

# A whole-line const statement: `TYPE name = const()[name = string("op"), val = LITERAL];`,
# the name also spelt as the legacy dialect does, tensor<string, []>("op"); a BLOBFILE literal
# (either dialect's spelling) is matched in the same step.
_CONST_LINE = re.compile(
    r"\s*(?P<type>tensor<[^>]*>|\w+) (?P<name>\w+) = const\(\)"
    r'\[name = (?:string|tensor<string, \[\]>)\("(?P<op_name>\w+)"\), val = (?P<literal>'
    r'(?P<blob_type>tensor<[^>]*>)\(BLOBFILE\(path = (?:string|tensor<string, \[\]>)\("(?P<path>[^"\\]*)"\), '
    r"offset = (?:uint64|tensor<uint64, \[\]>)\((?P<offset>\d{1,20})\)\)\)"
    r"|(?P<lit_type>tensor<[^<>()]*>|[a-z]\w*)\((?P<body>[^()]*)\)|.*)\];\s*\Z",
    re.ASCII,
)
_PLAIN_STRING = re.compile(r'"[^"\\]*"\Z')  # a string without escapes
_REFERENCE_ENDS = (",", ")")  # what follows a value named as an argument
_STRING_TYPES = ("string", "tensor<string, []>")  # a scalar string, in both dialects
_STATEMENT_TOKENS = 1024  # tokens made ahead of a statement before it is read (most need 20-60)
# what a statement read is: declared (type, name, token) per output, the op, its inputs and
# where each was given, its attributes, and where the
# op's name is
_Read = tuple[
    list[tuple[TensorType, str, int]],
    registry.OpDef,
    dict[str, Any],
    dict[str, int],
    dict,
    int,
]


def parse(
    text: str,
    weights: dict[str, bytes] | str | Path | WeightSource | None = None,
    *,
    file: str | None = None,
    pause_gc: bool = False,
) -> Program:
    """Parse MIL text into a verified Program.

    Args:
        text (str): the program, in the program(1.3) or legacy program(1.0) dialect.
        weights (dict | path): weight files as ``{"@model_path/weights/x.bin": bytes}``,
            or the directory holding ``weights/`` (a model directory) or the files, or a
            ``WeightSource`` (``shapes_only=True`` reads none).
        file (str): a name for error messages.
        pause_gc (bool): suspend the process's cyclic garbage collector during the parse
            (:func:`gc_paused`). It touches the whole process, so only a caller that owns
            it asks (the command line does). Default: False.
    """
    source = weights if isinstance(weights, WeightSource) else WeightSource(weights)
    if not pause_gc:
        return _Parser(text, source, file).program()
    with gc_paused():
        return _Parser(text, source, file).program()


class _Unfinished(Exception):
    """A statement runs past the tokens made so far (read it again once more are made)."""


_GC_LOCK = threading.Lock()
_gc_pauses = 0  # parses running now (threads): the last one to finish restores the collector
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Suspend the cyclic garbage collector while a parse runs, then restore its state.

    A parse allocates tens of thousands of objects that all stay alive (the program). The
    collector's passes over them free nothing, and each pass that reaches the oldest
    generation walks the whole heap: with a large heap that is 10-25% of a parse. The parse
    makes no garbage cycles (what it drops is freed by reference counting; a failed parse's
    partial program is collected once the collector runs again). On leaving, the youngest
    generation (the parse's objects) is collected once, so that cost is paid here, not by
    whatever allocates next. Nested and concurrent parses share one pause: the collector is
    enabled again only if it was enabled before the first of them began.
    """
    global _gc_pauses, _gc_was_enabled
    with _GC_LOCK:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_pauses -= 1
            resume = _gc_pauses == 0 and _gc_was_enabled
            if resume:
                gc.enable()
        if resume:
            gc.collect(0)


class _Parser(LiteralReader):
    """The grammar of programs, functions and statements, over the literal reader."""

    def __init__(self, text: str, weights: WeightSource, file: str | None) -> None:
        # token index -> (name, declared type, literal, line number) of a whole-line const
        self.fast: dict[int, tuple[str, TensorType, Value, int, str]] = {}
        self.env: dict[str, Value] = {}
        super().__init__(text, weights, file)

    def take_line(self, line: str, line_no: int) -> bool:
        return "const()" in line and self.fast_const(line, line_no)

    def program(self) -> Program:
        self.expect("program")
        self.expect("(")
        version = self.next()
        if version not in ("1.0", "1.3"):
            raise self.error(
                f"unsupported program version {version!r}; expected 1.0 or 1.3", self.i - 1
            )
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
            raise self.error(
                f"unknown opset {opset!r}; expected one of {', '.join(registry.OPSETS)}",
                opset_index,
            )
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
        fast, const_line, const = self.fast, self.const_line, registry.get("const", opset)
        while True:
            entry = fast.pop(self.i, None)  # a whole-line const, read when it was tokenised
            if entry is not None:
                ops.append(const_line(entry, const))
            elif self.peek() == "}":
                break
            else:
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
        check_returns(fn)  # the rest of SSA form holds by construction: names resolve via env
        return fn

    def statement(self, opset: str) -> Operation:
        start = self.i
        entry = self.fast.pop(start, None)
        if entry is not None:
            return self.const_line(entry, registry.get("const", opset))
        toks = self.toks
        if toks[-1] is MORE and len(toks) - start < _STATEMENT_TOKENS:
            self._fill()  # the statement's tokens, in all but a very long statement
        while True:
            try:
                declared, opdef, inputs, positions, attrs, op_index = self.read_statement(opset)
                break
            except _Unfinished:  # it runs past the tokens made: make as many again, read again
                self.i = start
                made = len(toks) - start
                while toks[-1] is MORE and len(toks) - start < 2 * made:
                    self._fill()
        try:
            types = check_op(opdef, inputs)
        except MilTypeError as e:
            raise self.type_error(e, positions.get(e.param or "", op_index)) from None
        if len(types) != len(declared):
            raise self.type_error(
                MilTypeError(
                    f"declares {len(declared)} outputs, the op produces {len(types)}",
                    op=opdef.name,
                ),
                start,
            )
        line = bisect_right(self.line_starts, start)
        outs = []
        for (declared_type, name, _), inferred in zip(declared, types):
            if declared_type is not inferred and declared_type != inferred:
                raise self.type_error(
                    MilTypeError(
                        f"declared type {declared_type} of {name!r} differs from inferred {inferred}",
                        op=opdef.name,
                    ),
                    start,
                )
            # the declared type object, not the inferred one (equal): types read from text are
            # one object per spelling, so the inference cache compares its keys by identity
            outs.append(Value(name, declared_type))
        op = Operation(opdef, inputs, tuple(outs), attrs, line)
        env = self.env
        for v, (_, _, index) in zip(outs, declared):
            v.producer = op
            if v.name in env:
                self.define(v, index)  # raises
            env[v.name] = v
        if CONST in opdef.traits:
            outs[0].const = inputs["val"].const
        return op

    def read_statement(self, opset: str) -> _Read:
        """Read ``TYPE name, ... = op(key = argument, ...)[key = literal, ...];``.

        The tokens are read by index, the common ones (known types, names, value references,
        ``name = string("...")``) without a method call each; a literal, a tuple holding one,
        a type the tokenizer split and every error go through the readers of
        :class:`LiteralReader`, at the token's exact place. A token not made yet (the
        statement runs past the batch of tokens made) raises ``_Unfinished``.
        """
        toks, env, i = self.toks, self.env, self.i
        declared: list[tuple[TensorType, str, int]] = []
        while True:
            t = known_type(toks[i])
            if t is None:  # split, not a type, or not made yet: the type reader's, at its place
                self.i = i
                t = self.type()
                i = self.i
            else:
                i += 1
            name = toks[i]
            if not (name.isidentifier() and name.isascii()):
                raise self.unexpected(i, "a value name")
            declared.append((t, name, i))
            i += 1
            if toks[i] != ",":
                break
            i += 1
        if toks[i] != "=":
            raise self.unexpected(i, "'='")
        op_index = i = i + 1
        opdef = _OPDEFS.get((toks[i], opset))
        if opdef is None:
            opdef = self.opdef(i, opset)
        i += 1
        if toks[i] != "(":
            raise self.unexpected(i, "'('")
        i += 1
        inputs: dict[str, Any] = {}
        positions: dict[str, int] = {}
        while toks[i] != ")":
            key = toks[i]
            if not (key.isidentifier() and key.isascii()):
                raise self.unexpected(i, "a parameter name")
            if key in inputs:
                raise self.error(f"parameter {key!r} is given twice", i)
            if toks[i + 1] != "=":
                raise self.unexpected(i + 1, "'='")
            positions[key] = i
            known = env.get(toks[i + 2])
            if known is not None and toks[i + 3] in _REFERENCE_ENDS:
                inputs[key] = known
                i += 3
            elif toks[i + 2] == "(":
                inputs[key], i = self.value_tuple(i + 3)
            elif known_type(toks[i + 2]) is not None and toks[i + 3] == "(":
                self.i = i + 2  # a literal, TYPE(...) (a type is never the last token)
                inputs[key] = self.literal()
                i = self.i
            else:
                self.i = i + 2
                inputs[key] = self.value_ref()
                i = self.i
            if toks[i] != ",":
                break
            i += 1
        if toks[i] != ")":
            raise self.unexpected(i, "')'")
        i += 1
        attrs: dict[str, Any] = {}
        if toks[i] == "[":
            i += 1
            if (
                toks[i] == "name"
                and toks[i + 1] == "="
                and toks[i + 2] in _STRING_TYPES
                and toks[i + 3] == "("
                and _PLAIN_STRING.match(toks[i + 4])
                and toks[i + 5] == ")"
                and toks[i + 6] == "]"
            ):  # the op's name, as nearly every statement ends: a string without escapes
                attrs["name"] = toks[i + 4][1:-1]
                i += 7
            else:
                self.i = i
                self.attributes(opdef, inputs, positions, attrs)
                i = self.i
        if toks[i] != ";":
            raise self.unexpected(i, "';'")
        self.i = i + 1
        return declared, opdef, inputs, positions, attrs, op_index

    def value_tuple(self, i: int) -> tuple[tuple[Value, ...], int]:
        """The values of ``(a, b, ...)`` from token ``i`` (after the ``(``), and the index after it."""
        toks, env = self.toks, self.env
        items: list[Value] = []
        while toks[i] != ")":
            known = env.get(toks[i])
            if known is not None and toks[i + 1] in _REFERENCE_ENDS:
                i += 1
            else:
                self.i = i
                known = self.value_ref()
                i = self.i
            items.append(known)
            if toks[i] != ",":
                break
            i += 1
        if toks[i] != ")":
            raise self.unexpected(i, "')'")
        return tuple(items), i + 1

    def unexpected(self, index: int, what: str) -> Exception:
        """The error for token ``index`` where ``what`` should be (``_Unfinished`` if not made yet)."""
        tok = self.toks[index]
        if tok is MORE:
            return _Unfinished()
        return self.error(f"expected {what}, found {show(tok) if tok else 'end of input'}", index)

    def opdef(self, index: int, opset: str) -> registry.OpDef:
        """The registered op named by token ``index``; an error at it if there is none."""
        tok = self.toks[index]
        if not (tok.isidentifier() and tok.isascii()):
            raise self.unexpected(index, "an op name")
        try:
            found = registry.get(tok, opset)
        except MilTypeError as e:
            raise self.type_error(e, index) from None
        return found

    def attributes(
        self, opdef: registry.OpDef, inputs: dict, positions: dict[str, int], attrs: dict
    ) -> None:
        """Read ``key = literal, ...]`` (after the ``[``): parameters into inputs, the rest into attrs."""
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

    def fast_const(self, line: str, line_no: int) -> bool:
        """Take a whole-line ``const`` statement as one token if its literal is known.

        Most statements of a real program are small consts repeated many times
        (strides, pads, names); reusing their parsed literal, and not tokenizing the
        line, makes parsing several times faster. Anything unusual takes the general
        path, which also reports errors with exact positions.
        """
        m = _CONST_LINE.match(line)
        if m is None:
            return False
        type_text, name, op_name, path = m.group("type", "name", "op_name", "path")
        declared = known_type(type_text)
        if declared is None or not (name.isidentifier() and name.isascii()):
            return False
        if path is None:
            parts = m.group("lit_type", "body")  # reader._ONE_TOKEN_LITERAL's groups
            literal = self.literal_text(m.group("literal"), None if parts[0] is None else parts)
            if literal is None or (literal.type is not declared and literal.type != declared):
                return False
        else:  # a weight: read as the declared type, spelt again by the literal
            if m.group("blob_type") != type_text or not declared.is_static:
                return False
            offset = int(m.group("offset"))
            try:
                array = self.weights.tensor(path, offset, declared)
            except WeightFileError:
                return False  # the general path reports it, at the BLOBFILE's line
            literal = Value("", declared, None, array, BlobRef(path, offset))
        self.fast[len(self.toks)] = (name, declared, literal, line_no, op_name)
        self.toks.append(line.strip())  # readable if an error message ever shows it
        return True

    def const_line(self, entry: tuple, const: registry.OpDef) -> Operation:
        """The const op of a line ``fast_const`` took (``entry``, the statement at ``self.i``)."""
        name, declared, literal, line_no, op_name = entry
        env = self.env
        if name in env:
            line = self.lines[line_no]
            raise MilTypeError(
                f"value {name!r} is defined twice",
                line=line_no + 1,
                column=line.index(f" {name} = const()") + 2,
                file=self.file,
            )
        out = Value(name, declared, None, literal.const)
        op = Operation(const, {"val": literal}, (out,), {"name": op_name}, line_no + 1)
        out.producer = op
        env[name] = out
        self.i += 1
        return op

    def value_ref(self) -> Value:
        tok = self.peek()
        if tok == "tensor" or tok.startswith("tensor<") or tok in SCALAR_NAMES or tok == "dict":
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


_OPDEFS = registry.RESOLVED  # (op name, opset) -> its OpDef, as registry.get found it
