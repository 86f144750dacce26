"""Objective-C type encodings, split into one string per type (return, self, _cmd, arguments).

The runtime reports a method's types as one string with frame offsets, e.g.
``B40@0:8I16@20^@28`` for ``-(BOOL)compileWithQoS:(unsigned)q options:(id)o error:(NSError**)e``.
Experiments read the argument types to pass scalars or objects; the tracer reads them
to decide which methods it can wrap safely.
"""

from __future__ import annotations

QUALIFIERS = "rnNoORV"  # const, in, inout, out, bycopy, byref, oneway
_CLOSE = {"{": "}", "(": ")", "[": "]"}
SCALARS = frozenset("cislqCISLQfdB")  # char .. unsigned long long, float, double, bool


def split(encoding: str) -> list[str]:
    """``"B40@0:8I16@20^@28"`` -> ``["B", "@", ":", "I", "@", "^@"]`` (offsets dropped)."""
    types, i = [], 0
    while i < len(encoding):
        if encoding[i].isdigit() or encoding[i] == "-":
            i += 1
            continue
        start = i
        while i < len(encoding) and encoding[i] in QUALIFIERS:
            i += 1
        if i >= len(encoding):
            raise ValueError(f"type encoding {encoding!r} ends inside a type")
        i = _end_of_type(encoding, i)
        types.append(encoding[start:i])
    return types


def _end_of_type(encoding: str, i: int) -> int:
    """The index just past the type that starts at ``i``."""
    c = encoding[i]
    if c == "^":
        if i + 1 >= len(encoding):
            raise ValueError(f"type encoding {encoding!r} ends inside a pointer")
        return _end_of_type(encoding, i + 1)
    if c == "@":
        i += 1
        if i < len(encoding) and encoding[i] == "?":
            return i + 1  # a block
        if i < len(encoding) and encoding[i] == '"':
            close = encoding.find('"', i + 1)
            if close < 0:
                raise ValueError(f"type encoding {encoding!r} has an unterminated class name")
            return close + 1
        return i
    if c in _CLOSE:
        depth = 0
        for j in range(i, len(encoding)):
            if encoding[j] == c:
                depth += 1
            elif encoding[j] == _CLOSE[c]:
                depth -= 1
                if depth == 0:
                    return j + 1
        raise ValueError(f"type encoding {encoding!r} has an unbalanced {c!r}")
    if c == "b":  # a bit field: b<width>
        j = i + 1
        while j < len(encoding) and encoding[j].isdigit():
            j += 1
        return j
    return i + 1


def arguments(encoding: str) -> list[str]:
    """The argument types only (after return, self and _cmd)."""
    return split(encoding)[3:]


def is_object(t: str) -> bool:
    """An object (``@``, ``@"Class"``), blocks excluded."""
    return t.lstrip(QUALIFIERS).startswith("@") and not t.lstrip(QUALIFIERS).startswith("@?")


def is_scalar(t: str) -> bool:
    """An integer, floating-point or boolean type."""
    return t.lstrip(QUALIFIERS) in SCALARS


def is_pointer(t: str) -> bool:
    """A C pointer (``^...``), e.g. ``^{__IOSurface=}`` or an ``NSError**`` (``^@``)."""
    return t.lstrip(QUALIFIERS).startswith("^")
