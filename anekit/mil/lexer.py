"""MIL text tokens: the token reader that the literal reader and the parser are built on.

It splits text into tokens line by line (so any token maps back to a line and
column) and gives the primitives of a recursive-descent grammar (peek, expect, ...).

Hostile text costs linear time and bounded memory: tokens are made a batch of lines
at a time as the parser reaches them (a bad token near the start of 100 MB is reported
before the rest is read), a long line is cut into tokens a chunk at a time, every token
pattern matches without backtracking (an unterminated string is one token to the end of
its line), a NUL byte is an error found before anything is tokenised, and messages quote
at most :data:`SHOWN_CHARS` of a token.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import islice
from operator import methodcaller
from typing import Any

from anekit.errors import MilSyntaxError, MilTypeError
from anekit.mil.weights import WeightSource

# Every alternative is deterministic (one way to match), so no input makes it backtrack
# more than once over the text; re.ASCII: only ASCII digits and letters make numbers and names.
NUMBER = (  # one spelling per number, so a list of them cannot backtrack more than once
    r"[-+]?(?:0[xX](?:[0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)(?:[pP][-+]?\d+)?"
    r"|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
)
# The tokens the statement pattern below spells too (one spelling, so it splits as TOKEN does).
_LIST = rf"\[\s*{NUMBER}(?:\s*,\s*{NUMBER})*\s*\]"  # a whole list of numbers: one token
_TYPE = r"tensor<\s*\w+\s*,\s*\[[\w\s,.+-]*\]\s*>"  # a whole tensor type, parsed once and cached
_NAME = r"[A-Za-z_@][\w.@/-]*"  # identifier, keyword, type
_HEX = r"[-+]?0[xX][0-9a-fA-F]*\.?[0-9a-fA-F]*(?:[pP][-+]?\d+)?"  # hex float / hex int
_DECIMAL = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
# Alternatives are tried in order, so the common tokens come first (punctuation, then names);
# where two could match at one place the order decides, and it is kept: a list of numbers
# before "[", a tensor type before a name, a hex number before a decimal, both before "->".
_ALTERNATIVES = (
    r"[(){}\],;=<>]"  # punctuation but "[": half of all tokens
    rf"|{_LIST}|\["  # a list of numbers, or a lone "["
    rf"|{_TYPE}"
    rf"|{_NAME}"
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"?'  # string; unterminated, it runs to the end of the line
    rf"|{_HEX}"
    rf"|{_DECIMAL}"
    r"|->"
    r"|(?://|#).*"  # comment to end of line
    r"|\S"  # any other single character (punctuation, or an error)
)
# The whitespace before a token is skipped by the pattern itself (twice as fast as a failed
# match per blank); a line is stripped of trailing blanks first, so every match succeeds.
TOKEN = re.compile(rf"\s*({_ALTERNATIVES})", re.ASCII)
_SPACED = re.compile(rf"(\s*)({_ALTERNATIVES})", re.ASCII)  # the blanks too: for columns
# A whole op statement of the common shape, one output and arguments that are names or
# ``TYPE(number or list)`` literals, ended by its name (both dialects' spelling): matched at
# once (its arguments' text coarsely), then each argument by ``_ARG`` where the last ended,
# and its tokens built from the groups, 2x faster than finding them one by one. Each group is
# spelt as the token pattern spells its token and is ended by a character no token of its
# kind holds, so the tokens are exactly ``TOKEN.findall``'s; any other line is split by it.
_BODY = f"{_LIST}|{_HEX}|{_DECIMAL}"
_ARG = re.compile(rf"({_NAME}) = (?:({_NAME})(?=[,)])|({_TYPE}|{_NAME})\(({_BODY})\))", re.ASCII)
_NAME_ARGS = re.compile(rf"{_NAME} = {_NAME}(?:, {_NAME} = {_NAME})*", re.ASCII)
_STATEMENT = re.compile(
    rf"\s*({_TYPE}) ({_NAME}) = ({_NAME})\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\)"
    r'\[name = (?P<kind>string|tensor<string, \[\]>)\((?P<op_name>"\w+")\)\];\Z',
    re.ASCII,
)
BLANKS = " \t\r\f\v"  # what \s matches in a line
INT_TOKEN = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|\d+)\Z", re.ASCII)
SHOWN_CHARS = 60  # of a token quoted in a message
MAX_DIGITS = 4000  # in an integer token (Python refuses to convert more than 4300)
_FILL_CHARS = 1 << 16  # text tokenised per batch
_LONG_LINE = 1 << 21  # a longer line is tokenised a chunk at a time (findall is faster)
_CHUNK_TOKENS = 1 << 14
MORE = "\0more"  # the end of the tokens made so far; no text makes it (a NUL is an error)
_COMMENT = ("//", "#")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}  # what a backslash and letter stand for
_INF = (float("inf"), float("-inf"))
_GROUP = methodcaller("group", 1)  # a match's token


def is_name(tok: str) -> bool:
    """A MIL name: an ASCII letter or underscore, then letters, digits, underscores."""
    return tok.isascii() and tok.isidentifier()  # the same as [A-Za-z_]\w*, without a regex


def show(tok: str) -> str:
    """A token as a message quotes it: repr, at most :data:`SHOWN_CHARS` characters of it."""
    if len(tok) <= SHOWN_CHARS:
        return repr(tok)
    return f"{tok[:SHOWN_CHARS]!r}... ({len(tok)} characters)"


class TokenReader:
    """Tokens of MIL text with their positions, and the readers of types and literals."""

    def __init__(self, text: str, weights: WeightSource, file: str | None) -> None:
        self.text = text
        self.weights = weights
        self.file = file
        nul = text.find("\0")
        if nul >= 0:  # binary data is not MIL: say so at once, before tokenising any of it
            line = text.count("\n", 0, nul)
            start = text.rfind("\n", 0, nul) + 1
            raise MilSyntaxError(
                "NUL byte: MIL text holds none (is this a binary file?)",
                line=line + 1,
                column=nul - start + 1,
                source_line=text[start : text.find("\n", nul) % (len(text) + 1)],
                file=file,
            )
        self.lines = text.split("\n")
        self.toks: list[str] = []
        self.line_starts: list[int] = []
        self._next_line = 0
        self._pending: Any = None  # the rest of a long line's token matches
        self._anchors: list[tuple[int, int]] = []  # (token index, column) of each chunk
        self.i = 0
        self._fill()

    @classmethod
    def of_line(cls, line: str) -> TokenReader:
        """A reader of one short line the caller knows holds no NUL and no newline (a literal)."""
        reader = cls.__new__(cls)
        reader.text, reader.weights, reader.file, reader.lines = (
            line,
            WeightSource(None),
            None,
            [line],
        )
        reader._pending, reader._anchors = None, []
        reader.toks, reader.line_starts, reader._next_line = (
            TOKEN.findall(line.rstrip(BLANKS)),
            [0],
            1,
        )
        reader.toks.append("")
        reader.i = 0
        return reader

    def take_line(self, line: str, line_no: int) -> bool:
        """Let a subclass read a whole line itself (as one token); the default never does."""
        return False

    def _fill(self) -> None:
        """Tokenise the next batch of text, after the tokens made so far (see the module doc)."""
        toks = self.toks
        if toks and toks[-1] is MORE:
            toks.pop()
        start, budget, findall, statement = len(toks), _FILL_CHARS, TOKEN.findall, _STATEMENT.match
        lines, n_lines, line_starts, take_line = (
            self.lines,
            len(self.lines),
            self.line_starts,
            self.take_line,
        )
        while budget > 0 or len(toks) == start:
            if self._pending is not None:
                matches = list(islice(self._pending, _CHUNK_TOKENS))
                if matches:  # where the chunk starts, for where() to count from
                    self._anchors.append((len(toks), matches[0].start()))
                chunk = [t for t in map(_GROUP, matches) if not t.startswith(_COMMENT)]
                toks.extend(chunk)
                budget -= sum(map(len, chunk)) + 1
                if len(chunk) < _CHUNK_TOKENS:
                    self._pending = None
                continue
            line_no = self._next_line
            if line_no >= n_lines:
                toks.append("")  # end of input
                return
            self._next_line = line_no + 1
            line = lines[line_no]
            line_starts.append(len(toks))
            size = len(line)
            budget -= size + 1
            if not size:  # blank lines are common (and a hostile text may be nothing else)
                continue
            if size > _LONG_LINE:
                self._pending = TOKEN.finditer(line.rstrip(BLANKS))
            elif take_line(line, line_no):
                pass
            elif (m := statement(line)) is not None and (
                found := statement_tokens(line, m)
            ) is not None:
                toks.extend(found)
            else:
                found = findall(line.rstrip(BLANKS) if line[-1] in BLANKS else line)
                if found and found[-1].startswith(_COMMENT):
                    found.pop()
                toks.extend(found)
        toks.append(MORE)

    def where(self, index: int) -> tuple[int, int]:
        """Return (line, column) of token ``index``, both 1-based."""
        index = min(index, len(self.toks) - 1)
        if self.toks[index] == "" or (self.toks[index] is MORE and index == len(self.toks) - 1):
            line_no = len(self.lines) - 1  # end of input
            return line_no + 1, len(self.lines[line_no]) + 1
        line_no = bisect_right(self.line_starts, index) - 1
        first, pos = self.line_starts[line_no], 0
        # a long line's chunks are anchored: count from the last chunk start before the token
        anchor = bisect_right(self._anchors, (index, len(self.text))) - 1
        if anchor >= 0 and self._anchors[anchor][0] >= first:
            first, pos = self._anchors[anchor]
        line = self.lines[line_no].rstrip(BLANKS)
        # the token's match, skipping the ones before it in C (and never past it)
        m = next(islice(TOKEN.finditer(line, pos), index - first, None), None)
        return line_no + 1, 1 if m is None else m.start(1) + 1

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
        tok = self.toks[self.i]
        if tok is MORE:
            self._fill()
            tok = self.toks[self.i]
        return tok

    def peek_at(self, k: int) -> str:
        """The token ``k`` places ahead (0: the next one)."""
        while self.toks[min(self.i + k, len(self.toks) - 1)] is MORE:
            self._fill()
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> str:
        tok = self.toks[self.i]
        if tok is MORE:
            self._fill()
            tok = self.toks[self.i]
        if not tok:
            raise self.error("unexpected end of input")
        self.i += 1
        return tok

    def expect(self, expected: str) -> None:
        tok = self.toks[self.i]
        if tok != expected:
            tok = self.peek()
            if tok != expected:
                raise self.error(
                    f"expected {expected!r}, found {show(tok) if tok else 'end of input'}"
                )
        self.i += 1

    def accept(self, tok: str) -> bool:
        found = self.toks[self.i]
        if found is MORE:
            found = self.peek()
        if found == tok:
            self.i += 1
            return True
        return False

    def ident(self, what: str) -> str:
        tok = self.peek()
        if not is_name(tok):
            raise self.error(f"expected {what}, found {show(tok) if tok else 'end of input'}")
        self.i += 1
        return tok

    def integer(self, what: str) -> int:
        tok = self.peek()
        if not INT_TOKEN.match(tok) or len(tok) > MAX_DIGITS:
            raise self.error(
                f"expected {what} (an integer), found {show(tok) if tok else 'end of input'}"
            )
        self.i += 1
        return int_token(tok)

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


def statement_tokens(line: str, m: re.Match) -> list[str] | None:
    """The tokens of a line ``_STATEMENT`` matched (``m``), exactly ``TOKEN.findall(line)``'s;
    None if its arguments are not all of the shape ``_ARG`` reads."""
    toks = [m.group(1), m.group(2), "=", m.group(3), "("]
    pos, end = m.span("args")
    if _NAME_ARGS.fullmatch(line, pos, end) is not None:  # names only: split at the blanks
        toks += line[pos:end].replace(",", " ,").split()
        pos = end
    match = _ARG.match
    while pos < end:
        a = match(line, pos, end + 1)  # the ")" after the arguments ends a name argument
        if a is None:
            return None
        key, ref, literal_type, body = a.groups()
        if ref:
            toks += (key, "=", ref)
        else:
            toks += (key, "=", literal_type, "(", body, ")")
        pos = a.end()
        if pos < end:
            if line[pos : pos + 2] != ", ":
                return None
            toks.append(",")
            pos += 2
            if pos == end:  # a trailing ", "
                return None
    toks += (")", "[", "name", "=", m.group("kind"), "(", m.group("op_name"), ")", "]", ";")
    return toks


def int_token(tok: str) -> int:
    """An integer token (checked by ``_INT``): decimal, or hex with a 0x prefix."""
    return int(tok, 16) if "x" in tok or "X" in tok else int(tok)


def beyond_float(value: float, tok: str) -> bool:
    """A number token whose float64 value is inf, or 0 although its digits are not all zero."""
    if value in _INF:
        return True
    if value != 0.0:
        return False
    hexa = "x" in tok or "X" in tok
    digits = tok[tok.lower().find("x") + 1 :] if hexa else tok
    mantissa = re.split("[pP]" if hexa else "[eE]", digits)[0]
    return any(c not in "0.+-" for c in mantissa)


def unquote(tok: str) -> str:
    """The text a string token spells (its escapes replaced)."""
    body = tok[1:-1]
    if "\\" not in body:
        return body
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)
