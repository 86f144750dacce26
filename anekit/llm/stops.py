"""Generated text with stop strings: matched across token boundaries, never splitting a character.

:class:`TextStream` turns tokens into text without splitting a UTF-8 character (a piece
ending in an incomplete one waits for the next token). :class:`StopStrings` holds back
the end of that text while it could still be the start of a stop string, so what it
releases never contains a stop string or the part of one before it: the reply is cut
exactly before the first stop string, as OpenAI's ``stop`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from anekit.errors import UsageError
from anekit.llm.tokenizer import TextStream

__all__ = ["MAX_STOPS", "ReplyText", "StopStrings", "check_stops"]

MAX_STOPS = 16  # stop strings per request (OpenAI allows 4)
MAX_STOP_CHARS = 256


class StopStrings:
    """Releases text as it grows, holding back whatever could still begin a stop string."""

    def __init__(self, stops: Iterable[str] = ()) -> None:
        self.stops = check_stops(stops)
        self._pending = ""
        self.stopped: str | None = None  # the stop string found, once found

    def push(self, text: str) -> str:
        """Add ``text``; returns what is now certain to be reply text (possibly empty)."""
        if self.stopped is not None:
            return ""
        pending = self._pending + text
        found = [(pending.find(s), s) for s in self.stops if s in pending]
        if found:
            at, self.stopped = min(found)
            self._pending = ""
            return pending[:at]
        keep = self._held(pending)
        self._pending = pending[len(pending) - keep :] if keep else ""
        return pending[: len(pending) - keep]

    def flush(self) -> str:
        """The text held back (at the end of a reply that met no stop string)."""
        text, self._pending = self._pending, ""
        return "" if self.stopped is not None else text

    def _held(self, text: str) -> int:
        """The length of the longest end of ``text`` that is the start of a stop string."""
        longest = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:n]):
                    longest = n
                    break
        return longest


def check_stops(stops: Iterable[str]) -> tuple[str, ...]:
    """Stop strings: at most :data:`MAX_STOPS`, each non-empty text of at most MAX_STOP_CHARS."""
    stops = tuple(stops)
    if len(stops) > MAX_STOPS:
        raise UsageError(f"stop: at most {MAX_STOPS} strings, found {len(stops)}")
    for s in stops:
        if not isinstance(s, str) or not 0 < len(s) <= MAX_STOP_CHARS:
            raise UsageError(
                f"stop: expected strings of 1 to {MAX_STOP_CHARS} characters, found {s!r:.80}"
            )
    return stops


class ReplyText:
    """One reply's text, a token at a time: end-of-turn handling is the token stream's, stop
    strings and whole characters are this object's.

    Attributes:
        tokens: the tokens taken (up to the one completing a stop string).
        stop: the stop string that ended the reply, once one has.
    """

    def __init__(
        self, tokenizer: Any, prompt_ids: Sequence[int], stops: Iterable[str] = ()
    ) -> None:
        self._text = TextStream(tokenizer, list(prompt_ids))
        self._watch = StopStrings(stops)
        self.tokens: list[int] = []
        self.text = ""  # the whole reply, where a writer keeps it (anekit.llm.run.write_reply)

    @property
    def stop(self) -> str | None:
        return self._watch.stopped

    def push(self, token: int) -> str:
        """Add a decoded token; returns the reply text it makes certain (possibly empty)."""
        self.tokens.append(token)
        return self._watch.push(self._text.push(token))

    def finish(self) -> str:
        """The text still held back once the token stream has ended."""
        tail = self._watch.push(self._text.flush())
        return tail + self._watch.flush()

    def finish_reason(self, max_tokens: int) -> str:
        """OpenAI's ``finish_reason``: "length" when the reply ran out of tokens, else "stop"
        (a stop string, or an end-of-turn token the stream stopped at)."""
        if self.stop is None and len(self.tokens) >= max_tokens:
            return "length"
        return "stop"
