"""The OpenAI-compatible HTTP API as a Starlette app over an :class:`~anekit.llm.serve.engine.Engine`.

Routes: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions`` (a
JSON reply, or with ``stream: true`` server-sent events in OpenAI's chunk format ending
with ``data: [DONE]``) and ``GET /health``. Every error is an OpenAI error object with
its status; bodies are bounded; with an API key every ``/v1`` route wants
``Authorization: Bearer KEY``. A client that goes away cancels its generation: a stream
notices when Starlette cancels it, a plain request watches for the disconnect.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from anekit.errors import AnekitError
from anekit.files import parse_json
from anekit.llm.chat import encode_rendered
from anekit.llm.serve.engine import Engine, Job
from anekit.llm.serve.protocol import ApiError, Request, chat_request, completion_request

__all__ = ["ServeSettings", "create_app"]

MAX_BODY_BYTES = 4 << 20


@dataclass
class ServeSettings:
    """What the app needs besides the engine: the model's name, its template, limits, the key."""

    model_name: str
    max_seq: int
    template: Any = None  # a ChatTemplate, or None: chat completions are refused
    api_key: str | None = None
    max_body: int = MAX_BODY_BYTES
    health: dict[str, Any] | None = None  # the static part of /health (model, chip, backend)
    log: Any = sys.stderr  # the access log's stream (None: no log)


def create_app(engine: Engine, settings: ServeSettings) -> Starlette:
    """The Starlette app serving ``engine`` (its worker is started and stopped with the app)."""
    api = _Api(engine, settings)
    routes = [
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/v1/models/{name:path}", api.model, methods=["GET"]),
        Route("/v1/chat/completions", api.chat, methods=["POST"]),
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/health", api.health, methods=["GET"]),
    ]

    async def not_found(request: HttpRequest, exc: Exception) -> Response:
        return _error(ApiError(404, f"no route {request.method} {request.url.path}",
                               code="not_found"))  # fmt: skip

    async def method_not_allowed(request: HttpRequest, exc: Exception) -> Response:
        return _error(ApiError(405, f"{request.method} is not allowed on {request.url.path}"))

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            engine.stop()

    app = Starlette(
        routes=routes,
        exception_handlers={404: not_found, 405: method_not_allowed},
        lifespan=lifespan,
    )
    return AccessLog(app, settings.log) if settings.log is not None else app  # type: ignore[return-value]


def _error(err: ApiError) -> JSONResponse:
    headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


