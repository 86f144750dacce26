"""Regression fixtures for catalogue row N2 (docs/numerics.md): two transpose-fed matmuls the
engine returns inf for although their sums are bounded (ANEForge issue #115 item 3, open).

ANEForge's fuzzer findings 818c07b3 ([31,15]@[15,16]) and f301582d (slice -> reshape ->
transpose -> [6,31]@[31,16]) are not published as data, so these fixtures rebuild the two
published shapes with seeded fuzzer-style values (standard normals, a few of the fuzzer's
danger values, weights N(0, 1/K) in fp16; the fuzzer's float mode) whose largest sum of
|x * w| is scaled to about the issue's 17,321, below N1's 32752. Each fixture is a JSON file
(``tests/data/numerics/``): the graph, the fp16 bits of its input and weight, and the fp16
bits the golden model must produce under the family profile where N2 was seen (m5, A16).
The golden model does not model N2 (its cause is unknown): it computes finite values,
and the fixture pins them so that any change to them is seen. On a Mac the same fixture
replays through the engine (``tests/test_numerics_n2.py``, marked ``ane``).

Regenerate (only when the fixture's own definition changes): ``python -m tests.numerics_fixtures``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from anekit import mil
from anekit.mil.program import Program

DATA = Path(__file__).parent / "data" / "numerics"
PROFILE = "m5"  # N2 was seen on M5 (A16)
DANGER = (2047.0, -2047.0, 4094.0, -4094.0)  # ANEForge fuzz.py FLOAT_DANGER (the large ones)
SOURCE = "ANEForge issue #115 item 3 (M5 / macOS 26.5; open)"
TARGET = 17321.0  # the max_j sum_k |x_jk * w_kj|
FIXTURES = {
    "n2_818c07b3": {
        "finding": "818c07b3",
        "published": "[31,15]@[15,16] fed by a transpose returns inf; max sum |x*w| = 17321",
        "input": [15, 31],
        "graph": [{"op": "transpose", "perm": [1, 0]}, {"op": "matmul", "k": 15, "n": 16}],
        "seed": 115_1,
    },
    "n2_f301582d": {
        "finding": "f301582d",
        "published": "slice -> reshape -> transpose -> [6,31]@[31,16] returns inf",
        "input": [1, 200],
        "graph": [
            {"op": "slice_by_size", "begin": [0, 7], "size": [1, 186]},
            {"op": "reshape", "shape": [31, 6]},
            {"op": "transpose", "perm": [1, 0]},
            {"op": "matmul", "k": 31, "n": 16},
        ],
        "seed": 115_2,
    },
}


def _bits(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a, np.float16)
    return {"shape": list(a.shape), "fp16": a.view(np.uint16).tobytes().hex()}


def _array(record: dict[str, Any]) -> np.ndarray:
    raw = np.frombuffer(bytes.fromhex(record["fp16"]), np.uint16).view(np.float16)
    return raw.reshape(record["shape"]).copy()


def build(record: dict[str, Any]) -> Program:
    """The fixture's program: its graph over one fp16 input, the weight a constant."""
    b = mil.Builder()
    h = b.input("x", tuple(record["input"]), "fp16")
    for node in record["graph"]:
        op = node["op"]
        if op == "transpose":
            h = b.transpose(x=h, perm=node["perm"])
        elif op == "slice_by_size":
            h = b.slice_by_size(x=h, begin=node["begin"], size=node["size"])
        elif op == "reshape":
            h = b.reshape(x=h, shape=node["shape"])
        elif op == "matmul":
            h = b.matmul(x=h, y=b.weight("w", _array(record["weight"])), name="mm")
        else:
            raise ValueError(f"fixture op {op!r}")
    b.output(h, "y")
    return b.build()


def load(name: str) -> tuple[Program, dict[str, np.ndarray], np.ndarray, dict[str, Any]]:
    """(program, inputs, the golden model's expected output, the whole record)."""
    record = json.loads((DATA / f"{name}.json").read_text("utf-8"))
    return build(record), {"x": _array(record["x"])}, _array(record["expected"]), record


def largest_abs_sum(program: Program, x: np.ndarray) -> float:
    """max over outputs of sum_k |a_k * w_k| at the matmul: what no summation order exceeds."""
    import anekit

    with anekit.compile(program, backend="reference", numerics="ideal") as k:
        held = {}
        for op, outs in k.taps({"x": x}):
            if op.op_type == "matmul":
                a = np.abs(held[op.inputs["x"].name].astype(np.float64))
                w = np.abs(np.asarray(op.inputs["y"].const, np.float64))
                return float((a @ w).max())
            held.update({n: np.array(v) for n, v in outs.items()})
            held["x"] = x
    raise ValueError("no matmul")


def _make(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    import anekit

    rng = np.random.default_rng(spec["seed"])
    x = rng.standard_normal(spec["input"]) * 4.0
    flat = x.reshape(-1)
    picked = rng.choice(flat.size, 3, replace=False)
    flat[picked] = rng.choice(DANGER, 3)
    matmul = spec["graph"][-1]
    w = rng.standard_normal((matmul["k"], matmul["n"])) / np.sqrt(matmul["k"]) * 2.0
    record = {
        "about": f"N2 regression fixture after ANEForge fuzzer finding {spec['finding']}",
        "catalogue": "N2",
        "source": SOURCE,
        "published": spec["published"],
        "profile": PROFILE,
        "input": spec["input"],
        "graph": spec["graph"],
        "x": _bits(x),
        "weight": _bits(w),
    }
    # scale the weight so the largest sum of |x * w| is near the 17,321 (still < 32752)
    w = w * (TARGET / largest_abs_sum(build(record), _array(record["x"])))
    record["weight"] = _bits(w)
    program = build(record)
    with anekit.compile(program, backend="reference", numerics=PROFILE) as k:
        expected = k(x=_array(record["x"]))["y"]
    record["bound"] = largest_abs_sum(program, _array(record["x"]))
    record["expected"] = _bits(expected)
    return record


if __name__ == "__main__":
    DATA.mkdir(parents=True, exist_ok=True)
    for fixture, definition in FIXTURES.items():
        made = _make(fixture, definition)
        (DATA / f"{fixture}.json").write_text(json.dumps(made, indent=1) + "\n", "utf-8")
        print(fixture, "bound", round(made["bound"], 1))
