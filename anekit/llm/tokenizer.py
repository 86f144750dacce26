"""Tokenizers for model directories (``tokenizer.json`` via the ``tokenizers`` library) and streaming text.

Every tokenizer here has ``encode(text) -> list[int]``, ``decode(ids) -> str`` and
``vocab_size``; llama2.c's ``tokenizer.bin`` uses :class:`anekit.train.data.Llama2cTokenizer`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from anekit.errors import ModelError
from anekit.files import parse_json, read_regular

TOKENIZER_FILE = "tokenizer.json"
# the largest published tokenizer.json files (Gemma's 256k tokens) are about 35 MB
MAX_TOKENIZER_BYTES = 256 << 20


class Tokenizer(Protocol):
    """Turns text into token ids and back."""

    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class HFTokenizer:
    """A Hugging Face ``tokenizer.json``: encode adds the special tokens its template says (BOS)."""

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer as _Tokenizer  # the "llm" extra
        except ImportError as e:
            raise ModelError(
                "reading tokenizer.json needs the 'tokenizers' package: pip install 'anekit[llm]'",
                path=str(path),
            ) from e
        self.path = Path(path)
        what = "a tokenizer.json"
        text = read_regular(self.path, limit=MAX_TOKENIZER_BYTES, what=what, error=ModelError)
        parse_json(text, what=what, path=str(path), error=ModelError)  # bounded nesting first
        try:
            self._tok: Any = _Tokenizer.from_str(text.decode("utf-8"))
        except Exception as e:  # the library raises its own exception type
            raise ModelError(
                f"not a tokenizer.json the tokenizers library reads: {e}", path=str(path)
            ) from e
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens=False`` for text a chat template rendered
        (it holds its own BOS), as transformers encodes it."""
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def token_to_id(self, token: str) -> int | None:
        """The id of one token of the vocabulary (a special token's text), or None."""
        return self._tok.token_to_id(token)

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``; ModelError for an id the tokenizer lacks (the library would
        drop it silently: a model's vocabulary is often padded past its tokenizer's)."""
        ids = list(ids)
        beyond = [t for t in ids if not 0 <= t < self.vocab_size]
        if beyond:
            raise ModelError(
                f"token ids {beyond[:5]} are beyond the tokenizer's {self.vocab_size} tokens "
                "(the model's vocabulary is larger): they have no text",
                path=str(self.path),
            )
        return self._tok.decode(ids, skip_special_tokens=True)


def load_tokenizer(directory: str | Path) -> HFTokenizer | None:
    """The tokenizer of a model directory, or None when it has no ``tokenizer.json``."""
    path = Path(directory) / TOKENIZER_FILE
    present = path.exists() or path.is_symlink()  # a FIFO or broken link is refused, not skipped
    return HFTokenizer(path) if present else None


class TextStream:
    """Turns tokens, one at a time, into the text they add to the prompt.

    Decoding token by token would break words a tokenizer decodes in context
    (sentencepiece drops a leading space at the start, UTF-8 characters span several
    byte tokens), so each push decodes the whole continuation after the prompt and
    returns what is new; text ending in an incomplete character waits for the next token.
    """

    def __init__(self, tokenizer: Tokenizer, prompt_ids: list[int]) -> None:
        self.tokenizer = tokenizer
        self.ids = list(prompt_ids)
        self._prompt = tokenizer.decode(self.ids)
        self._sent = 0

    def push(self, token: int) -> str:
        """Add one token; returns the new printable text (possibly empty)."""
        self.ids.append(token)
        text = self._continuation()
        if text.endswith("\ufffd"):  # a multi-byte character still arriving
            return ""
        new, self._sent = text[self._sent :], len(text)
        return new

    def flush(self) -> str:
        """Whatever is still held back (at the end of generation)."""
        text = self._continuation()
        new, self._sent = text[self._sent :], len(text)
        return new

    def _continuation(self) -> str:
        full = self.tokenizer.decode(self.ids)
        return full[len(self._prompt) :] if full.startswith(self._prompt) else full
