"""stable_forms: softplus, logsumexp and mish overflow on the golden model's M4 profile (N9, N10,
the softplus inside mish) and match NumPy float64 once rewritten; under "ideal" nothing changes."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.passes import convert, stable_forms

ATOL, RTOL = 2e-3, 2e-3  # fp16 storage of each step


def _softplus64(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x.astype(np.float64))


def _mish64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x * np.tanh(_softplus64(x))


def _logsumexp64(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=axis)
    return m + np.log(np.exp(x - np.expand_dims(m, axis)).sum(axis=axis))


def _unary(op: str, n: int) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, n), mil.DType.fp16)
    b.output(getattr(b, op)(x=x), "y")
    return b.build()


def _mish(n: int) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, n), mil.DType.fp16)
    b.output(b.mul(x=x, y=b.tanh(x=b.softplus(x=x))), "y")
    return b.build()


def _logsumexp(c: int, keep_dims: bool) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (2, c, 1, 3), mil.DType.fp16)
    b.output(b.reduce_log_sum_exp(x=x, axes=[1], keep_dims=keep_dims), "y")
    return b.build()


def _run(prog: mil.Program, x: np.ndarray, numerics: str) -> tuple[np.ndarray, object]:
    k = anekit.compile(prog, backend="reference", numerics=numerics)
    y = np.asarray(k(x=x)["y"], np.float64)
    return y, k.events


def _op_types(prog: mil.Program) -> list[str]:
    return [op.op_type for fn in prog.functions.values() for op in fn.ops]


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


SWEEP = np.linspace(-20, 20, 401).astype(np.float16)[None, :]


def test_softplus_cliff_on_m4_is_gone_once_rewritten() -> None:
    prog = _unary("softplus", SWEEP.shape[1])
    plain, events = _run(prog, SWEEP, "m4")
    want = _softplus64(SWEEP)
    assert plain[0, -1] == 0.0 and want[0, -1] == pytest.approx(20.0)  # N9: softplus(20) -> 0
    assert events.saturated > 0 and events.first.op_type == "softplus"
    fixed = stable_forms(prog)
    got, events = _run(fixed, SWEEP, "m4")
    _close(got, want)
    assert not events.saturated and not events.replaced
    _close(_run(fixed, SWEEP, "ideal")[0], _run(prog, SWEEP, "ideal")[0])


def test_logsumexp_without_max_shift_overflows_on_m4_and_the_shifted_form_matches() -> None:
    rng = np.random.default_rng(0)
    x = (rng.uniform(-4, 12, (2, 32, 1, 3))).astype(np.float16)
    x[0, :, 0, 0] = 7.7  # 32 * exp(7.7) = 70,000 > 65504 (N10's cliff at 7.63 with C = 32)
    for keep in (True, False):
        prog = _logsumexp(32, keep)
        want = _logsumexp64(x, 1)
        want = np.expand_dims(want, 1) if keep else want
        plain, events = _run(prog, x, "m4")
        assert not np.isfinite(plain).all() and events.saturated > 0
        fixed = stable_forms(prog)
        got, events = _run(fixed, x, "m4")
        assert got.shape == want.shape
        _close(got, want)
        assert not events.saturated and not events.replaced
        _close(_run(fixed, x, "ideal")[0], _run(prog, x, "ideal")[0])


def test_mish_cliff_on_m4_is_gone_in_the_rational_form() -> None:
    prog = _mish(SWEEP.shape[1])
    plain, events = _run(prog, SWEEP, "m4")
    want = _mish64(SWEEP)
    assert plain[0, -1] == 0.0 and want[0, -1] == pytest.approx(20.0)  # softplus's N9 cliff
    assert events.saturated > 0
    fixed = stable_forms(prog)
    assert "softplus" not in _op_types(fixed) and "tanh" not in _op_types(fixed)
    got, events = _run(fixed, SWEEP, "m4")
    _close(got, want)
    assert not events.saturated and not events.replaced
    _close(_run(fixed, SWEEP, "ideal")[0], _run(prog, SWEEP, "ideal")[0])


def test_softplus_read_by_anything_but_a_mish_keeps_its_own_rewrite() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 8), mil.DType.fp16)
    sp = b.softplus(x=x)
    b.output(b.mul(x=sp, y=b.tanh(x=sp)), "y")  # sp * tanh(sp): not x * tanh(softplus(x))
    fixed = stable_forms(b.build())
    assert _op_types(fixed).count("tanh") == 1 and "minimum" in _op_types(fixed)


def test_programs_without_these_ops_are_returned_as_they_are() -> None:
    prog = _unary("exp", 8)
    assert stable_forms(prog) is prog


def test_convert_runs_the_rewrite() -> None:
    prog = _unary("softplus", SWEEP.shape[1])
    converted = convert(prog, ["stable_forms"], chip="m4")
    assert "stable_forms" in converted.passes_run
    _close(_run(converted, SWEEP, "m4")[0], _softplus64(SWEEP))


def test_from_torch_mish_and_softplus_match_torch_on_m4() -> None:
    torch = pytest.importorskip("torch")

    class Act(torch.nn.Module):
        def forward(self, x: object) -> object:
            return torch.nn.functional.mish(x) + torch.nn.functional.softplus(x)

    x = torch.linspace(-20, 20, 401).reshape(1, 401)
    prog = anekit.from_torch(Act(), (x,))
    k = anekit.compile(prog, backend="reference", numerics="m4")
    (got,) = k(**{prog.functions["main"].inputs[0].name: x.numpy()}).values()
    want = torch.nn.functional.mish(x.double()) + torch.nn.functional.softplus(x.double())
    np.testing.assert_allclose(np.asarray(got, np.float64), want.numpy(), atol=1e-2, rtol=4e-3)
    assert not k.events.saturated
    assert "tanh" not in _op_types(prog)
