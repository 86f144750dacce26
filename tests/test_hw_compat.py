"""The compatibility checker: each rule fires on a minimal violating program, stays silent
on clean ones, and the op-support verdicts agree with the ANEForge sweep data."""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources

import numpy as np
import pytest

from anekit import mil
from anekit.hw import rules
from anekit.hw.chips import chips
from anekit.hw.compat import Diagnostic, check
from anekit.hw.rules import ops as op_rules
from anekit.mil.ops import registry
from anekit.mil.program import BlobRef, Function, Operation, Program, Value
from anekit.mil.types import DType, TensorType
from tests import test_check_quirks as quirks


def zeros(shape: tuple[int, ...], dtype=np.float16) -> np.ndarray:
    """A zero-stride array: weight shapes of any size without the memory."""
    return np.broadcast_to(np.zeros((), dtype=dtype), shape)


def unary(op: str, shape=(1, 64, 1, 32), opset: str = "ios18") -> Program:
    b = mil.Builder(opset=opset)
    b.output(b.add_op(op, {"x": b.input("x", shape, "fp16")}), "y")
    return b.build()


def conv(cin: int, cout: int, spatial: int = 64, opset: str = "ios18") -> Program:
    b = mil.Builder(opset=opset)
    x = b.input("x", (1, cin, 1, spatial), "fp16")
    b.output(b.conv(x=x, weight=b.weight("w", zeros((cout, cin, 1, 1)))), "y")
    return b.build()


def matmul(k: int, opset: str = "ios18") -> Program:
    b = mil.Builder(opset=opset)
    x = b.input("x", (1, 64, k), "fp16")
    b.output(b.matmul(x=x, y=b.weight("w", zeros((k, 64)))), "y")
    return b.build()


def weights_of(nbytes: float) -> Program:
    n = int((nbytes / 2) ** 0.5)
    b = mil.Builder()
    x = b.input("x", (1, 64, n), "fp16")
    b.output(b.matmul(x=x, y=b.weight("w", zeros((n, n)))), "y")
    return b.build()


def two_inputs(first: int, second: int) -> Program:
    b = mil.Builder()
    x = b.input("x", (1, 64, 1, first), "fp16")
    y = b.input("y", (1, 64, 1, second), "fp16")
    big, small = (y, x) if second > first else (x, y)
    b.output(b.relu(x=big), "big")  # outputs ordered by descending size
    b.output(b.relu(x=small), "small")
    return b.build()


def sdpa(mask: bool) -> Program:
    b = mil.Builder()
    q = b.input("q", (1, 4, 64, 64), "fp16")
    params = {"query": q, "key": q, "value": q}
    if mask:
        params["attn_mask"] = b.weight("m", zeros((1, 1, 64, 64)))
    b.output(b.add_op("scaled_dot_product_attention", params), "y")
    return b.build()


def mid_graph(op: str) -> Program:
    b = mil.Builder()
    x = b.input("x", (1, 64, 1, 32), "fp16")
    h = b.relu(x=x)
    h = (
        b.cast(x=b.cast(x=h, dtype="fp32"), dtype="fp16")
        if op == "cast"
        else b.add_op(op, {"x": h})
    )
    b.output(b.relu(x=h), "y")
    return b.build()


def fp32_edges() -> Program:
    b = mil.Builder(opset="ios16")
    x = b.input("x", (1, 64, 1, 32), "fp32")
    b.output(b.cast(x=b.relu(x=b.cast(x=x, dtype="fp16")), dtype="fp32"), "y")
    return b.build()


def shared_weight_file() -> Program:
    b = mil.Builder(opset="ios16")
    x = b.input("x", (1, 64, 1, 32), "fp16")
    w0, w1 = b.weight("w0", zeros((64, 64, 1, 1))), b.weight("w1", zeros((64, 64, 1, 1)))
    b.output(b.conv(x=b.conv(x=x, weight=w0), weight=w1), "y")
    program = b.build()
    first = w0.producer.inputs["val"].blob
    # a second tensor in w0's file, as hand-written models do
    w1.producer.inputs["val"].blob = BlobRef(first.path, 8320)
    return program


def dynamic() -> Program:
    relu = registry.get("relu")
    x = Value("x", TensorType(DType.fp16, (1, 64, 1, "seq")))
    y = Value("y", TensorType(DType.fp16, (1, 64, 1, "seq")))
    op = Operation(relu, {"x": x}, (y,))
    y.producer = op
    return Program({"main": Function("main", (x,), (op,), (y,))})


