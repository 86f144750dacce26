"""anekit's own training checkpoints, served to :class:`~anekit.llm.model.Model` under Hugging Face names.

The training decoder (:mod:`anekit.train`) is the same Llama block (RMSNorm, rotate-half
RoPE, grouped-query attention, SwiGLU, tied embedding); its matrices keep the model
dimension first (``wq [D, H*hd]``), so the q, k, v and gate/up projections are
transposed into Hugging Face's ``[out, in]`` here. ``anekit generate --ckpt`` uses
this to decode with the KV-cached kernels instead of recomputing the window.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import ModelError
from anekit.llm.config import LlmConfig, RopeConfig
from anekit.llm.weights import convert_into


class ArraySource:
    """fp32 arrays by Hugging Face name, converted to fp16 (overflow checked) as they are staged."""

    def __init__(self, arrays: dict[str, np.ndarray], path: str) -> None:
        self.arrays = arrays
        self.path = path

    def __contains__(self, name: str) -> bool:
        return name in self.arrays

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The array's shape (None: not in the checkpoint, or already staged)."""
        array = self.arrays.get(name)
        return None if array is None else array.shape

    def read_into(self, name: str, shape: tuple[int, ...], out: np.ndarray) -> None:
        """Write a tensor into the flat ``out`` as fp16 values, then drop the fp32 copy."""
        if name not in self.arrays:
            raise ModelError("missing from the checkpoint", path=self.path, tensor=name)
        a = self.arrays.pop(name)
        if a.shape != tuple(shape):
            raise ModelError(
                f"expected shape {list(shape)}, found {list(a.shape)}", path=self.path, tensor=name
            )
        convert_into(np.ascontiguousarray(a).reshape(-1), out, path=self.path, tensor=name)


def read_training_checkpoint(
    path: str | Path, tokenizer: Any = None
) -> tuple[LlmConfig, ArraySource, Any]:
    """``(config, tensor source, tokenizer)`` of an ``anekit train`` checkpoint (or its output directory).

    The tokenizer is the one stored in the checkpoint unless ``tokenizer`` replaces it.
    """
    from anekit.train.data import BOS
    from anekit.train.loop import load_model

    cfg, params, state, tokenizer = load_model(path, tokenizer)
    where = state["directory"]
    config = LlmConfig(
        architecture="anekit-train",
        family="llama",
        **cfg.sizes(),
        max_position=cfg.seq_len,
        rope=RopeConfig(theta=cfg.rope_theta),
        # trained on windows of seq_len tokens: attend to no more (and generate past it)
        sliding_window=cfg.seq_len,
        bos_token_id=BOS if cfg.vocab_size > 256 else ord("\n"),  # as train.sample starts
        tie_embeddings=True,
        style="anekit-train",
    )
    arrays = {
        "model.embed_tokens.weight": params["embed"],
        "model.norm.weight": params["final_norm"],
    }
    for i in range(cfg.n_layers):
        layer = params.layer(i)
        p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
        arrays.update(
            {
                p + "input_layernorm.weight": layer["attn_norm"],
                a + "q_proj.weight": layer["wq"].T,
                a + "k_proj.weight": layer["wk"].T,
                a + "v_proj.weight": layer["wv"].T,
                a + "o_proj.weight": layer["wo"],
                p + "post_attention_layernorm.weight": layer["ffn_norm"],
                p + "mlp.gate_proj.weight": layer["w1"].T,
                p + "mlp.up_proj.weight": layer["w3"].T,
                p + "mlp.down_proj.weight": layer["w2"],
            }
        )
    return config, ArraySource(arrays, where), tokenizer
