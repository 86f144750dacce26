"""pad_contractions beyond runtime matmuls: linear with a constant weight, linear with a weight
a constexpr op makes (a compressed program), einsum and matmul with a constant operand are
zero-padded to M1's multiple of 32; ``check --chip m1`` is clean and the outputs equal."""

from __future__ import annotations

import numpy as np

import anekit
from anekit import mil
from anekit import passes as P

RNG = np.random.default_rng(5)


def contractions() -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (2, 3, 48), "fp16")
    w = RNG.standard_normal((16, 48)).astype(np.float16)
    dense = b.linear(x=x, weight=w, bias=RNG.standard_normal(16).astype(np.float16), name="dense")
    q = RNG.integers(0, 255, (16, 48), dtype=np.uint8)
    packed = b.constexpr_affine_dequantize(
        quantized_data=q, zero_point=np.uint8(128), scale=np.float16(0.01), axis=0, name="w_q"
    )
    squeezed = b.linear(x=x, weight=packed, name="packed")
    table = RNG.standard_normal((16, 20)).astype(np.float16)
    mm = b.matmul(x=dense, y=table, name="mm")  # K 16, const y
    e = b.input("e", (4, 3, 40), "fp16")
    f = b.input("f", (40, 3, 8), "fp16")
    b.output(dense, "dense_out")
    b.output(squeezed, "packed_out")
    b.output(mm, "mm_out")
    b.output(b.einsum(values=[e, f], equation="chw,whr->chr", name="ein"), "ein_out")
    return b.build()


def run(prog: mil.Program, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with anekit.compile(prog, backend="reference", numerics="ideal") as k:
        return {n: np.asarray(v, np.float32) for n, v in k(**feeds).items()}


def test_every_contraction_is_padded_for_m1_and_keeps_its_result() -> None:
    prog = contractions()
    before = [d.name for d in anekit.check(prog, chip="m1") if d.rule == "m1-matmul-k"]
    assert sorted(before) == ["dense_out", "ein_out", "mm_out", "packed_out"]
    padded = P.pad_contractions(prog, P.chip_profile("m1"))
    assert [d for d in anekit.check(padded, chip="m1") if d.rule == "m1-matmul-k"] == []
    assert all(
        op.opdef.inner_dim(op.args()) % 32 == 0
        for op in padded.main.ops
        if op.op_type in ("matmul", "linear", "einsum")
    )
    feeds = {v.name: RNG.standard_normal(v.shape).astype(np.float16) for v in prog.main.inputs}
    want, got = run(prog, feeds), run(padded, feeds)
    assert want.keys() == got.keys()
    for name in want:  # the added terms are exact zeros
        np.testing.assert_allclose(got[name], want[name], rtol=2e-3, atol=2e-3, err_msg=name)
    # the compressed weight stays a constexpr op, padded at run time
    assert "constexpr_affine_dequantize" in {op.op_type for op in padded.main.ops}


def test_for_chip_m1_makes_the_program_checker_clean(tmp_path) -> None:
    prog = P.for_chip(contractions(), "m1")
    prog.save(tmp_path / "m", dialect=P.save_dialect(prog))
    loaded = mil.load(tmp_path / "m")
    assert [d for d in anekit.check(loaded, chip="m1") if d.severity == "error"] == []
    assert P.pad_contractions(prog, P.chip_profile("m4")) is prog  # other chips: untouched
