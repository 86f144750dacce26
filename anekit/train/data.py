"""Training data: byte-level text, llama2.c pretokenized ``.bin`` files and their tokenizer, batches.

* A text file is its UTF-8 bytes (vocabulary 256).
* A llama2.c ``.bin`` is a flat array of little-endian uint16 token ids; its
  ``tokenizer.bin`` holds ``i32 max_token_length``, then per token ``f32 score,
  i32 length, bytes`` (ANE_NOTES section 5; llama2.c ``run.c``).
* With no file, the corpus is the documentation CPython ships in
  ``pydoc_data.topics`` (about 450 KB of English prose and code), so training works
  offline on a fresh machine.
"""

from __future__ import annotations

import heapq
import math
import os
import struct
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

from anekit.errors import UsageError, os_reason
from anekit.files import open_regular, read_regular

BOS = 1  # llama2.c / sentencepiece: 1 begins a sequence, 3 + b is raw byte b
BYTE_OFFSET = 3
TOKENIZER_FILE = "tokenizer.bin"  # its name inside a checkpoint
# llama2.c's 32000-token tokenizer.bin is 434 KB; a million tokens of up to 64 bytes fit
MAX_TOKENIZER_BYTES = 64 * 2**20
# Token files are memory-mapped, not read: any size the address space holds will do.
MAX_DATA_BYTES = 2**62


class Tokenizer(Protocol):
    """Turns text into token ids and back."""

    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def describe(self) -> dict[str, Any]:
        """A JSON record of the tokenizer, for a checkpoint's ``state.json``."""
        ...

    def stored_files(self) -> dict[str, bytes]:
        """Files a checkpoint stores beside the record (name -> contents), so it is self-contained."""
        ...


class ByteTokenizer:
    """Byte-level tokens: a token is one UTF-8 byte."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def describe(self) -> dict[str, Any]:
        return {"kind": "bytes"}

    def stored_files(self) -> dict[str, bytes]:
        return {}


class Llama2cTokenizer:
    """The sentencepiece BPE vocabulary of llama2.c's ``tokenizer.bin``: greedy highest-score merges."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        data = read_regular(path, limit=MAX_TOKENIZER_BYTES, what="a llama2.c tokenizer.bin")
        self._parse(data, str(path))

    @classmethod
    def from_bytes(cls, data: bytes, name: str) -> Llama2cTokenizer:
        """The tokenizer in ``data``, the contents of a tokenizer.bin called ``name`` in messages."""
        tokenizer = cls.__new__(cls)
        tokenizer._parse(bytes(data), name)
        return tokenizer

    def _parse(self, data: bytes, name: str) -> None:
        self.name = name
        self.data = data
        if len(data) < 4:
            raise UsageError(
                f"too short for a llama2.c tokenizer.bin ({len(data)} bytes)", path=name
            )
        (self.max_token_length,) = struct.unpack_from("<i", data, 0)
        self.pieces: list[bytes] = []
        self.scores: list[float] = []
        offset = 4
        while offset < len(data):
            if offset + 8 > len(data):
                raise UsageError(f"truncated entry {len(self.pieces)} at byte {offset}", path=name)
            score, length = struct.unpack_from("<fi", data, offset)
            offset += 8
            if length < 0 or offset + length > len(data):
                raise UsageError(
                    f"entry {len(self.pieces)} at byte {offset - 8} has length "
                    f"{length}, past the end of the file ({len(data)} bytes)",
                    path=name,
                )
            self.pieces.append(data[offset : offset + length])
            self.scores.append(score)
            offset += length
        if len(self.pieces) < 2:  # a model needs at least two tokens to predict between
            raise UsageError(f"{len(self.pieces)} token(s); expected at least 2", path=name)
        self.vocab_size = len(self.pieces)
        self._ids = {p: i for i, p in enumerate(self.pieces)}

    def encode(self, text: str) -> list[int]:
        """BOS, a leading space (sentencepiece's dummy prefix), then merged pieces.

        The merges are llama2.c's (the highest-scoring adjacent pair first, the leftmost of
        equals), taken from a heap of candidate pairs: ``n log n`` in the text's length,
        where rescanning every pair after each merge was quadratic.
        """
        ids = []
        for ch in " " + text if text else "":
            piece = ch.encode("utf-8")
            if piece in self._ids:
                ids.append(self._ids[piece])
            else:
                ids.extend(self._byte_id(b, ch) for b in piece)
        return [BOS, *self._merge(ids)]

    def _byte_id(self, byte: int, ch: str) -> int:
        """The id of a raw byte's piece (sentencepiece's byte fallback)."""
        token = byte + BYTE_OFFSET
        if token >= self.vocab_size:
            raise UsageError(
                f"{ch!r} needs byte piece {token}, but the tokenizer has {self.vocab_size} "
                "pieces (no byte fallback)",
                path=self.name,
            )
        return token

    def _merge(self, ids: list[int]) -> list[int]:
        """Apply merges to ``ids`` in place of a doubly linked list; returns the survivors."""
        n = len(ids)
        after, before, alive = list(range(1, n + 1)), list(range(-1, n - 1)), [True] * n
        heap: list[tuple[float, int, int, int, int]] = []

        def candidate(i: int) -> None:
            j = after[i]
            if j < n:
                merged = self._ids.get(self.pieces[ids[i]] + self.pieces[ids[j]])
                if merged is not None and not math.isnan(self.scores[merged]):
                    heapq.heappush(heap, (-self.scores[merged], i, ids[i], ids[j], merged))

        for i in range(n - 1):
            candidate(i)
        while heap:
            _, i, left, right, merged = heapq.heappop(heap)
            j = after[i]
            if not alive[i] or j >= n or (ids[i], ids[j]) != (left, right):
                continue  # a neighbour changed since this pair was pushed
            ids[i], alive[j], after[i] = merged, False, after[j]
            if after[j] < n:
                before[after[j]] = i
            if before[i] >= 0:
                candidate(before[i])
            candidate(i)
        return [t for t, live in zip(ids, alive) if live]

    def decode(self, ids: list[int]) -> str:
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise UsageError(
                f"token ids {bad[:5]} are outside the tokenizer's {self.vocab_size} pieces",
                path=self.name,
            )
        out = bytearray()
        for prev, tok in zip([BOS, *ids], ids):
            if tok == BOS:
                continue
            piece = self.pieces[tok]
            if piece.startswith(b"<0x") and piece.endswith(b">") and len(piece) == 6:
                piece = _hex_byte(piece)
            elif prev == BOS and piece.startswith(b" "):
                piece = piece[1:]
            out += piece
        return out.decode("utf-8", errors="replace")

    def describe(self) -> dict[str, Any]:
        return {"kind": "llama2c", "file": TOKENIZER_FILE, "source": self.name}

    def stored_files(self) -> dict[str, bytes]:
        return {TOKENIZER_FILE: self.data}


