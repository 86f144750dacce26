"""MIL kernel generators for transformer blocks, forward and backward, with dynamic-weight packing."""

from anekit.nn.kernels import (
    GENERATORS,
    HALVES,
    BlockHalf,
    KernelDef,
    attention_backward,
    attention_forward,
    block_kernels,
    ffn_backward,
    ffn_forward,
    kernel_weights,
)
from anekit.nn.packing import Layout, Packing
from anekit.nn.spec import BlockShape

__all__ = [
    "GENERATORS",
    "HALVES",
    "BlockHalf",
    "BlockShape",
    "KernelDef",
    "Layout",
    "Packing",
    "attention_backward",
    "attention_forward",
    "block_kernels",
    "ffn_backward",
    "ffn_forward",
    "kernel_weights",
]