def compressed(kind: str) -> Program:
    """A 1x1 conv whose weight is an int8 constexpr (``affine``) or a 2-bit LUT (``lut2``)."""
    b = mil.Builder(opset="ios16")
    x = b.input("x", (1, 64, 1, 32), "fp16")
    if kind == "affine":
        w = b.constexpr_affine_dequantize(
            quantized_data=np.ones((64, 64, 1, 1), np.int8),
            zero_point=np.int8(0),
            scale=np.full(64, 0.5, np.float16),
            axis=0,
        )
    else:
        w = b.constexpr_lut_to_dense(
            indices=np.zeros(64 * 64 // 4, np.uint8),
            lut=np.arange(4, dtype=np.float16),
            shape=np.array([64, 64, 1, 1], np.uint32),
        )
    b.output(b.conv(x=x, weight=w), "y")
    return b.build()


# rule id -> (chip, a minimal program breaking it); the rule must fire there.
VIOLATIONS: dict[str, tuple[str, Callable[[], Program]]] = {
    "dynamic-shape": ("m4", dynamic),
    "op-unsupported": ("m4", lambda: unary("acos")),
    "op-conflicting-evidence": ("m4", lambda: mid_graph("identity")),
    "op-unverified": ("m4", lambda: mid_graph("gelu")),
    "zero-size": ("m4", lambda: unary("relu", (1, 0, 1, 8))),
    "rank-limit": ("m4", lambda: unary("relu", (1, 2, 1, 2, 1, 2))),
    "tensor-bytes": ("m4", lambda: unary("relu", (1, 32768, 1, 65536))),  # 4 GiB each
    "program-memory": ("m4", lambda: unary("relu", (1, 16384, 1, 65536))),  # 2 + 2 GiB
    "dim-limit": ("m1", lambda: unary("relu", (1, 64, 1, 20000), "ios16")),
    "conv-input-channels": ("m4", lambda: conv(20000, 16)),
    "sdpa-mask": ("m4", lambda: sdpa(mask=True)),
    "weights-ceiling": ("m4", lambda: weights_of(2.2e9)),
    "weights-near-ceiling": ("m4", lambda: weights_of(1.8e9)),
    "multi-input-order": ("m4", lambda: two_inputs(256, 32)),
    "multi-input": ("m4", lambda: two_inputs(32, 256)),
    "last-axis-padding": ("m4", lambda: unary("relu", (1, 64, 1, 1))),
    "preferred-spelling": ("m4", lambda: unary("rsqrt")),
    "m1-matmul-k": ("m1", lambda: matmul(48, "ios16")),
    "legacy-dialect": ("m2", lambda: conv(64, 64)),
    "legacy-fp32-cast": ("m1", fp32_edges),
    "legacy-multi-blob": ("m1", shared_weight_file),
    "m3-conv-channels": ("m3-pro", lambda: conv(64, 64)),
    "compression-folds": ("m1", lambda: compressed("affine")),  # M1 folds int8 (ANEForge)
    "compression-unverified": ("m4", lambda: compressed("lut2")),  # no source on 2-bit LUTs
    "index-precision": ("m4", lambda: argmax(4096)),
    # numerics catalogue rows N6, N15, N17: more cases in tests/test_check_quirks.py
    "fused-scale-dropped": ("m4", lambda: quirks.rounded_then("mul")),
    "zero-scale-after-reduce": ("m4", lambda: quirks.reduced_times(np.float16(0.0))),
    "sdpa-window": ("m4", lambda: quirks.attention(512, 512)),
    "blockwise-int": ("m4", lambda: quirks.blockwise((16, 2))),
}


def argmax(length: int) -> Program:
    b = mil.Builder()
    x = b.input("x", (1, length), "fp16")
    b.output(b.add_op("reduce_argmax", {"x": x, "axis": np.array(-1, np.int32)}), "i")
    return b.build()


def clean_program(chip: str) -> Program:
    """A program that breaks no rule on ``chip``: 512-channel 1x1 conv and a K=64 matmul."""
    opset = "ios16" if chip.startswith(("m1", "m2")) else "ios18"
    b = mil.Builder(opset=opset)
    x = b.input("x", (1, 512, 1, 64), "fp16")
    h = b.conv(x=x, weight=b.weight("w", zeros((512, 512, 1, 1))))
    b.output(b.matmul(x=h, y=b.weight("m", zeros((64, 64)))), "y")
    return b.build()


def rule_ids(diagnostics: list[Diagnostic]) -> set[str]:
    return {d.rule for d in diagnostics}


# the range rules need input ranges: their cases are in tests/test_check_ranges.py
RANGE_RULES = {"fp16-saturation", "fp16-overflow", "slice-clamp", "subnormal-flush"}


def test_every_rule_has_a_violation_case():
    assert set(VIOLATIONS) | {"op-incorrect"} | RANGE_RULES == {r.id for r in rules.RULES}


@pytest.mark.parametrize("rule_id", sorted(VIOLATIONS))
def test_rule_fires_on_its_violation(rule_id):
    chip, build = VIOLATIONS[rule_id]
    found = [d for d in check(build(), chip) if d.rule == rule_id]
    severity = next(r.severity for r in rules.RULES if r.id == rule_id)
    assert found, f"{rule_id} did not fire on {chip}"
    assert all(d.severity == severity and d.source for d in found)


def test_op_incorrect_fires_when_the_sweep_says_so(monkeypatch):
    data = {k: dict(v) for k, v in op_rules.sweep().items()}
    data["abs"].update(correct=False, relerr=0.4)
    monkeypatch.setattr(op_rules, "sweep", lambda: data)
    found = [d for d in check(unary("abs"), "m4") if d.rule == "op-incorrect"]
    assert [d.severity for d in found] == ["warning"] and "0.4" in found[0].message


@pytest.mark.parametrize("chip", chips())
def test_clean_program_is_silent(chip):
    assert check(clean_program(chip), chip) == []


def test_dimension_limits_depend_on_the_generation():
    wide = unary("relu", (1, 64, 1, 20000), "ios16")
    assert "dim-limit" in rule_ids(check(wide, "m1"))
    assert "dim-limit" not in rule_ids(check(wide, "m4"))  # 65536 from A16 (M4) on
    assert "dim-limit" in rule_ids(check(unary("relu", (1, 2, 1, 70000)), "m4"))


def m1_k_findings(build: Callable[[mil.Builder], object]) -> list[str]:
    b = mil.Builder(opset="ios16")
    b.output(build(b), "out")
    return [d.message for d in check(b.build(), "m1") if d.rule == "m1-matmul-k"]


def test_m1_k_rule_reads_the_contraction_of_every_matmul_like_op():
    # einsum names its operands "values": before OpDef.contraction it escaped the rule
    def einsum(k: int) -> Callable[[mil.Builder], object]:
        return lambda b: b.einsum(
            values=(b.input("x", (1, 8, 4, k), "fp16"), b.input("w", (1, k, 4, 16), "fp16")),
            equation="nchw,nwhu->nchu",
        )

    assert m1_k_findings(einsum(48)) == [
        "matmul inner dimension 48 is not a multiple of 32 on m1; zero-pad it to 64"
    ]
    assert m1_k_findings(einsum(64)) == []
    # matmul with transpose_x sums over x's second-to-last axis (48), not its last (64)
    transposed = lambda b: b.matmul(  # noqa: E731
        x=b.input("x", (1, 48, 64), "fp16"), y=b.input("y", (1, 48, 8), "fp16"), transpose_x=True
    )
    assert len(m1_k_findings(transposed)) == 1 and "dimension 48 " in m1_k_findings(transposed)[0]
    linear = lambda b: b.linear(x=b.input("x", (4, 40), "fp16"), weight=zeros((8, 40)))  # noqa: E731
    assert "dimension 40 " in m1_k_findings(linear)[0]
    assert (
        m1_k_findings(lambda b: b.linear(x=b.input("x", (4, 64), "fp16"), weight=zeros((8, 64))))
        == []
    )


def test_sdpa_without_mask_and_edge_casts_are_fine():
    assert "sdpa-mask" not in rule_ids(check(sdpa(mask=False), "m4"))
    found = rule_ids(check(fp32_edges(), "m4"))
    assert not found & {"op-unsupported", "op-conflicting-evidence"}


def test_mid_graph_cast_names_both_sides_of_the_evidence():
    found = [d for d in check(mid_graph("cast"), "m4") if d.rule == "op-conflicting-evidence"]
    assert len(found) == 2 and all("sweep" in d.message and "ANE_NOTES" in d.message for d in found)


def sweep_entries() -> list[dict]:
    text = resources.files("anekit.hw").joinpath("data/mil_op_sweep.json").read_text("utf-8")
    return json.loads(text)


def test_verdicts_agree_with_the_sweep_for_every_op_in_it():
    for entry in sweep_entries():
        if not (entry["compile"] and entry["run"]):
            expected = "fails"
        elif entry["correct"] is True:
            expected = "correct"
        elif entry["correct"] is False:
            expected = "incorrect"
        else:
            expected = "unverified"
        assert op_rules.sweep_verdict(entry["op"]) == expected, entry["op"]


SIMPLE_UNARY = sorted(
    e["op"]
    for e in sweep_entries()
    if e["op"] in registry.names()
    and {"elementwise", "unary"} <= registry.get(e["op"]).traits
    and [p.name for p in registry.get(e["op"]).params if not p.optional] == ["x"]
    and DType.fp16 in (registry.get(e["op"]).by_name["x"].dtypes or {DType.fp16})
)


@pytest.mark.parametrize("op", SIMPLE_UNARY)
def test_check_reports_each_unary_op_as_the_sweep_found_it(op):
    entry = next(e for e in sweep_entries() if e["op"] == op)
    severities = {
        d.severity for d in check(mid_graph(op), "m4") if d.rule.startswith("op-") and d.op == op
    }
    if not entry["compile"]:
        expected = {"warning"} if op in op_rules.NOTES_WORKING_M4 else {"error"}
    elif entry["correct"] is True or op in op_rules.NOTES_WORKING_M4:
        expected = set()
    else:
        expected = {"info"}
    assert severities == expected


def test_parsed_programs_report_mil_lines():
    text = unary("acos").to_text()
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "acos(" in s)
    found = [d for d in check(mil.parse(text), "m4") if d.rule == "op-unsupported"]
    assert [d.line for d in found] == [line]
    assert (
        found[0].format("model.mil")
        == f"model.mil:{line}: error: {found[0].message} [op-unsupported]"
    )
