"""``anekit serve`` in a subprocess, driven by the official ``openai`` client: replies equal to
``anekit generate`` and to transformers, streaming, stop strings, concurrency, every error
class, cancellation on disconnect, and a healthy server after all of it."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("transformers")

from tests.serve_process import serve  # noqa: E402

NEAR_TIE = 0.25  # a top-2 gap of transformers' fp32 logits below this may flip a greedy token
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Once upon a time"}]
PROMPTS = ["The robot liked", "Every day it walked", "Once upon a time there", "asked for a new"]
MAX_SEQ = 1024
LONG = 600  # tokens of a request that must still be running a while later


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[Path, object]:
    from tests.chat_models import save_chat_model

    directory = tmp_path_factory.mktemp("serve") / "tiny-chat"
    directory.mkdir()
    reference = save_chat_model(directory, max_position=MAX_SEQ)
    return directory, reference


@pytest.fixture(scope="module")
def server(model):
    flags = ["--backend", "reference", "--max-seq", str(MAX_SEQ), "--max-sessions", "4",
             "--max-queue", "2", "--timeout", "1"]  # fmt: skip
    with serve(model[0], *flags) as process:
        yield process


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def health(server) -> dict:
    return httpx.get(server.url + "/health", timeout=10).json()


def wait_idle(server, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = health(server)
        if status["engine"]["running"] == 0 and status["engine"]["queued"] == 0:
            return status
        time.sleep(0.05)
    raise AssertionError(f"the server did not become idle: {status}")


def chat(client, messages=CHAT, **kw):
    return client.chat.completions.create(model="tiny-chat", messages=messages, temperature=0, **kw)


def test_models_lists_the_served_model(client):
    (card,) = client.models.list().data
    assert card.id == "tiny-chat" and card.owned_by == "anekit"
    assert client.models.retrieve("tiny-chat").id == "tiny-chat"


def transformers_greedy(model, ids: list[int], n: int) -> tuple[list[int], int]:
    """Transformers' greedy tokens and how many come before the first near-tie."""
    import torch

    tokens, sure = [], None
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids + tokens])).logits[0, -1].float().numpy()
            top = np.sort(logits)[-2:]
            if sure is None and top[1] - top[0] < NEAR_TIE:
                sure = len(tokens)
            tokens.append(int(np.argmax(logits)))
    return tokens, n if sure is None else sure


def test_chat_reply_equals_transformers_and_generate(model, client, capsys):
    from transformers import AutoTokenizer

    from anekit.cli import main

    directory, reference = model
    hf = AutoTokenizer.from_pretrained(directory)
    ids = list(
        hf.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True, return_dict=False)
    )
    reply = chat(client, max_tokens=12)
    assert reply.usage.prompt_tokens == len(ids)  # transformers' template token count
    assert reply.usage.completion_tokens <= 12
    expected, sure = transformers_greedy(reference, ids, 12)
    assert sure >= 3  # enough tokens before a near-tie for the comparison to mean something
    eot = {hf.convert_tokens_to_ids(t) for t in ("<eos>", "<|eot_id|>", "<|im_end|>")}
    ended = next((i for i, t in enumerate(expected) if t in eot), None)
    text = reply.choices[0].message.content
    if ended is not None and ended < sure:  # transformers ends the turn before any near-tie
        assert text == hf.decode(expected[:ended]) and reply.choices[0].finish_reason == "stop"
    else:
        assert text.startswith(hf.decode(expected[:sure]))
    argv = ["generate", "--model", str(directory), "--backend", "reference", "--chat",
            "--system", CHAT[0]["content"], "--prompt", CHAT[1]["content"],
            "--max-tokens", "12", "--temperature", "0", "--max-seq", str(MAX_SEQ)]  # fmt: skip
    capsys.readouterr()
    assert main(argv) == 0
    assert capsys.readouterr().out == text + "\n"  # bit for bit the same engine


