"""The programs the ladder runs, with inputs and outputs computed here in NumPy.

The expected outputs never come from a backend: each case states its function in
NumPy, so the same cases check the ANE and the reference backend independently.
Inputs are small multiples of 1/4, so every result is exact in fp16 and any
difference is a wiring fault (layout, binding), not rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.mil import Builder, Program

# Shapes whose rows are not multiples of 64 bytes, as issue 12 lists them (ANE_NOTES 2.5).
UNALIGNED = (
    ((1, 4, 1, 3), "fp16"),
    ((1, 32, 1, 1), "fp16"),
    ((1, 16, 1, 41), "fp16"),
    ((1, 64, 1, 80), "fp16"),
    ((1, 8, 1, 1), "fp32"),
)
EXACT = 1e-3  # results are exact in fp16; this only absorbs a printing round trip
MATMUL_ATOL = 5e-2  # fp16 matmul: the ANE's accumulator width is undocumented (ANE_NOTES 1)


@dataclass(frozen=True)
class Case:
    """A program, its inputs, and the outputs NumPy says it must give."""

    name: str
    program: Program
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    atol: float = EXACT


def quarters(shape: tuple[int, ...], dtype: Any, start: int = 0) -> np.ndarray:
    """Distinct small multiples of 1/4 (exact in fp16) filling ``shape``."""
    n = int(np.prod(shape))
    return (((np.arange(n) + start) % 61 - 30) / 4).reshape(shape).astype(dtype)


def affine(shape: tuple[int, ...], dtype: str) -> Case:
    """``y = 2x + 1``, in fp16; an fp32 tensor is cast to fp16 and back at the edges."""
    b = Builder()
    x = b.input("x", shape, dtype)
    h = b.cast(x=x, dtype="fp16") if dtype == "fp32" else x
    y = b.add(x=b.mul(x=h, y=2.0), y=1.0)
    b.output(b.cast(x=y, dtype="fp32") if dtype == "fp32" else y, "y")
    x_val = quarters(shape, np.float32 if dtype == "fp32" else np.float16)
    want = (x_val.astype(np.float16) * np.float16(2) + np.float16(1)).astype(x_val.dtype)
    name = f"{dtype}{list(shape)}".replace(" ", "")
    return Case(name, b.build(), {"x": x_val}, {"y": want})


def unaligned_cases() -> list[Case]:
    """``y = 2x + 1`` on each of :data:`UNALIGNED`."""
    return [affine(shape, dtype) for shape, dtype in UNALIGNED]


def matmul_case() -> Case:
    """Two runtime operands (a packed input on the device): ``z = x @ y``."""
    b = Builder()
    x, y = b.input("x", (1, 64, 96), "fp16"), b.input("y", (1, 96, 32), "fp16")
    b.output(b.matmul(x=x, y=y), "z")
    xv, yv = quarters((1, 64, 96), np.float16) / 8, quarters((1, 96, 32), np.float16, 7) / 8
    want = np.matmul(xv.astype(np.float32), yv.astype(np.float32)).astype(np.float16)
    return Case(
        "matmul[1,64,96]x[1,96,32]", b.build(), {"x": xv, "y": yv}, {"z": want}, MATMUL_ATOL
    )


def aligned_cases() -> list[Case]:
    """Shapes whose rows are whole multiples of 64 bytes."""
    return [affine((1, 64, 1, 64), "fp16"), affine((1, 16, 1, 32), "fp16"), matmul_case()]


# Names chosen so that signature, alphabetical and size orders all differ.
BINDING_INPUTS = (("mid", (1, 4, 1, 3)), ("big", (1, 4, 2, 41)), ("small", (1, 1, 1, 1)))
BINDING_OUTPUTS: tuple[tuple[str, str, Callable[[np.ndarray], np.ndarray]], ...] = (
    ("b_big", "big", lambda v: v * np.float16(3)),
    ("c_small", "small", lambda v: v + np.float16(5)),
    ("a_mid", "mid", lambda v: v - np.float16(7)),
)


def binding_case() -> Case:
    """Three inputs and three outputs; each output a distinct function of one input.

    Inputs in signature order mid, big, small; alphabetically big, mid, small; by size
    small, mid, big. Outputs: b_big (largest), c_small, a_mid. A wrong binding shows
    as an output computed from the wrong input.
    """
    b = Builder()
    values = {name: b.input(name, shape, "fp16") for name, shape in BINDING_INPUTS}
    ops = {
        "b_big": b.mul(x=values["big"], y=3.0),
        "c_small": b.add(x=values["small"], y=5.0),
        "a_mid": b.sub(x=values["mid"], y=7.0),
    }
    for name, _, _ in BINDING_OUTPUTS:
        b.output(ops[name], name)
    inputs = {
        name: quarters(shape, np.float16, 11 * i) for i, (name, shape) in enumerate(BINDING_INPUTS)
    }
    expected = {out: fn(inputs[src]) for out, src, fn in BINDING_OUTPUTS}
    return Case("binding 3x3", b.build(), inputs, expected)


def compare(case: Case, got: dict[str, np.ndarray]) -> dict[str, Any]:
    """Whether ``got`` matches the case, with the largest difference per output."""
    diffs = {}
    for name, want in case.expected.items():
        value = np.asarray(got[name], np.float64)
        diffs[name] = float(np.max(np.abs(value - want.astype(np.float64)))) if want.size else 0.0
    return {"match": all(d <= case.atol for d in diffs.values()), "max_abs_diff": diffs}


def many_inputs(n: int = 14, shape: tuple[int, ...] = (1, 16, 1, 32)) -> Case:
    """``y = x0 + x1 + ... + x{n-1}``: one request with ``n`` inputs (an LLM block reads 13-14)."""
    b = Builder()
    xs = [b.input(f"x{i}", shape, "fp16") for i in range(n)]
    y = xs[0]
    for x in xs[1:]:
        y = b.add(x=y, y=x)
    b.output(y, "y")
    inputs = {f"x{i}": quarters(shape, np.float16, 7 * i) for i in range(n)}
    want = sum(v.astype(np.float64) for v in inputs.values())  # quarters: every partial sum exact
    return Case(f"{n}_inputs", b.build(), inputs, {"y": want.astype(np.float16)})
