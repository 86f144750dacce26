"""Type tokens: the types a ``tensor<dtype, [dims]>`` token (or a scalar name) spells, cached;
and the cache of literals read, by their text.

The grammar the tokenizer's whole-type token and the literal reader share: errors say where
inside the token they are (``BadTypeToken.offset``), and tokens of ordinary length are
remembered in a bounded LRU, one TensorType object per spelling.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from functools import lru_cache

import numpy as np

from anekit.mil.lexer import MAX_DIGITS, is_name, show
from anekit.mil.types import DType, TensorType
from anekit.mil.values import Value

_DIM = re.compile(r"-?\d+\Z", re.ASCII)
TYPE_PARTS = re.compile(r"tensor<\s*(?P<dtype>\w+)\s*,\s*\[(?P<dims>[^\]]*)\]\s*>", re.ASCII)
SCALAR_TYPES: dict[str, TensorType] = {d.value: TensorType(d, ()) for d in DType}
SCALAR_NAMES = {d.value for d in DType}
# The parser remembers the types and small literals it has read, across programs, because real
# programs repeat a few of them thousands of times; bounded, so the memory is not kept for good.
CACHE_ENTRIES = 4096
CACHED_LITERAL_CHARS = 256  # a longer literal (or type token) is read each time it occurs
MAX_DIM = 2**63 - 1  # MIL dimensions are int64
MAX_RANK = 64  # NumPy's limit on an array's dimensions (the ANE takes 5: the checker says so)


class BadTypeToken(Exception):
    """A tensor type token that is not a type: what is wrong, and where inside the token."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset
        self.message = message


def rank_message(rank: int | None) -> str:
    """Why a type of ``rank`` dimensions (None: more than the limit, not all read) is refused."""
    shown = f"rank {rank}" if rank is not None else f"more than {MAX_RANK} dimensions"
    return f"a type of {shown}: at most {MAX_RANK} dimensions (NumPy's limit; the ANE takes 5)"


def dim_message(value: int) -> str | None:
    """Why a dimension is wrong, or None if it is a dimension."""
    if 0 <= value <= MAX_DIM:
        return None
    if value < 0:
        return f"dimension must be >= 0, found {value}"
    return f"dimension {value} is beyond int64 (at most {MAX_DIM})"


def read_type(tok: str) -> TensorType:
    """The type of a ``tensor<dtype, [dims]>`` token; raises BadTypeToken."""
    m = TYPE_PARTS.fullmatch(tok)
    if m is None:  # not from the tokenizer, which only emits tokens of this shape
        raise BadTypeToken(0, f"expected a type, found {show(tok)}")
    name = m.group("dtype")
    if name not in SCALAR_NAMES:
        known = ", ".join(sorted(SCALAR_NAMES))
        raise BadTypeToken(m.start("dtype"), f"unknown dtype {show(name)}; expected one of {known}")
    dims: list[int | str] = []
    body_start = m.start("dims")
    for d in re.finditer(r"[^\s,]+", m.group("dims")):
        text = d.group()
        if is_name(text):
            dims.append(text)
            continue
        if not _DIM.match(text) or len(text) > MAX_DIGITS:
            raise BadTypeToken(
                body_start + d.start(), f"expected a dimension (an integer), found {show(text)}"
            )
        value = int(text)
        if not 0 <= value <= MAX_DIM:
            raise BadTypeToken(body_start + d.start(), dim_message(value))
        dims.append(value)
    if len(dims) > MAX_RANK:
        raise BadTypeToken(body_start, rank_message(len(dims)))
    return TensorType(DType(name), tuple(dims))


tensor_type = lru_cache(maxsize=CACHE_ENTRIES)(read_type)  # for tokens of ordinary length


def known_type(tok: str) -> TensorType | None:
    """The type a whole type token spells (``fp16``, ``tensor<fp16, [2]>``), None if it is none."""
    scalar = SCALAR_TYPES.get(tok)
    if scalar is not None or len(tok) > CACHED_LITERAL_CHARS or not tok.startswith("tensor<"):
        return scalar
    try:
        return tensor_type(tok)
    except BadTypeToken:
        return None


# literal text -> its Value, oldest first (remember_literal); popitem(last=False) is O(1), where
# deleting a dict's first key is not once many have gone
_LITERALS: OrderedDict[str, Value] = OrderedDict()


def remember_literal(text: str, value: Value) -> None:
    """Remember the Value a literal's text spells (read-only: every line repeating it shares it)."""
    if len(text) > CACHED_LITERAL_CHARS:
        return
    if isinstance(value.const, np.ndarray):
        value.const.setflags(write=False)
    if len(_LITERALS) >= CACHE_ENTRIES:
        _LITERALS.popitem(last=False)  # the oldest goes
    _LITERALS[text] = value


_tensor_type = tensor_type  # the LRU of type tokens (tests read its size)


def clear_caches() -> None:
    """Forget the types and literals remembered across programs (benchmarks read text cold)."""
    tensor_type.cache_clear()
    _LITERALS.clear()
