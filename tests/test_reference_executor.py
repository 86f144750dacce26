"""The planned reference executor gives the same bits as its readable definition.

The oracle is the in-package interpreter (``anekit.backends.reference.interpreter``, as a
backend in ``tests/reference_oracle.py``): each op's registry reference, one at a time,
every fp16 result rounded. Every op case
of ``tests/opcases`` runs through both, on normal, tiny (fp16 subnormal) and huge (fp16
overflow) inputs, in both storage modes; so do the transformer forward and three training
steps (parameters and AdamW moments compared bit for bit). A NaN equals any NaN (payloads
are not modelled).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import anekit
from anekit import backends, mil
from anekit.backends.reference import ReferenceKernel, forms
from anekit.bench.programs import TransformerShape, transformer
from anekit.mil.ops import registry
from tests import reference_oracle
from tests.opcases import Case, all_cases
from tests.test_ops_generic import build, random_inputs

CASES = all_cases()
# the oracle is IEEE fp16 storage: every kernel here, trainers included, runs "ideal"
pytestmark = pytest.mark.usefixtures("ieee_numerics")


SCALES = (1.0, 2.0**-18, 2.0**12)  # normal values, fp16 subnormals, fp16 overflow


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bits; any NaN equals any NaN."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    bits = np.dtype(f"u{a.dtype.itemsize}")
    equal = a.view(bits) == b.view(bits)
    return bool(np.all(equal | (np.isnan(a) & np.isnan(b))))


def scaled(inputs: dict[str, np.ndarray], scale: float) -> dict[str, np.ndarray]:
    return {
        k: (v.astype(np.float64) * scale).astype(v.dtype) if v.dtype.kind == "f" else v
        for k, v in inputs.items()
    }


def run_both(program: mil.Program, inputs: dict, storage: str = "fp16") -> tuple[dict, dict]:
    old = reference_oracle.compile(program, storage=storage)
    new = anekit.compile(program, backend="reference", storage=storage, numerics="ideal")
    with old, new:
        return old(**inputs), new(**inputs)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_op_case_matches_the_previous_executor(case: Case) -> None:
    program = build(case)
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    base = case.make_inputs(rng) if case.make_inputs else random_inputs(program, rng)
    for storage in ("fp16", "fp32"):
        for scale in SCALES if storage == "fp16" else (1.0,):
            inputs = scaled(base, scale) if case.make_inputs is None else base
            with np.errstate(all="ignore"):
                want, got = run_both(program, inputs, storage)
            for name in want:
                assert same(got[name], want[name]), f"{case.id} {name} storage={storage} x{scale}"


def test_every_form_names_a_registered_op_with_a_case() -> None:
    """A form cannot drift from its op unnoticed: each one is exercised by the cases above."""
    covered = {c.op for c in CASES}
    assert set(forms.FORMS) <= set(registry.names())
    assert set(forms.FORMS) <= covered
    assert covered == set(registry.names())  # every op has a case


def test_every_ufunc_op_runs_its_derived_form() -> None:
    """Each op declaring a registry ``Ufunc`` is planned from it, not its reference, in a case;
    and no form in the table restates an op the registry gives a ufunc."""
    declared = {d.name for d in registry.all_ops() if d.ufunc is not None}
    assert not declared & set(forms.FORMS)
    planned = set()
    for case in CASES:
        if case.op in declared:
            with ReferenceKernel(build(case)) as kernel:
                planned |= {s.op.op_type for s in kernel.plan.steps if s.form is not None}
    assert sorted(declared - planned) == []


def test_the_transformer_forward_matches_the_previous_executor() -> None:
    shape = TransformerShape(
        n_layers=2, dim=64, n_heads=2, n_kv_heads=2, head_dim=32, hidden_dim=96, seq=32
    )
    program = transformer(shape)
    x = np.random.default_rng(1).standard_normal((1, 1, shape.dim, shape.tokens)).astype(np.float16)
    want, got = run_both(program, {"x": x})
    assert same(got["y"], want["y"])
    kernel = ReferenceKernel(program)
    planned = [s.op.op_type for s in kernel.plan.steps if s.form is None]
    assert planned == []  # every op of the transformer has a planned form


def _layout_program() -> mil.Program:
    """Forms fed by a transposed view (not C-ordered) and by a gapped slice (C-ordered)."""
    b = mil.Builder()
    x = b.input("x", (2, 6, 5), "fp16")
    t = b.transpose(x=x, perm=[2, 0, 1])  # a view with permuted strides
    s = b.slice_by_size(x=x, begin=[0, 1, 1], size=[2, 4, 3])  # a view with gaps
    b.output(b.exp(x=t), "exp_t")
    b.output(b.reduce_sum(x=t, axes=[2], keep_dims=True), "r")
    b.output(b.softmax(x=t, axis=0), "p")
    b.output(b.add(x=t, y=b.const(np.ones((5, 2, 1), np.float16))), "a")
    b.output(b.reduce_sum_square(x=s, axes=[1]), "q")
    b.output(b.concat(values=(t, t), axis=1), "joined")
    return b.build()


def test_views_keep_the_reference_layout() -> None:
    program = _layout_program()
    x = np.random.default_rng(2).standard_normal((2, 6, 5)).astype(np.float16)
    want, got = run_both(program, {"x": x})
    for name in want:
        assert same(got[name], want[name]), name
    with ReferenceKernel(program) as k:
        values = k.trace({"x": x})
    # the transposed inputs took the reference path: its results keep the reference's layout
    assert not values["exp_t"].flags.c_contiguous
    assert values["q"].flags.c_contiguous


def test_three_training_steps_match_the_previous_executor(monkeypatch) -> None:
    from anekit.train.config import get_config
    from anekit.train.data import default_corpus
    from anekit.train.loop import Trainer

    monkeypatch.setitem(backends.BACKENDS, "oracle", "tests.reference_oracle")
    named = get_config("tiny")
    trainers = [
        Trainer(named.model, named.train, default_corpus(), backend=name)
        for name in ("oracle", "reference")
    ]
    try:
        for _ in range(3):
            old, new = (t.train_step() for t in trainers)
            assert (old.loss, old.grad_norm) == (new.loss, new.grad_norm)
        old, new = trainers
        assert same(new.params.flat, old.params.flat)
        assert same(new.opt.m.flat, old.opt.m.flat)
        assert same(new.opt.v.flat, old.opt.v.flat)
    finally:
        for t in trainers:
            t.close()


def test_runtime_weights_and_biases_match_the_previous_executor() -> None:
    """iOS17 lets conv's bias and weight be runtime values: no planned form may drop them."""
    b = mil.Builder()
    x = b.input("x", (1, 3, 2, 4), "fp16")
    w = b.input("w", (2, 3, 1, 1), "fp16")
    bias = b.input("bias", (2,), "fp16")
    const_w = b.const(np.full((2, 3, 1, 1), 0.5, np.float16))
    b.output(b.conv(x=x, weight=w, bias=bias), "runtime_w")
    b.output(b.conv(x=x, weight=const_w, bias=bias), "runtime_bias")
    rng = np.random.default_rng(4)
    inputs = {
        "x": rng.standard_normal((1, 3, 2, 4)).astype(np.float16),
        "w": rng.standard_normal((2, 3, 1, 1)).astype(np.float16),
        "bias": np.float16([10.0, -20.0]),
    }
    want, got = run_both(b.build(), inputs)
    for name in want:
        assert same(got[name], want[name]), name


