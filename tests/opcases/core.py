"""Cases for const and identity."""

from __future__ import annotations

import numpy as np

from tests.opcases import Case


def _identity(b):
    b.output(b.identity(x=b.input("x", (2, 3, 4), "fp16")), "y")


def _identity_int(b):
    b.output(b.identity(x=b.input("x", (5,), "int32")), "y")


def _const_output(b):
    x = b.input("x", (2,), "fp16")
    b.output(b.identity(x=x), "y")
    b.output(b.const(np.array([[1.5, -2.0]], dtype=np.float16), name="k"), "k")


def _weight_output(b):
    x = b.input("x", (3,), "fp32")
    b.output(b.identity(x=x), "y")
    b.output(b.weight("w", np.arange(6, dtype=np.float32).reshape(2, 3)), "w")


CASES = [
    Case("identity", "fp16", _identity, {"y": (2, 3, 4)}, lambda x: {"y": x}),
    Case("identity", "int32", _identity_int, {"y": (5,)}, lambda x: {"y": x}),
    Case(
        "const",
        "inline",
        _const_output,
        {"y": (2,), "k": (1, 2)},
        lambda x: {"y": x, "k": np.array([[1.5, -2.0]])},
    ),
    Case(
        "const",
        "blobfile",
        _weight_output,
        {"y": (3,), "w": (2, 3)},
        lambda x: {"y": x, "w": np.arange(6.0).reshape(2, 3)},
    ),
]