def _hex_byte(piece: bytes) -> bytes:
    """The byte a ``<0xAB>`` piece stands for (the piece itself if its digits are not hex)."""
    try:
        return bytes([int(piece[3:5], 16)])
    except ValueError:
        return piece


def tokenizer_from(description: Any, files: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from its ``describe()`` record and the files stored beside it.

    ``files`` maps a file name to its contents, as a checkpoint holds them. Raises
    UsageError for a record of another kind or a missing file.
    """
    kind = description.get("kind") if isinstance(description, dict) else None
    if kind == "bytes":
        return ByteTokenizer()
    if kind == "llama2c":
        name = description.get("file")
        if not isinstance(name, str):  # anekit before the tokenizer moved into checkpoints
            raise UsageError(
                "the tokenizer is not stored with this model (it names "
                f"{description.get('path')!r}); pass its tokenizer.bin with --tokenizer"
            )
        data = files.get(name)
        if not isinstance(data, bytes):
            raise UsageError(f"the tokenizer file {name!r} is not stored with this model")
        return Llama2cTokenizer.from_bytes(data, name)
    raise UsageError(f"unknown tokenizer kind {kind!r}; expected 'bytes' or 'llama2c'")


def default_corpus() -> np.ndarray:
    """The byte-level default corpus: every topic of CPython's ``pydoc_data.topics``, sorted by name."""
    try:
        from pydoc_data.topics import topics
    except ImportError as e:  # some distributions strip the pydoc data
        raise UsageError(
            "this Python has no pydoc_data.topics (the default corpus); pass --data FILE"
        ) from e
    text = "\n\n".join(topics[name] for name in sorted(topics))
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def load_data(
    path: str | Path | None, tokenizer_path: str | Path | None = None
) -> tuple[np.ndarray, Tokenizer]:
    """Tokens and tokenizer of a training file: ``.bin`` (llama2.c uint16), anything else text; None: the default corpus.

    The file is memory-mapped, not read into memory. Raises UsageError for a path that is
    missing or not a regular file, and for tokens the tokenizer does not know.
    """
    if tokenizer_path is not None and (path is None or Path(path).suffix != ".bin"):
        raise UsageError(
            f"a tokenizer ({tokenizer_path}) applies only to llama2.c .bin data; "
            f"found {'the default corpus' if path is None else repr(str(path))}, read as UTF-8 bytes"
        )
    if path is None:
        return default_corpus(), ByteTokenizer()
    path = Path(path)
    is_bin = path.suffix == ".bin"
    what = "llama2.c tokens (.bin)" if is_bin else "training text"
    with open_regular(path, limit=MAX_DATA_BYTES, what=what) as f:
        size = os.fstat(f.fileno()).st_size
        if not is_bin:
            return _mapped(f, size, np.uint8), ByteTokenizer()
        if size % 2:
            raise UsageError(f"{size} bytes is not a whole number of uint16 tokens", path=str(path))
        tokens = _mapped(f, size, np.dtype("<u2"))
    tok_path = Path(tokenizer_path) if tokenizer_path else path.with_name(TOKENIZER_FILE)
    if not tok_path.exists():
        raise UsageError(
            f"llama2.c tokens need their tokenizer; {tok_path} not found (--tokenizer)",
            path=str(path),
        )
    tokenizer = Llama2cTokenizer(tok_path)
    top = int(tokens.max()) if len(tokens) else 0
    if top >= tokenizer.vocab_size:
        raise UsageError(
            f"token id {top} is outside the vocabulary of {tok_path} ({tokenizer.vocab_size})",
            path=str(path),
        )
    return tokens, tokenizer


def _mapped(f: BinaryIO, size: int, dtype: np.dtype) -> np.ndarray:
    """The file's contents as a read-only array, mapped rather than read."""
    # np.memmap refuses an empty file; an empty array lets the caller report the length
    if not size:
        return np.zeros(0, dtype=dtype)
    try:
        return np.memmap(f, dtype=dtype, mode="r")
    except OSError as e:  # ENOMEM: more than the address-space limit (ulimit -v) allows
        raise UsageError(f"cannot map the token file into memory: {os_reason(e)}",
                         path=f.name) from None  # fmt: skip


class Batches:
    """Sequences of ``seq + 1`` tokens in a shuffled order, resumable from ``state()``.

    The data is cut into windows starting every ``seq`` tokens (input and target
    overlap by one token); each epoch visits every window once, in a permutation
    fixed by ``(seed, epoch)``, so ``state()`` (seed, epoch, cursor) resumes it.
    """

    def __init__(
        self, tokens: np.ndarray, seq: int, seed: int, epoch: int = 0, cursor: int = 0
    ) -> None:
        self.tokens = tokens
        self.seq = seq
        self.seed = seed
        self.windows = (len(tokens) - 1) // seq
        if self.windows < 1:
            raise ValueError(f"training data has {len(tokens)} tokens; needs at least {seq + 1}")
        if not 0 <= cursor < self.windows:
            raise ValueError(f"data cursor {cursor} is outside [0, {self.windows})")
        self.epoch = epoch
        self.cursor = cursor
        self._order = self._permutation(epoch)

    def next(self, batch: int) -> np.ndarray:
        """The next ``batch`` windows as int64 ``[batch, seq + 1]``."""
        out = np.empty((batch, self.seq + 1), dtype=np.int64)
        for row in out:
            start = int(self._order[self.cursor]) * self.seq
            row[:] = self.tokens[start : start + self.seq + 1]
            self.cursor += 1
            if self.cursor == self.windows:
                self.epoch, self.cursor = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
        return out

    def skip(self, batch: int) -> None:
        """Move past the next ``batch`` windows without reading them (another rank's micro-batch)."""
        for _ in range(batch):
            self.cursor += 1
            if self.cursor == self.windows:
                self.epoch, self.cursor = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)

    def state(self) -> dict[str, int]:
        """Everything that fixes the rest of the order: ``Batches(tokens, seq, **state)`` resumes."""
        return {"seed": self.seed, "epoch": self.epoch, "cursor": self.cursor}

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.windows)
