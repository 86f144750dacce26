"""The serve app in-process (Starlette's TestClient): API keys, bounded bodies, malformed JSON,
unknown routes, draining, and the request checks of ``protocol`` one by one."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("transformers")

from starlette.testclient import TestClient  # noqa: E402

from anekit import llm  # noqa: E402
from anekit.llm.chat import load_chat_template  # noqa: E402
from anekit.llm.serve.app import ServeSettings, create_app  # noqa: E402
from anekit.llm.serve.engine import Engine  # noqa: E402
from anekit.llm.serve.protocol import ApiError, chat_request, completion_request  # noqa: E402

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from tests.chat_models import save_chat_model

    directory = tmp_path_factory.mktemp("app")
    save_chat_model(directory, max_position=128)
    return directory


@pytest.fixture(scope="module")
def app(model_dir):
    with llm.load(model_dir, backend="reference", max_seq=64) as m:
        engine = Engine(m, m.tokenizer, m.config.eos_token_ids, max_sessions=1, max_queue=1)
        settings = ServeSettings(model_name="m", max_seq=64, template=load_chat_template(model_dir),
                                 api_key="sesame", max_body=2048, log=None)  # fmt: skip
        with TestClient(create_app(engine, settings)) as client:
            yield client, engine


def test_an_api_key_is_required_when_set(app):
    client, _ = app
    r = client.post("/v1/chat/completions", json=BODY)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = client.post("/v1/chat/completions", json=BODY, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401
    r = client.post("/v1/chat/completions", json=BODY, headers={"Authorization": "Bearer sesame"})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 2
    assert client.get("/health").status_code == 200  # no key needed to see that it runs


def test_bodies_are_bounded_and_must_be_json(app):
    client, _ = app
    auth = {"Authorization": "Bearer sesame"}
    big = {**BODY, "messages": [{"role": "user", "content": "x" * 4096}]}
    r = client.post("/v1/chat/completions", json=big, headers=auth)
    assert r.status_code == 413 and "2048" in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", content=b"{not json", headers=auth)
    assert r.status_code == 400 and "not readable JSON" in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", content=b"[" * 1000 + b"]" * 1000, headers=auth)
    assert r.status_code == 400 and "nested deeper" in r.json()["error"]["message"]
    assert client.get("/v2/anything").status_code == 404
    assert client.get("/v1/chat/completions").status_code == 405


def test_a_draining_server_refuses_new_requests_with_retry_after(app):
    client, engine = app
    engine.drain()
    try:
        r = client.post(
            "/v1/chat/completions", json=BODY, headers={"Authorization": "Bearer sesame"}
        )
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
    finally:
        engine._draining = False


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"model": 3}, "model"),
        ({"messages": "hi"}, "messages"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content[0]",
        ),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"max_completion_tokens": 0, "max_tokens": None}, "max_completion_tokens"),
        ({"stop": ""}, "stop"),
        ({"stop": ["a"] * 17}, "stop"),
        ({"seed": -1}, "seed"),
        ({"stream_options": {"x": 1}}, "stream_options"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"logit_bias": {"5": 10}}, "logit_bias"),
    ],
)
def test_each_bad_field_is_named(change, param):
    with pytest.raises(ApiError) as caught:
        chat_request({**BODY, **change})
    assert caught.value.status == 400 and caught.value.param == param


def test_requests_keep_their_values():
    r = chat_request({**BODY, "max_completion_tokens": 7, "max_tokens": None, "stop": "END",
                      "top_k": 3, "seed": 9, "stream": True,
                      "stream_options": {"include_usage": True}, "user": "u"})  # fmt: skip
    assert (r.max_tokens, r.stop, r.top_k, r.seed, r.stream, r.include_usage) == (
        7,
        ("END",),
        3,
        9,
        True,
        True,
    )
    assert chat_request({**BODY, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}).messages[0]["content"] == "ab"  # fmt: skip
    c = completion_request({"model": "m", "prompt": [1, 2, 3]})
    assert c.prompt == [1, 2, 3] and c.max_tokens == 16
    with pytest.raises(ApiError, match="prompt"):
        completion_request({"model": "m", "prompt": []})


def test_chat_keeps_history_and_its_replies_equal_generate(model_dir, monkeypatch, capsys):
    import io

    from anekit.cli import main

    common = ["--model", str(model_dir), "--backend", "reference", "--temperature", "0",
              "--max-tokens", "6", "--max-seq", "128"]  # fmt: skip
    typed = "/system Be brief.\nOnce upon a time\n/reset\n\nThe robot\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(typed))
    assert main(["chat", *common]) == 0
    out, err = capsys.readouterr()
    replies = out.splitlines()
    assert len(replies) == 2
    summaries = [line for line in err.splitlines() if line.startswith("prompt: ")]
    assert len(summaries) == 2 and all("peak memory" in line for line in summaries)
    assert main(["generate", *common, "--system", "Be brief.", "--prompt", "Once upon a time"]) == 0
    assert capsys.readouterr().out.splitlines() == [replies[0]]
    # /reset cleared the history and kept the system prompt
    assert main(["generate", *common, "--system", "Be brief.", "--prompt", "The robot"]) == 0
    assert capsys.readouterr().out.splitlines() == [replies[1]]


def test_health_reports_each_programs_backend_numerics_and_placement():
    from types import SimpleNamespace

    from anekit.llm.serve.server import health_facts

    class Placement:
        def as_dict(self):
            return {"device": "ane", "why": "compiled"}

    kernels = [SimpleNamespace(backend="ane", numerics="m4", placement=Placement()),
               SimpleNamespace(backend="reference")]  # fmt: skip
    model = SimpleNamespace(
        runner=SimpleNamespace(kernels=lambda: kernels), backend="ane", chip="m4",
        compress=None, max_seq=64, config=SimpleNamespace(architecture="LlamaForCausalLM"),
    )  # fmt: skip
    facts = health_facts(model, "dir")
    assert facts["programs"][0] == {"program": 0, "backend": "ane", "numerics": "m4",
                                    "placement": {"device": "ane", "why": "compiled"}}  # fmt: skip
    assert facts["programs"][1] == {"program": 1, "backend": "reference"}
    assert facts["fallback"] is True  # a program runs elsewhere than the model's backend
