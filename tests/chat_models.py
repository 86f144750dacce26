"""Tiny chat models for the chat, serve and generate tests: a random-init Qwen3 with a tokenizer
that has chat special tokens, a chat template in tokenizer_config.json, generation_config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.llm_models import CORPUS, Case, save_model

SPECIAL = ["<eos>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
           "<|end_header_id|>", "<|eot_id|>"]  # fmt: skip
VOCAB = 112

CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Llama-3 style: BOS by name, header tokens, a default system prompt, trim, namespace, loop.last
LLAMA3 = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system = messages[0]['content'] | trim %}
    {%- set rest = messages[1:] %}
{%- else %}
    {%- set system = 'You are a helpful robot.' %}
    {%- set rest = messages %}
{%- endif %}
{%- set ns = namespace(turns=0) %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system + '<|eot_id|>' }}
{%- for m in rest %}
    {%- if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('bad role ' + m['role']) }}{% endif %}
    {%- set ns.turns = ns.turns + 1 %}
    {{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"""


def save_chat_tokenizer(directory: Path, template: str, eos: str = "<|im_end|>") -> Any:
    """A byte-level BPE tokenizer with chat special tokens, and its tokenizer_config.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False)
    tok.train_from_iterator([CORPUS], trainer=trainer)
    tok.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": {"__type": "AddedToken", "content": eos, "special": True},
        "chat_template": template,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return tok


def save_chat_model(directory: Path, template: str = CHATML, max_position: int = 1024) -> Any:
    """A tiny Qwen3 chat model; generation_config.json names <|eot_id|> as an end of turn too."""
    # initializer 0.25: logits far enough apart that greedy tokens are not near-ties at once
    reference = save_model(directory, Case("qwen3", "bfloat16", True, 2, "new"), vocab=VOCAB,
                           max_position_embeddings=max_position, initializer_range=0.25)  # fmt: skip
    tok = save_chat_tokenizer(directory, template)
    eos = [tok.token_to_id("<eos>"), tok.token_to_id("<|eot_id|>")]
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    raw = json.loads((directory / "config.json").read_text())
    raw["eos_token_id"] = tok.token_to_id("<eos>")
    (directory / "config.json").write_text(json.dumps(raw))
    return reference
