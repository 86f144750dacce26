"""Chat templates: a model's Jinja ``chat_template`` rendered as transformers renders it, sandboxed.

A chat template is untrusted input (it comes with a downloaded model), so it runs in
Jinja's :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` (no attribute access to
Python internals, no mutation of lists and dicts) with bounded work: every loop's items,
every call, filter and operator tick a budget checked against a deadline, and every string
a template builds or outputs is checked against a size limit. The environment is the one
``transformers.PreTrainedTokenizerBase.apply_chat_template`` uses (``trim_blocks``,
``lstrip_blocks``, loop controls, ``raise_exception``, ``strftime_now``, a ``tojson`` that
does not escape HTML, ``namespace`` and ``dict``), with the same variables (``messages``,
``add_generation_prompt``, ``tools``, ``documents`` and the named special tokens), so a
prompt has the same tokens here and in transformers.

End of turn: :func:`end_of_turn_ids` gathers the token ids that end a reply from
``config.json``, ``generation_config.json`` and ``tokenizer_config.json`` (a
Llama-3-Instruct reply ends at ``<|eot_id|>``, which only ``generation_config.json`` names).
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from anekit.errors import ModelError, UsageError
from anekit.files import read_json, read_regular

__all__ = [
    "BUILTIN_TEMPLATES",
    "ChatTemplate",
    "ChatTemplateError",
    "encode_rendered",
    "end_of_turn_ids",
    "load_chat_template",
    "read_json_file",
]

TOKENIZER_CONFIG = "tokenizer_config.json"
GENERATION_CONFIG = "generation_config.json"
TEMPLATE_FILE = "chat_template.jinja"
MAX_JSON_BYTES = 16 << 20  # a tokenizer_config.json with a long template is well under this
MAX_TEMPLATE_CHARS = 1 << 20
RENDER_SECONDS = 2.0  # a chat template renders in milliseconds; anything slower is refused
MAX_RENDER_CHARS = 4 << 20  # the prompt a template may produce, and any string it builds
TICKS_PER_CLOCK = 256  # budget ticks between two reads of the clock
# the tokens apply_chat_template passes to a template by name (transformers' special_tokens_map)
NAMED_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
# templates anekit brings, by name, for models without one (a demo checkpoint)
BUILTIN_TEMPLATES = {
    "plain": (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    ),
}


class ChatTemplateError(UsageError):
    """A chat template that cannot be used: missing, malformed, failing, too slow or too large."""


def read_json_file(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from a model directory's file (bounded, depth-limited, a regular file)."""
    raw = read_json(path, limit=MAX_JSON_BYTES, what=what, error=ModelError)
    if not isinstance(raw, dict):
        raise ModelError(f"expected a JSON object, found {type(raw).__name__}", path=str(path))
    return raw


def token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class _Budget:
    """Work a render may do: ticks checked against a deadline, sizes against a limit."""

    def __init__(self, seconds: float, max_chars: int) -> None:
        self.seconds, self.max_chars = seconds, max_chars
        self.deadline = 0.0
        self.ticks = 0

    def start(self) -> None:
        self.deadline = time.monotonic() + self.seconds
        self.ticks = 0

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks % TICKS_PER_CLOCK == 0:
            self.check_time()

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise ChatTemplateError(f"the chat template took longer than {self.seconds:g} s")

    def sized(self, value: Any) -> Any:
        """``value``, after checking that a string or list it is stays within the size limit."""
        if isinstance(value, (str, list, tuple)) and len(value) > self.max_chars:
            raise ChatTemplateError(
                f"the chat template built a value of {len(value)} items; "
                f"the limit is {self.max_chars}"
            )
        return value

    def arguments(self, args: Iterable[Any]) -> None:
        """Refuse a number argument that could build a value beyond the limit (a width, a count)."""
        for a in args:
            if isinstance(a, int) and not isinstance(a, bool) and abs(a) > self.max_chars:
                raise ChatTemplateError(
                    f"the chat template passed {a} to a call; the limit is {self.max_chars}"
                )

    def items(self, iterable: Any) -> Iterator[Any]:
        """Iterate ``iterable`` with one tick per item (every template loop runs through this)."""
        for item in iterable:
            self.tick()
            yield item


