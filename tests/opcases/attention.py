"""Cases for scaled_dot_product_attention, checked against torch float64."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.opcases import Case
from tests.opcases.linear import torch_module

CAUSAL = np.tril(np.ones((6, 6), dtype=bool))


def torch_sdpa(query, key, value, mask=None) -> np.ndarray:
    torch = torch_module()
    t = [torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (query, key, value)]
    if mask is not None:
        mask = torch.from_numpy(mask if mask.dtype == bool else mask.astype(np.float64))
    return torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=mask).numpy()


def sdpa_case(
    label: str,
    q_shape: tuple[int, ...],
    k_shape: tuple[int, ...],
    v_shape: tuple[int, ...],
    *,
    const_mask: np.ndarray | None = None,
    mask_input: tuple[tuple[int, ...], str] | None = None,
    make_inputs: Any = None,
) -> Case:
    out_shape = (*q_shape[:-1], v_shape[-1])

    def build(b):
        q, k, v = (
            b.input(n, s, "fp16") for n, s in zip("qkv", (q_shape, k_shape, v_shape), strict=True)
        )
        mask = None
        if const_mask is not None:
            mask = b.const(const_mask, name="mask")
        elif mask_input is not None:
            mask = b.input("mask", *mask_input)
        y = b.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=mask)
        b.output(y, "y")

    def expect(q, k, v, mask=const_mask):
        return {"y": torch_sdpa(q, k, v, mask)}

    return Case("scaled_dot_product_attention", label, build, {"y": out_shape}, expect, make_inputs)


def _bool_mask_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random masks in which every query row may attend to key 0 (no empty softmax)."""
    inputs = {n: rng.standard_normal(s).astype(np.float16) for n, s in BOOL_MASK_SHAPES.items()}
    mask = rng.random((2, 1, 3, 5)) < 0.5
    mask[..., 0] = True
    return {**inputs, "mask": mask}


BOOL_MASK_SHAPES = {"q": (2, 2, 3, 4), "k": (2, 2, 5, 4), "v": (2, 2, 5, 6)}

CASES = [
    sdpa_case("no-mask", (1, 2, 5, 8), (1, 2, 7, 8), (1, 2, 7, 4)),
    sdpa_case("causal-const-bool", (2, 3, 6, 4), (2, 3, 6, 4), (2, 3, 6, 4), const_mask=CAUSAL),
    sdpa_case("float-mask-rank3", (1, 4, 8), (1, 6, 8), (1, 6, 3), mask_input=((4, 6), "fp16")),
    # a [2, 1, 3, 5] mask broadcast over the head dim
    sdpa_case(
        "bool-mask-broadcast",
        *BOOL_MASK_SHAPES.values(),
        mask_input=((2, 1, 3, 5), "bool"),
        make_inputs=_bool_mask_inputs,
    ),
]