def test_streams_join_to_the_plain_reply(client):
    plain = chat(client, max_tokens=20)
    chunks = list(chat(client, max_tokens=20, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    joined = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert joined == plain.choices[0].message.content
    finals = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finals == [plain.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    text = client.completions.create(
        model="tiny-chat", prompt=PROMPTS[0], max_tokens=15, temperature=0
    )
    parts = client.completions.create(model="tiny-chat", prompt=PROMPTS[0], max_tokens=15,
                                      temperature=0, stream=True)  # fmt: skip
    assert "".join(p.choices[0].text for p in parts) == text.choices[0].text
    assert text.usage.completion_tokens == 15 and text.choices[0].finish_reason == "length"


def test_stop_strings_cut_the_reply(client):
    whole = client.completions.create(
        model="tiny-chat", prompt=PROMPTS[1], max_tokens=30, temperature=0
    )
    text = whole.choices[0].text
    stop = text[6:9]
    assert len(stop) == 3
    cut = text[: text.index(stop)]
    for stream in (False, True):
        got = client.completions.create(model="tiny-chat", prompt=PROMPTS[1], max_tokens=30,
                                        temperature=0, stop=[stop, "never seen"], stream=stream)  # fmt: skip
        if stream:
            pieces = list(got)
            assert "".join(p.choices[0].text for p in pieces) == cut
            assert pieces[-1].choices[0].finish_reason == "stop"
        else:
            assert got.choices[0].text == cut and got.choices[0].finish_reason == "stop"
            assert got.usage.completion_tokens < whole.usage.completion_tokens


def test_four_concurrent_clients_each_get_their_reply_alone(client):
    alone = [
        client.completions.create(
            model="tiny-chat",
            prompt=p,
            max_tokens=24,
            temperature=0.8,
            seed=i,
            extra_body={"top_k": 5},
        )
        .choices[0]
        .text  # fmt: skip
        for i, p in enumerate(PROMPTS)
    ]
    got: dict[int, str] = {}

    def ask(i: int) -> None:
        r = client.completions.create(model="tiny-chat", prompt=PROMPTS[i], max_tokens=24,
                                      temperature=0.8, seed=i, extra_body={"top_k": 5})  # fmt: skip
        got[i] = r.choices[0].text

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [got[i] for i in range(4)] == alone


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"temperature": 5}, "temperature"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"logprobs": True}, "logprobs"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"n": 2}, "n"),
        ({"top_p": 0}, "top_p"),
        ({"frobnicate": 1}, "frobnicate"),
    ],
)
def test_bad_parameters_are_400_naming_the_field(server, body, param):
    request = {"model": "tiny-chat", "messages": CHAT, "max_tokens": 4, **body}
    r = httpx.post(server.url + "/v1/chat/completions", json=request, timeout=30)
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == param and param in error["message"]
    assert error["type"] == "invalid_request_error"


def test_unknown_model_is_404_and_ignored_fields_pass(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-9", messages=CHAT)
    assert caught.value.status_code == 404 and "tiny-chat" in caught.value.message
    ok = chat(client, max_tokens=2, user="someone", presence_penalty=0, logprobs=False)
    assert ok.usage.completion_tokens <= 2


def test_a_prompt_beyond_the_context_is_400_with_both_lengths(client):
    long_prompt = "The robot liked to read books about the sea. " * 200
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tiny-chat", prompt=long_prompt, max_tokens=4)
    message = caught.value.message
    assert str(MAX_SEQ) in message and "prompt has" in message
    n = int(message.split("prompt has ")[1].split()[0])
    assert n > MAX_SEQ
    with pytest.raises(
        openai.BadRequestError, match=f"exceed this server's context .* of {MAX_SEQ}"
    ):
        client.completions.create(model="tiny-chat", prompt=PROMPTS[0], max_tokens=MAX_SEQ)


def test_overload_is_429_and_a_long_wait_503_with_retry_after(server):
    body = {"model": "tiny-chat", "prompt": PROMPTS[2], "max_tokens": LONG, "temperature": 0,
            "stream": True, "ignore_eos": True}  # fmt: skip
    with httpx.Client(timeout=60) as http, contextlib.ExitStack() as streams:
        for _ in range(4):  # four long streams take every session
            streams.enter_context(http.stream("POST", server.url + "/v1/completions", json=body))
        deadline = time.monotonic() + 30
        while health(server)["engine"]["running"] < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        results: dict[int, httpx.Response] = {}

        def ask(i: int) -> None:
            results[i] = httpx.post(server.url + "/v1/completions", timeout=60,
                                    json={**body, "stream": False, "max_tokens": 2})  # fmt: skip

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    statuses = sorted(r.status_code for r in results.values())
    assert statuses == [429, 429, 503, 503], [r.text for r in results.values()]
    for r in results.values():
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["code"] in ("queue_full", "queue_timeout")
    wait_idle(server)


def test_a_client_that_goes_away_stops_its_generation(server):
    before = wait_idle(server)["engine"]
    body = {"model": "tiny-chat", "prompt": PROMPTS[3], "max_tokens": LONG, "temperature": 0,
            "stream": True, "ignore_eos": True}  # fmt: skip
    with httpx.Client(timeout=60) as http:
        with http.stream("POST", server.url + "/v1/completions", json=body) as r:
            lines = r.iter_lines()
            first = [next(lines) for _ in range(3)]
            assert first[0].startswith("data: ") and json.loads(first[0][6:])["choices"]
    after = wait_idle(server)["engine"]
    assert after["requests"].get("cancelled", 0) == before["requests"].get("cancelled", 0) + 1
    assert after["generated_tokens"] - before["generated_tokens"] < LONG  # it stopped early
    assert any("outcome=cancelled" in line for line in server.stderr())


def test_the_server_is_healthy_after_all(server, client):
    status = wait_idle(server)
    assert status["status"] == "ok" and status["backend"] == "reference"
    assert status["fallback"] is False and status["programs"]
    assert all(p["backend"] == "reference" for p in status["programs"])
    assert all(p["placement"]["engine"] == "CPU" for p in status["programs"])  # Kernel.placement
    assert status["engine"]["requests"].get("failed", 0) == 0
    assert chat(client, max_tokens=3).usage.completion_tokens <= 3
    log = server.stderr()
    assert any(" POST /v1/chat/completions 200 " in line and "prompt=" in line for line in log)


def test_sigterm_stops_the_server_cleanly(server):
    from tests.serve_process import stop

    stop(server.process)
    assert server.process.returncode == 0
    assert not any("Traceback" in line for line in server.stderr())