def _environment(budget: _Budget) -> Any:
    """Transformers' chat template environment, with every loop, call and operator budgeted."""
    import jinja2
    import jinja2.ext
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
    from jinja2.visitor import NodeTransformer

    class Bound(NodeTransformer):
        """Routes every loop's iterable and every ``~`` concatenation through a budget filter."""

        def visit_For(self, node: Any) -> Any:
            self.generic_visit(node)
            node.iter = nodes.Filter(node.iter, "anekit_items", [], [], None, None)
            return node

        def visit_Concat(self, node: Any) -> Any:
            self.generic_visit(node)
            return nodes.Filter(node, "anekit_sized", [], [], None, None)

    class Environment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+", "//", "%"})

        def _parse(self, source: str, name: Any, filename: Any) -> Any:
            return Bound().visit(super()._parse(source, name, filename))

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            budget.tick()
            budget.arguments((left, right) if operator in ("*", "**") else ())
            return budget.sized(super().call_binop(context, operator, left, right))

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            budget.tick()
            budget.arguments((*args, *kwargs.values()))
            return budget.sized(super().call(__context, __obj, *args, **kwargs))

        def getattr(self, obj: Any, attribute: str) -> Any:
            budget.tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj: Any, argument: Any) -> Any:
            budget.tick()
            return super().getitem(obj, argument)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(format: str) -> str:
        from datetime import datetime

        return datetime.now().strftime(format)

    class Namespace(jinja2.utils.Namespace):
        """A namespace that refuses underscore names (as transformers' does)."""

        def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 (Jinja's signature trick)
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for key in attrs:
                Namespace._check(key)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, key: str, value: Any) -> None:
            Namespace._check(key)
            budget.sized(value)
            jinja2.utils.Namespace.__setitem__(self, key, value)

        @staticmethod
        def _check(key: Any) -> None:
            if isinstance(key, str) and key.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {key!r} is refused")

    def bounded_range(*args: int) -> Any:
        budget.arguments(args)
        return safe_range(*args)

    env = Environment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.filters = {name: _budgeted(f, budget) for name, f in env.filters.items()}
    env.filters["anekit_items"] = budget.items
    env.filters["anekit_sized"] = budget.sized
    env.globals.update(
        raise_exception=raise_exception,
        strftime_now=strftime_now,
        dict=lambda *a, **k: dict(*a, **k),
        namespace=Namespace,
        range=bounded_range,
    )
    return env


def _budgeted(f: Callable[..., Any], budget: _Budget) -> Callable[..., Any]:
    """A filter that ticks the budget, refuses huge number arguments and oversized results."""

    @functools.wraps(f)  # keeps jinja_pass_arg (pass_context, pass_environment, ...)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        budget.tick()
        budget.arguments((*args[1:], *kwargs.values()))
        return budget.sized(f(*args, **kwargs))

    return wrapper


class ChatTemplate:
    """A compiled chat template and the special tokens it may refer to by name.

    Args:
        source: the Jinja text.
        special_tokens: ``bos_token``, ``eos_token``, ... (the template sees them by name).
        origin: where the template came from, for messages.
        seconds, max_chars: the render's time and size limits.
    """

    def __init__(
        self,
        source: str,
        special_tokens: dict[str, str] | None = None,
        *,
        origin: str = "<chat template>",
        seconds: float = RENDER_SECONDS,
        max_chars: int = MAX_RENDER_CHARS,
    ) -> None:
        import jinja2

        if len(source) > MAX_TEMPLATE_CHARS:
            raise ChatTemplateError(
                f"a chat template of {len(source)} characters; the limit is {MAX_TEMPLATE_CHARS}",
                path=origin,
            )
        self.source, self.origin = source, origin
        self.special_tokens = dict(special_tokens or {})
        self._budget = _Budget(seconds, max_chars)
        self._lock = threading.Lock()  # one render at a time: the budget is the template's
        try:
            self._template = _environment(self._budget).from_string(source)
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"not a Jinja template: {e}", path=origin) from None

    def render(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        **variables: Any,
    ) -> str:
        """The prompt text for ``messages`` (keys whose value is None dropped, as transformers does)."""
        import jinja2

        chat = [{k: v for k, v in m.items() if v is not None} for m in messages]
        context = {
            **self.special_tokens,
            **variables,
            "messages": chat,
            "add_generation_prompt": add_generation_prompt,
        }
        context.setdefault("tools", None)
        context.setdefault("documents", None)
        with self._lock:
            budget = self._budget
            budget.start()
            pieces, size = [], 0
            try:
                for piece in self._template.generate(**context):
                    size += len(piece)
                    if size > budget.max_chars:
                        raise ChatTemplateError(
                            f"the chat template's output passed {budget.max_chars} characters",
                            path=self.origin,
                        )
                    budget.check_time()
                    pieces.append(piece)
            except jinja2.TemplateError as e:
                raise ChatTemplateError(
                    f"the chat template failed: {e}", path=self.origin
                ) from None
            except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
                if isinstance(e, ChatTemplateError):
                    raise
                raise ChatTemplateError(
                    f"the chat template failed: {type(e).__name__}: {e}", path=self.origin
                ) from None
        return "".join(pieces)