class _Api:
    """The route handlers."""

    def __init__(self, engine: Engine, settings: ServeSettings) -> None:
        self.engine, self.settings = engine, settings
        self.created = int(time.time())

    # -- plain routes -------------------------------------------------------------------------
    async def models(self, request: HttpRequest) -> Response:
        if (denied := self._denied(request)) is not None:
            return denied
        return JSONResponse({"object": "list", "data": [self._model_card()]})

    async def model(self, request: HttpRequest) -> Response:
        if (denied := self._denied(request)) is not None:
            return denied
        try:
            self._check_model(request.path_params["name"], param=None)
        except ApiError as e:
            return _error(e)
        return JSONResponse(self._model_card())

    async def health(self, request: HttpRequest) -> Response:
        return JSONResponse(
            {"status": "ok", **(self.settings.health or {}), "engine": self.engine.status()}
        )

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.settings.model_name, "object": "model", "created": self.created,
                "owned_by": "anekit"}  # fmt: skip

    def _denied(self, request: HttpRequest) -> Response | None:
        key = self.settings.api_key
        if key is None:
            return None
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode()):
            return None
        return JSONResponse(
            {"error": {"message": "a valid API key is required: Authorization: Bearer KEY",
                       "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )  # fmt: skip

    def _check_model(self, name: str, param: str | None = "model") -> None:
        if name != self.settings.model_name:
            raise ApiError(
                404,
                f"the model {name!r} does not exist; this server serves "
                f"{self.settings.model_name!r}",
                param=param,
                code="model_not_found",
            )

    # -- generation ---------------------------------------------------------------------------
    async def chat(self, request: HttpRequest) -> Response:
        return await self._generate(request, chat_request)

    async def completions(self, request: HttpRequest) -> Response:
        return await self._generate(request, completion_request)

    async def _generate(self, http: HttpRequest, parse: Any) -> Response:
        if (denied := self._denied(http)) is not None:
            return denied
        try:
            req = parse(await self._body(http))
            self._check_model(req.model)
            ids = await run_in_threadpool(self._prompt_ids, req)
            job = Job(req, ids, self._max_tokens(req, len(ids)), asyncio.get_running_loop())
            self.engine.submit(job)
        except ApiError as e:
            return _error(e)
        http.scope.setdefault("state", {})["job"] = job
        if req.stream:
            return StreamingResponse(self._events(job), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})  # fmt: skip
        return await self._whole(http, job)

    async def _body(self, http: HttpRequest) -> Any:
        limit = self.settings.max_body
        declared = http.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"the request body has {declared} bytes; the limit is {limit}")
        data = bytearray()
        async for chunk in http.stream():
            data += chunk
            if len(data) > limit:
                raise ApiError(413, f"the request body passed {limit} bytes")
        return parse_json(bytes(data), what="a JSON request body", path="the request body",
                          error=lambda message, path=None: ApiError(400, f"{path}: {message}"))  # fmt: skip

    def _prompt_ids(self, req: Request) -> list[int]:
        """The prompt's tokens: a chat rendered by the template, text encoded, or ids checked."""
        tok, vocab = self.engine.tokenizer, self.engine.model.config.vocab_size
        if req.kind == "chat":
            if self.settings.template is None:
                raise ApiError(400, "this model has no chat template; use /v1/completions, or "
                               "start the server with --chat-template FILE", param="messages")  # fmt: skip
            try:
                text = self.settings.template.render(req.messages, add_generation_prompt=True)
            except AnekitError as e:
                raise ApiError(400, str(e), param="messages") from None
            return encode_rendered(tok, text)
        if isinstance(req.prompt, list):
            bad = [t for t in req.prompt if not 0 <= t < vocab]
            if bad:
                raise ApiError(400, f"prompt: token ids {bad[:5]} are outside [0, {vocab})",
                               param="prompt")  # fmt: skip
            return list(req.prompt)
        from anekit.llm.run import prompt_ids

        try:
            return prompt_ids(self.engine.model, req.prompt)
        except AnekitError as e:
            raise ApiError(400, str(e), param="prompt") from None

    def _max_tokens(self, req: Request, prompt: int) -> int:
        """The reply's token limit; a prompt (plus max_tokens) beyond the context is a 400."""
        limit = self.settings.max_seq
        param = "messages" if req.kind == "chat" else "prompt"
        if prompt >= limit:
            raise ApiError(
                400,
                f"the prompt has {prompt} tokens; this server's context (--max-seq) is {limit} "
                "tokens, and at least one must be left for the reply",
                param=param,
                code="context_length_exceeded",
            )
        wanted = req.max_tokens if req.max_tokens is not None else limit - prompt
        if prompt + wanted > limit:
            raise ApiError(
                400,
                f"the prompt has {prompt} tokens and max_tokens asks for {wanted} more: "
                f"{prompt + wanted} exceed this server's context (--max-seq) of {limit} tokens",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return wanted

    async def _whole(self, http: HttpRequest, job: Job) -> Response:
        """Wait for the whole reply (cancelling it if the client goes away); answer it as JSON."""
        watch = asyncio.ensure_future(_disconnected(http))
        pieces: list[str] = []
        try:
            while True:
                kind, value = await job.events.get()
                if kind == "text":
                    pieces.append(value)
                elif kind == "error":
                    return _error(value)
                elif kind == "done":
                    return JSONResponse(self._reply(job, "".join(pieces)))
                else:  # cancelled by the engine (shutdown)
                    return _error(ApiError(503, "the request was cancelled: the server is "
                                           "shutting down", kind="server_error"))  # fmt: skip
        finally:
            watch.cancel()
            job.cancel()  # nothing if finished; stops the generation if the client went away

    def _reply(self, job: Job, text: str) -> dict[str, Any]:
        kind = job.request.kind
        choice: dict[str, Any] = {"index": 0, "finish_reason": job.finish_reason, "logprobs": None}
        if kind == "chat":
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {**self._head(job), "choices": [choice], "usage": _usage(job)}

    def _head(self, job: Job, chunk: bool = False) -> dict[str, Any]:
        if not hasattr(job, "reply_id"):
            prefix = "chatcmpl-" if job.request.kind == "chat" else "cmpl-"
            job.reply_id = prefix + secrets.token_hex(12)  # type: ignore[attr-defined]
        kind = "chat.completion" if job.request.kind == "chat" else "text_completion"
        return {"id": job.reply_id, "object": kind + (".chunk" if chunk and kind.startswith("chat") else ""),  # type: ignore[attr-defined]
                "created": int(time.time()), "model": self.settings.model_name}  # fmt: skip

    async def _events(self, job: Job) -> AsyncIterator[str]:
        """The reply as server-sent events; Starlette cancels this when the client goes away."""
        chat = job.request.kind == "chat"
        try:
            if chat:
                yield _sse(self._chunk(job, {"role": "assistant", "content": ""}))
            while True:
                kind, value = await job.events.get()
                if kind == "text":
                    yield _sse(self._chunk(job, {"content": value} if chat else value))
                elif kind == "done":
                    yield _sse(self._chunk(job, {} if chat else "", job.finish_reason))
                    if job.request.include_usage:
                        yield _sse({**self._head(job, True), "choices": [], "usage": _usage(job)})
                    yield "data: [DONE]\n\n"
                    return
                else:
                    err = value if kind == "error" else ApiError(503, "cancelled: shutting down")
                    yield _sse(err.body())
                    return
        finally:
            job.cancel()

    def _chunk(self, job: Job, delta: Any, finish: str | None = None) -> dict[str, Any]:
        if job.request.kind == "chat":
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        else:
            choice = {"index": 0, "text": delta, "finish_reason": finish, "logprobs": None}
        return {**self._head(job, True), "choices": [choice]}


def _usage(job: Job) -> dict[str, int]:
    prompt, completion = len(job.prompt_ids), job.completion_tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


def _sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _disconnected(http: HttpRequest) -> None:
    """Return when the client disconnects (the body has been read: only the disconnect remains)."""
    while True:
        message = await http.receive()
        if message["type"] == "http.disconnect":
            job = http.scope.get("state", {}).get("job")
            if job is not None:
                job.cancel()
            return


class AccessLog:
    """ASGI middleware: one line per request (method, path, status, time; tokens and outcome)."""

    def __init__(self, app: Any, stream: Any) -> None:
        self.app, self.stream = app, stream

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        begin, status = time.perf_counter(), [0]

        async def capture(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            self._line(scope, status[0], time.perf_counter() - begin)

    def _line(self, scope: dict, status: int, seconds: float) -> None:
        client = scope.get("client") or ("-", 0)
        job = scope.get("state", {}).get("job")
        extra = ""
        if job is not None:
            ttft = (job.first_token - job.submitted) * 1e3 if job.first_token else float("nan")
            outcome = job.outcome
            if outcome in ("queued", "running") and job.cancelled.is_set():
                outcome = "cancelled"  # the client went away; the engine stops it at its next step
            extra = (f" prompt={len(job.prompt_ids)} completion={job.completion_tokens} "
                     f"ttft_ms={ttft:.1f} outcome={outcome}")  # fmt: skip
        line = (f"{client[0]} {scope['method']} {scope['path']} {status} "
                f"{seconds * 1e3:.1f}ms{extra}")  # fmt: skip
        print(line, file=self.stream, flush=True)