@pytest.mark.parametrize("with_bias", [False, True])
def test_a_one_hot_conv_gathers_the_same_bits_as_the_product(monkeypatch, with_bias) -> None:
    """The conv form gathers weight columns for one-hot input columns (a lookup made a
    matmul), bit for bit the BLAS product: -0 weights give +0, an all-zero column +0 (then
    the bias); any other input takes the product."""
    ch, c_out, tokens = forms.ONE_HOT_FROM + 24, 48, 9
    rng = np.random.default_rng(3)
    w = rng.standard_normal((c_out, ch, 1, 1)).astype(np.float16)
    w[rng.random(w.shape) < 0.05] = -0.0
    w[:, 5] = -0.0  # a column of -0: every output from it is +0
    b = mil.Builder()
    x = b.input("x", (1, tokens, 1, ch), "fp16")
    xt = b.transpose(x=x, perm=[0, 3, 2, 1])  # a strided view, as the lookup's one-hot is
    bias = rng.standard_normal(c_out).astype(np.float16)
    y = b.conv(x=xt, weight=b.const(w), bias=b.const(bias) if with_bias else None)
    b.output(y, "y")
    program = b.build()
    onehot = np.zeros((1, tokens, 1, ch), np.float16)
    ids = [0, 5, 17, ch - 1, 5, 300, 42, 7, 1000]
    onehot[0, np.arange(tokens), 0, ids] = 1
    empty = onehot.copy()
    empty[0, 3] = 0  # a token outside the vocabulary chunk
    dense = onehot.copy()
    dense[0, 2, 0, 9] = 1  # two ones: no lookup
    halves = onehot * np.float16(0.5)  # not ones
    gathered = []
    product = forms._one_hot_product

    def spy(*args):
        gathered.append(product(*args))
        return gathered[-1]

    monkeypatch.setattr(forms, "_one_hot_product", spy)
    for inputs in (onehot, empty, dense, halves):
        want, got = run_both(program, {"x": inputs})
        assert same(got["y"], want["y"])
    assert gathered == [True, True, False, False]