def _template_text(raw: Any, origin: str) -> str:
    """tokenizer_config.json's ``chat_template``: a string, or a list of named templates."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        named = {t.get("name"): t.get("template") for t in raw if isinstance(t, dict)}
        if isinstance(named.get("default"), str):
            return named["default"]
    raise ChatTemplateError(
        "chat_template: expected a string or a list of {name, template} with a 'default'",
        path=origin,
    )


def load_chat_template(directory: str | Path, override: str | Path | None = None) -> ChatTemplate:
    """The chat template of a model directory (``chat_template.jinja`` or ``tokenizer_config.json``).

    Args:
        directory: the model directory (its tokenizer_config.json names the special tokens).
        override: a Jinja file to use instead of the model's own template, or the name of
            one of :data:`BUILTIN_TEMPLATES` ("plain": ``role: text`` lines).

    Raises:
        ChatTemplateError: the model has no template (and no override), or it does not parse.
    """
    d = Path(directory)
    config_path = d / TOKENIZER_CONFIG
    config = read_json_file(config_path, "a tokenizer_config.json") if config_path.is_file() else {}
    tokens = {n: t for n in NAMED_TOKENS if (t := token_text(config.get(n))) is not None}
    if override is not None and str(override) in BUILTIN_TEMPLATES and not Path(override).exists():
        return ChatTemplate(BUILTIN_TEMPLATES[str(override)], tokens, origin=str(override))
    if override is not None:
        path = Path(override)
    elif (d / TEMPLATE_FILE).is_file():
        path = d / TEMPLATE_FILE
    elif "chat_template" in config:
        return ChatTemplate(_template_text(config["chat_template"], str(config_path)), tokens,
                            origin=str(config_path))  # fmt: skip
    else:
        raise ChatTemplateError(
            "this model has no chat template (no chat_template in tokenizer_config.json, no "
            f"{TEMPLATE_FILE}); pass --chat-template FILE (or --chat-template plain for "
            "'role: text' lines), or generate without --chat",
            path=str(d),
        )
    data = read_regular(path, limit=MAX_TEMPLATE_CHARS * 4, what="a Jinja chat template",
                        error=ChatTemplateError)  # fmt: skip
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ChatTemplateError(f"not UTF-8 text: {e}", path=str(path)) from None
    return ChatTemplate(text, tokens, origin=str(path))


def _ids(value: Any) -> list[int]:
    """An ``eos_token_id`` field: an int or a list of ints (anything else contributes nothing)."""
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]


def end_of_turn_ids(
    directory: str | Path, tokenizer: Any = None, base: Iterable[int] = ()
) -> tuple[int, ...]:
    """Every token id that ends a reply: ``base`` (config.json's), generation_config.json's
    ``eos_token_id``, and tokenizer_config.json's ``eos_token`` looked up in the tokenizer."""
    d = Path(directory)
    found = list(base)
    generation = d / GENERATION_CONFIG
    if generation.is_file():
        found += _ids(read_json_file(generation, "a generation_config.json").get("eos_token_id"))
    config_path = d / TOKENIZER_CONFIG
    if config_path.is_file() and tokenizer is not None:
        eos = token_text(read_json_file(config_path, "a tokenizer_config.json").get("eos_token"))
        token_id = tokenizer.token_to_id(eos) if eos is not None else None
        if token_id is not None:
            found.append(int(token_id))
    return tuple(dict.fromkeys(found))


def encode_rendered(tokenizer: Any, text: str) -> list[int]:
    """The tokens of a rendered chat: a Hugging Face tokenizer adds no special tokens (the
    template wrote its own, as transformers encodes it); llama2.c and byte tokenizers encode
    as they always do."""
    from anekit.llm.tokenizer import HFTokenizer

    if isinstance(tokenizer, HFTokenizer):
        return tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.encode(text)
