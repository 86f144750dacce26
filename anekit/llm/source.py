"""Where a model's weights come from, and which Hugging Face tensors make each program input.

A block program's weight input stacks several checkpoint tensors (q, k and v projections
into ``wqkv``, gate and up into ``w13``): :func:`layer_parts` says which, in order, and
:func:`fill` writes them one after another into the memory that holds the input (a
buffer set's view on the resident path, a host array for the compiled-in segments).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from anekit.errors import ModelError
from anekit.llm import kernels as K
from anekit.llm.config import LlmConfig

Parts = list[tuple[str, tuple[int, ...]]]  # (Hugging Face name, its shape), stacked in order


class TensorSource(Protocol):
    """Where a model's tensors come from, by Hugging Face name, as fp16."""

    path: str | Path  # the file or directory, for messages

    def __contains__(self, name: str) -> bool: ...

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The tensor's stored shape, read from its header (None: not in the source)."""
        ...

    def read_into(self, name: str, shape: tuple[int, ...], out: np.ndarray) -> None:
        """Write the tensor (checked to have ``shape``) into the flat ``out`` as fp16 values."""
        ...


def layer_parts(config: LlmConfig, i: int) -> dict[str, Parts]:
    """Each block weight input of layer ``i``: the Hugging Face tensors stacked in it."""
    c = config
    p = f"model.layers.{i}."
    d, q, kv, f, hd = c.dim, c.q_dim, c.kv_dim, c.hidden_dim, c.head_dim
    att = p + "self_attn."
    parts: dict[str, Parts] = {
        "attn_norm": [(p + "input_layernorm.weight", (d,))],
        "wqkv": [(att + "q_proj.weight", (q, d)), (att + "k_proj.weight", (kv, d)),
                 (att + "v_proj.weight", (kv, d))],
        "bqkv": [(att + "q_proj.bias", (q,)), (att + "k_proj.bias", (kv,)), (att + "v_proj.bias", (kv,))],
        "q_norm": [(att + "q_norm.weight", (hd,))],
        "k_norm": [(att + "k_norm.weight", (hd,))],
        "wo": [(att + "o_proj.weight", (d, q))],
        "bo": [(att + "o_proj.bias", (d,))],
        "ffn_norm": [(p + "post_attention_layernorm.weight", (d,))],
        "w13": [(p + "mlp.gate_proj.weight", (f, d)), (p + "mlp.up_proj.weight", (f, d))],
        "w2": [(p + "mlp.down_proj.weight", (d, f))],
    }  # fmt: skip
    if c.gemma:  # norms before and after each half
        parts["post_attn"] = parts["ffn_norm"]
        parts["ffn_norm"] = [(p + "pre_feedforward_layernorm.weight", (d,))]
        parts["post_ffn"] = [(p + "post_feedforward_layernorm.weight", (d,))]
    if c.experts:  # every expert's gate and up, then every expert's down, stacked in order
        parts.update(_expert_parts(c, p + "mlp."))
    if c.fused:  # stored already stacked, in the order the programs take
        parts["wqkv"] = [(att + "qkv_proj.weight", (q + 2 * kv, d))]
        parts["w13"] = [(p + "mlp.gate_up_proj.weight", (2 * f, d))]
    return {name: parts[name] for name in K.block_weight_shapes(c)}


def _expert_parts(c: LlmConfig, mlp: str) -> dict[str, Parts]:
    """A mixture of experts' block weights: router, experts, shared expert and its gate."""
    d, fe, fs = c.dim, c.expert_dim, c.shared_expert_dim
    expert = [f"{mlp}experts.{e}." for e in range(c.experts)]
    shared = mlp + "shared_expert."
    return {
        "router": [(mlp + "gate.weight", (c.experts, d))],
        "w13": [(x + n, (fe, d)) for x in expert for n in ("gate_proj.weight", "up_proj.weight")],
        "w2": [(x + "down_proj.weight", (d, fe)) for x in expert],
        "shared_w13": [
            (shared + "gate_proj.weight", (fs, d)),
            (shared + "up_proj.weight", (fs, d)),
        ],
        "shared_w2": [(shared + "down_proj.weight", (d, fs))],
        "shared_gate": [(mlp + "shared_expert_gate.weight", (1, d))],
    }


def expected_shapes(config: LlmConfig) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Every tensor the model reads, with the shape its config implies, layer by layer."""
    c = config
    yield "model.embed_tokens.weight", (c.vocab_size, c.dim)
    for i in range(c.n_layers):
        for parts in layer_parts(c, i).values():
            yield from parts
    yield "model.norm.weight", (c.dim,)
    if not c.tie_embeddings:
        yield "lm_head.weight", (c.vocab_size, c.dim)


def check_shapes(config: LlmConfig, source: TensorSource) -> None:
    """ModelError at the first tensor missing or shaped otherwise than the config says.

    Called before any buffer is made: a config claiming a billion layers or dimensions above
    the tensors' fails on its first disagreement, having allocated nothing.
    """
    for name, shape in expected_shapes(config):
        found = source.shape(name)
        if found is None:
            where = str(source.path)
            raise ModelError("missing from the checkpoint (the config needs it)", path=where,
                             tensor=name)  # fmt: skip
        if tuple(found) != tuple(shape):
            raise ModelError(f"expected shape {list(shape)} from the config, found {list(found)}",
                             path=str(source.path), tensor=name)  # fmt: skip


def head_name(config: LlmConfig) -> str:
    """The tensor the output head multiplies by (a tied model's is its embedding)."""
    return "model.embed_tokens.weight" if config.tie_embeddings else "lm_head.weight"


def fill(source: TensorSource, out: np.ndarray, parts: Parts) -> None:
    """Write the named tensors' elements one after another into ``out``.

    A strided ``out`` (an IOSurface's padded rows) is filled through one staging array.
    """
    target = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
    flat = target.reshape(-1)
    at = 0
    for name, part_shape in parts:
        size = int(np.prod(part_shape))
        source.read_into(name, part_shape, flat[at : at + size])
        at += size
    if target is not out:
        np.copyto(out, target)


def stacked(source: TensorSource, shape: tuple[int, ...], parts: Parts, dtype: type) -> np.ndarray:
    """A new host array of ``shape`` and ``dtype`` holding ``parts`` (see :func:`fill`)."""
    out = np.empty(shape, dtype)
    fill(source, out, parts)
    return out
