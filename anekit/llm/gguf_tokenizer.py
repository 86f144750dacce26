"""Tokenizers stored in GGUF metadata (``tokenizer.ggml.*``), behind the same interface as
``tokenizer.json`` ones (``encode``, ``decode``, ``vocab_size``).

Two models are read, as llama.cpp names them:

- ``llama``: SentencePiece-style. Spaces become ``▁`` (and one is put in front), the text
  is split into characters, and the adjacent pair whose joined piece is in the vocabulary
  with the highest score merges first, until no pair is a piece; a character left outside
  the vocabulary becomes its UTF-8 bytes' ``<0xXX>`` tokens (byte fallback). This is
  llama.cpp's ``llm_tokenizer_spm``, written here in Python.
- ``gpt2``: byte-level BPE with the stored merges, through the ``tokenizers`` library (the
  ``llm`` extra), with the pre-tokenizer ``tokenizer.ggml.pre`` names.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

from anekit.errors import ModelError

SPACE = "\u2581"  # ▁
CONTROL, USER_DEFINED, BYTE = 3, 4, 6  # llama.cpp's token types
# tokenizer.ggml.pre -> the split pattern before byte-level BPE (None: GPT-2's own)
PRE_TOKENIZERS: dict[str, str | None] = {
    "default": None,
    "gpt2": None,
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"
    r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def _list(metadata: Mapping[str, Any], key: str, source: str) -> list:
    value = metadata.get(key)
    if not isinstance(value, list):
        raise ModelError(
            f"metadata {key} must be an array, found {type(value).__name__}", path=source
        )
    return value


class SentencePieceTokenizer:
    """llama.cpp's SentencePiece-style tokenizer over a GGUF vocabulary with scores."""

    def __init__(self, metadata: Mapping[str, Any], source: str) -> None:
        self.pieces = [str(t) for t in _list(metadata, "tokenizer.ggml.tokens", source)]
        scores = metadata.get("tokenizer.ggml.scores") or [0.0] * len(self.pieces)
        types = metadata.get("tokenizer.ggml.token_type") or [1] * len(self.pieces)
        if len(scores) != len(self.pieces) or len(types) != len(self.pieces):
            raise ModelError(
                f"{len(self.pieces)} tokens but {len(scores)} scores and {len(types)} types",
                path=source,
            )
        self.vocab_size = len(self.pieces)
        self.ids = {p: i for i, p in enumerate(self.pieces) if types[i] != BYTE}
        self.scores = [float(s) for s in scores]
        self.types = list(types)
        self.byte_ids = {
            int(p[3:5], 16): i for i, p in enumerate(self.pieces)
            if types[i] == BYTE and len(p) == 6 and p.startswith("<0x") and p.endswith(">")
            and all(c in "0123456789abcdefABCDEF" for c in p[3:5])  # "<0x3i>" is no byte
        }  # fmt: skip
        self.bos = metadata.get("tokenizer.ggml.bos_token_id")
        self.add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", True))
        self.space_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))

    def encode(self, text: str) -> list[int]:
        if self.space_prefix and text:
            text = " " + text
        symbols = list(text.replace(" ", SPACE))
        ids = [] if not (self.add_bos and self.bos is not None) else [int(self.bos)]
        for piece in self._merge(symbols):
            if piece in self.ids:
                ids.append(self.ids[piece])
            else:
                ids.extend(self._bytes(piece))
        return ids

    def _merge(self, symbols: list[str]) -> list[str]:
        """Merge the best-scoring adjacent pair until none forms a piece (leftmost on ties)."""
        left = list(range(-1, len(symbols) - 1))
        right = list(range(1, len(symbols) + 1))
        alive = [True] * len(symbols)
        queue: list[tuple[float, int, int, str]] = []

        def push(i: int) -> None:
            j = right[i]
            if 0 <= i and j < len(symbols):
                joined = symbols[i] + symbols[j]
                if joined in self.ids:
                    heapq.heappush(queue, (-self.scores[self.ids[joined]], i, j, joined))

        for i in range(len(symbols) - 1):
            push(i)
        while queue:
            _, i, j, joined = heapq.heappop(queue)
            if not (alive[i] and alive[j] and right[i] == j and symbols[i] + symbols[j] == joined):
                continue  # a stale pair: one side has merged since
            symbols[i], alive[j] = joined, False
            right[i] = right[j]
            if right[j] < len(symbols):
                left[right[j]] = i
            if left[i] >= 0:
                push(left[i])
            push(i)
        return [s for s, a in zip(symbols, alive) if a]

    def _bytes(self, piece: str) -> list[int]:
        try:
            return [self.byte_ids[b] for b in piece.encode("utf-8")]
        except KeyError:
            unk = self.ids.get("<unk>", 0)
            return [unk]

    def decode(self, ids: list[int]) -> str:
        out = bytearray()
        for i in ids:
            if not 0 <= i < self.vocab_size or self.types[i] == CONTROL:
                continue
            piece = self.pieces[i]
            if self.types[i] == BYTE:
                out.append(int(piece[3:5], 16))
            else:
                out += piece.replace(SPACE, " ").encode("utf-8")
        text = out.decode("utf-8", errors="replace")
        return text[1:] if self.space_prefix and text.startswith(" ") else text


