"""Chat templates (token for token against transformers, sandboxed and bounded), end-of-turn
ids, and stop strings across token boundaries."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from anekit.errors import ModelError
from anekit.llm.chat import ChatTemplate, ChatTemplateError, end_of_turn_ids, load_chat_template
from anekit.llm.stops import ReplyText, StopStrings

CONVERSATIONS = [
    [{"role": "user", "content": "Once upon a time "}],
    [
        {"role": "system", "content": " Be brief. "},
        {"role": "user", "content": "The robot"},
        {"role": "assistant", "content": "liked the sea"},
        {"role": "user", "content": "Every day it walked to the library"},
    ],
]


@pytest.fixture(scope="module", params=["chatml", "llama3"])
def chat_dir(request, tmp_path_factory) -> Path:
    pytest.importorskip("tokenizers")
    from tests.chat_models import CHATML, LLAMA3, save_chat_tokenizer

    directory = tmp_path_factory.mktemp(request.param)
    save_chat_tokenizer(directory, {"chatml": CHATML, "llama3": LLAMA3}[request.param])
    return directory


@pytest.mark.parametrize("conversation", CONVERSATIONS, ids=["no-system", "system"])
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_template_tokens_equal_transformers(chat_dir, conversation, generation_prompt):
    transformers = pytest.importorskip("transformers")
    from anekit.llm.tokenizer import HFTokenizer

    hf = transformers.AutoTokenizer.from_pretrained(chat_dir)
    expected = hf.apply_chat_template(
        conversation, add_generation_prompt=generation_prompt, tokenize=True, return_dict=False
    )
    text = load_chat_template(chat_dir).render(
        conversation, add_generation_prompt=generation_prompt
    )
    ours = HFTokenizer(chat_dir / "tokenizer.json").encode(text, add_special_tokens=False)
    assert ours == list(expected)
    assert len(ours) > 10 and text.count("<|") >= 2  # special tokens were rendered and matched


def test_template_sees_special_tokens_and_raises_our_error(chat_dir):
    template = load_chat_template(chat_dir)
    if "bos_token" in template.source:
        assert template.render(CONVERSATIONS[0]).startswith("<|begin_of_text|>")
        with pytest.raises(ChatTemplateError, match="bad role tool"):
            template.render([{"role": "tool", "content": "x"}])


@pytest.mark.parametrize(
    ("source", "what"),
    [
        (
            "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
            "longer",
        ),
        (
            "{% set s = 'x' %}{% for c in s * 90000 %}{% for d in s * 90000 %}{% endfor %}{% endfor %}",
            "longer",
        ),
        ("{{ 'x' * 100000000 }}", "limit"),
        (
            "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "limit",
        ),
        (
            "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
            "limit",
        ),
        ("{{ 'x' | center(1000000000) }}", "limit"),
        ("{% for i in range(99999) %}{{ 'x' * 1000 }}{% endfor %}", "passed"),
        ("{{ messages.__class__.__mro__ }}", "failed"),
        ("{{ ''.__class__ }}", ""),
    ],
)
def test_hostile_templates_are_refused_quickly(source, what):
    template = ChatTemplate(source, seconds=0.5, max_chars=1 << 20)
    begin = time.monotonic()
    try:
        out = template.render(CONVERSATIONS[0])
    except ChatTemplateError as e:
        assert what in str(e)
    else:  # the sandbox renders Python internals as nothing at all
        assert what == "" and "class" not in out
    assert time.monotonic() - begin < 3.0


def test_a_model_without_a_template_is_told_what_to_do(tmp_path):
    with pytest.raises(ChatTemplateError, match="--chat-template FILE"):
        load_chat_template(tmp_path)
    (tmp_path / "t.jinja").write_text("{{ messages[0]['content'] }}!")
    assert load_chat_template(tmp_path, tmp_path / "t.jinja").render(CONVERSATIONS[0]) == (
        "Once upon a time !"
    )
    (tmp_path / "tokenizer_config.json").write_text("[1, 2")
    with pytest.raises(ModelError, match="not readable JSON: its brackets do not balance"):
        load_chat_template(tmp_path)


def test_end_of_turn_ids_come_from_every_config(tmp_path):
    class Vocab:
        def token_to_id(self, token):
            return {"<|im_end|>": 7}.get(token)

    assert end_of_turn_ids(tmp_path, Vocab(), (2,)) == (2,)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 9]}))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": {"content": "<|im_end|>"}})
    )
    assert end_of_turn_ids(tmp_path, Vocab(), (2,)) == (2, 9, 7)


def feed(watch: StopStrings, pieces: list[str]) -> str:
    return "".join(watch.push(p) for p in pieces) + watch.flush()


@pytest.mark.parametrize(
    ("pieces", "stops", "expected", "stopped"),
    [
        (["Once up", "on a ", "time"], ["on a"], "Once up", "on a"),
        (["ab", "c", "d"], ["cd", "bc"], "a", "bc"),  # the earliest in the text wins
        (["a<", "|e", "nd", "|>b"], ["<|end|>"], "a", "<|end|>"),
        (["a<", "|x"], ["<|end|>"], "a<|x", None),  # held back, then released at the end
        (["héllo", " wörld"], ["wö"], "héllo ", "wö"),
    ],
)
def test_stop_strings_match_across_pieces(pieces, stops, expected, stopped):
    watch = StopStrings(stops)
    assert feed(watch, pieces) == expected and watch.stopped == stopped


def test_stop_strings_never_release_part_of_a_stop():
    watch = StopStrings(["STOP"])
    released = [watch.push(c) for c in "abcST"]
    assert "".join(released) == "abc"  # "ST" is held: it may begin "STOP"
    assert watch.push("OPx") == "" and watch.stopped == "STOP"


class ByteTokenizer:
    """Token i is byte i: a character of several UTF-8 bytes spans several tokens."""

    def decode(self, ids):
        return bytes(ids).decode("utf-8", errors="replace")


def test_reply_text_never_splits_a_character_and_cuts_at_a_stop():
    text = "naïve → café END more"
    reply = ReplyText(ByteTokenizer(), list(b"> "), ["END"])
    out = []
    for b in text.encode():
        out.append(reply.push(b))
        assert "\ufffd" not in out[-1]
        if reply.stop:
            break
    out.append(reply.finish())
    assert "".join(out) == "naïve → café " and reply.stop == "END"
    assert bytes(reply.tokens).decode() == "naïve → café END"  # up to the token completing it
    assert reply.finish_reason(max_tokens=100) == "stop"


def test_the_plain_template_is_built_in(tmp_path):
    template = load_chat_template(tmp_path, "plain")
    assert (
        template.render(CONVERSATIONS[1][:2]) == "system:  Be brief. \nuser: The robot\nassistant:"
    )
