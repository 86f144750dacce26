"""The OpenAI API's requests and errors: each field checked, each error an OpenAI error object.

:func:`chat_request` and :func:`completion_request` turn a decoded JSON body into a
:class:`Request` or raise :class:`ApiError` naming the field (``param``), as OpenAI's
own API does. Parameters real clients send are each supported, accepted at their no-op
value (``presence_penalty: 0``, ``logprobs: false``, empty ``tools`` ...) or refused by
name; ``user``, ``metadata``, ``store`` and ``service_tier`` are read and ignored.
Anything else is refused by name, so a typo never silently changes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ApiError", "Request", "chat_request", "completion_request", "error_body"]

ROLES = ("system", "developer", "user", "assistant", "tool")
IGNORED = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls"})
MAX_MESSAGES = 4096
MAX_SEED = 2**63 - 1
# a parameter whose no-op value is accepted and whose other values are refused by name
NO_OP = {
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "logit_bias": ({},),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "tools": ([],),
    "tool_choice": ("none", "auto"),
    "functions": ([],),
    "response_format": ({"type": "text"},),
    "echo": (False,),
    "best_of": (1,),
    "suffix": ("",),
}
COMMON = frozenset({"model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n",
                    "stream", "stream_options", "repetition_penalty", "ignore_eos"})  # fmt: skip
CHAT_FIELDS = COMMON | {"messages", "max_completion_tokens"}
COMPLETION_FIELDS = COMMON | {"prompt"}


class ApiError(Exception):
    """An error the server answers with: HTTP status, OpenAI error type, the field, a message."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.kind, self.code, self.retry_after = kind, code, retry_after

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.kind, self.param, self.code)


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def invalid(param: str, message: str) -> ApiError:
    """A 400 naming ``param``."""
    return ApiError(400, f"{param}: {message}", param=param, code="invalid_value")


@dataclass
class Request:
    """A checked request: the prompt (messages or text or ids) and how to generate."""

    kind: str  # "chat" | "completion"
    model: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    prompt: str | list[int] = ""
    max_tokens: int | None = None  # None: the context that remains after the prompt
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    ignore_eos: bool = False  # vLLM's extension: only max_tokens and stop strings end the reply

    def sampling(self) -> dict[str, Any]:
        """The keywords of :meth:`anekit.llm.Model.stream` this request asks for."""
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "repetition_penalty": self.repetition_penalty,
            "seed": self.seed,
        }


def _number(body: dict, name: str, default: float, low: float, high: float, *, open_low=False):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise invalid(name, f"expected a number, found {value!r:.60}")
    if value < low or value > high or (open_low and value == low):
        bracket = "(" if open_low else "["
        raise invalid(name, f"expected a number in {bracket}{low:g}, {high:g}], found {value}")
    return float(value)


def _integer(body: dict, name: str, low: int, high: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, f"expected a whole number, found {value!r:.60}")
    if value < low or (high is not None and value > high):
        upper = f" and at most {high}" if high is not None else ""
        raise invalid(name, f"expected at least {low}{upper}, found {value}")
    return value


def _stops(body: dict) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise invalid(
            "stop", f"expected a string or a list of non-empty strings, found {value!r:.80}"
        )
    from anekit.errors import UsageError
    from anekit.llm.stops import check_stops

    try:
        return check_stops(stops)
    except UsageError as e:
        raise invalid("stop", str(e).removeprefix("stop: ")) from None


def _check_fields(body: dict, allowed: frozenset[str]) -> None:
    for name, value in body.items():
        if name in allowed or name in IGNORED:
            continue
        if name in NO_OP:
            if value is None or value in NO_OP[name]:
                continue
            accepted = " or ".join(repr(v) for v in NO_OP[name])
            raise ApiError(
                400,
                f"{name}: not supported by this server (accepted: {accepted} or null; "
                f"found {value!r:.80})",
                param=name,
                code="unsupported_parameter",
            )
        raise ApiError(400, f"{name}: unknown parameter", param=name, code="unknown_parameter")


def _common(body: Any, kind: str, allowed: frozenset[str]) -> Request:
    if not isinstance(body, dict):
        raise ApiError(400, f"expected a JSON object, found {type(body).__name__}")
    _check_fields(body, allowed)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model", f"expected the model's name, found {model!r:.60}")
    if body.get("n") not in (None, 1):
        raise invalid("n", f"only n=1 is supported, found {body.get('n')!r:.20}")
    for flag in ("stream", "ignore_eos"):
        if not isinstance(body.get(flag, False), bool) and body.get(flag) is not None:
            raise invalid(flag, f"expected true or false, found {body.get(flag)!r:.20}")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or not set(options) <= {"include_usage"}:
        raise invalid("stream_options", f"expected {{include_usage: bool}}, found {options!r:.60}")
    return Request(
        kind=kind,
        model=model,
        max_tokens=_integer(body, "max_tokens", 1),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, open_low=True),
        top_k=_integer(body, "top_k", 0) or 0,
        repetition_penalty=_number(body, "repetition_penalty", 1.0, 0.0, 10.0, open_low=True),
        seed=_integer(body, "seed", 0, MAX_SEED) or 0,
        stop=_stops(body),
        stream=bool(body.get("stream")),
        ignore_eos=bool(body.get("ignore_eos")),
        include_usage=bool(options.get("include_usage", False)),
    )


def _content(message: dict, i: int) -> str:
    """A message's text: a string, or a list of ``{"type": "text", "text": ...}`` parts."""
    content = message.get("content")
    where = f"messages[{i}].content"
    if content is None:
        if message.get("role") == "assistant":
            return ""
        raise invalid(where, "expected text, found null")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise invalid(f"{where}[{j}]", f"only text parts are supported, found {kind!r}")
            if not isinstance(part.get("text"), str):
                raise invalid(f"{where}[{j}].text", "expected text")
            texts.append(part["text"])
        return "".join(texts)
    raise invalid(where, f"expected text or a list of text parts, found {type(content).__name__}")


def chat_request(body: Any) -> Request:
    """A ``POST /v1/chat/completions`` body, checked."""
    request = _common(body, "chat", CHAT_FIELDS)
    if request.max_tokens is None:
        request.max_tokens = _integer(body, "max_completion_tokens", 1)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "expected a non-empty list of messages")
    if len(messages) > MAX_MESSAGES:
        raise invalid("messages", f"at most {MAX_MESSAGES} messages, found {len(messages)}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise invalid(f"messages[{i}]", f"expected an object, found {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise invalid(
                f"messages[{i}].role", f"expected one of {', '.join(ROLES)}, found {role!r:.40}"
            )
        request.messages.append({"role": role, "content": _content(m, i)})
    return request


def completion_request(body: Any) -> Request:
    """A ``POST /v1/completions`` body, checked (``prompt``: text, one text, or token ids)."""
    request = _common(body, "completion", COMPLETION_FIELDS)
    if request.max_tokens is None:
        request.max_tokens = 16  # OpenAI's default for completions
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    ids = isinstance(prompt, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    )
    if not (isinstance(prompt, str) or (ids and prompt)):
        raise invalid(
            "prompt", "expected text, a list of one text, or a non-empty list of token ids"
        )
    request.prompt = prompt
    return request