class ByteLevelBpeTokenizer:
    """A GGUF ``gpt2`` vocabulary and merges as a ``tokenizers`` byte-level BPE tokenizer."""

    def __init__(self, metadata: Mapping[str, Any], source: str) -> None:
        try:
            from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
        except ImportError as e:
            raise ModelError(
                "a GGUF BPE tokenizer needs the 'tokenizers' package: pip install 'anekit[llm]'",
                path=source,
            ) from e
        tokens = [str(t) for t in _list(metadata, "tokenizer.ggml.tokens", source)]
        merges = [
            tuple(str(m).split(" ", 1)) for m in _list(metadata, "tokenizer.ggml.merges", source)
        ]
        pre = str(metadata.get("tokenizer.ggml.pre", "default"))
        if pre not in PRE_TOKENIZERS:
            raise ModelError(
                f"tokenizer.ggml.pre {pre!r} is not supported; supported: {', '.join(PRE_TOKENIZERS)}",
                path=source,
            )
        if any(len(m) != 2 for m in merges):
            raise ModelError("tokenizer.ggml.merges holds an entry without a space", path=source)
        self.vocab_size = len(tokens)
        tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
        pattern = PRE_TOKENIZERS[pre]
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pattern is None)
        tok.pre_tokenizer = byte_level if pattern is None else pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(pattern), "isolated"), byte_level]
        )  # fmt: skip
        tok.decoder = decoders.ByteLevel()
        types = metadata.get("tokenizer.ggml.token_type") or []
        special = [tokens[i] for i, t in enumerate(types) if t in (CONTROL, USER_DEFINED)]
        tok.add_special_tokens([AddedToken(t, special=True) for t in special])
        self._tok = tok
        self.bos = metadata.get("tokenizer.ggml.bos_token_id")
        self.add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", False))

    def encode(self, text: str) -> list[int]:
        ids = list(self._tok.encode(text, add_special_tokens=False).ids)
        return [int(self.bos)] + ids if self.add_bos and self.bos is not None else ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)


def gguf_tokenizer(
    metadata: Mapping[str, Any], source: str
) -> SentencePieceTokenizer | ByteLevelBpeTokenizer | None:
    """The tokenizer a GGUF file's metadata describes, or None when it holds none."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind is None:
        return None
    if kind == "llama":
        return SentencePieceTokenizer(metadata, source)
    if kind == "gpt2":
        return ByteLevelBpeTokenizer(metadata, source)
    raise ModelError(
        f"tokenizer.ggml.model {kind!r} is not supported; supported: llama, gpt2", path=source
    )
