"""Each block kernel against PyTorch autograd of the same math in float64 (reference backend).

The references below are written from the model's definition (Llama: RMSNorm,
rotate-half RoPE, causal softmax attention with KV head ``h // group``, SwiGLU), not
from the kernels, and use the natural token-major layout and ``masked_fill(-inf)``.

Tolerance: every kernel value is fp16 (unit roundoff 2^-11 ~ 4.9e-4) and passes
through 10-25 rounded ops; errors add roughly like a random walk, so a relative
error (Frobenius norm of the difference over the norm of the reference) of 1e-3 to
2.5e-3 is what these shapes show. We allow 5e-3; a wrong head pairing, a missing
mask or an unrotated gradient gives errors of order 1.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import anekit  # noqa: E402
from anekit.nn import BlockShape, block_kernels  # noqa: E402
from anekit.nn.kernels import ATTENTION, GENERATORS, HALVES, kernel_weights  # noqa: E402
from anekit.nn.layers import query_rows_by_token, rope_swap  # noqa: E402

RTOL = 5e-3

SHAPES = {
    "mha": BlockShape(
        n_layers=1,
        vocab_size=2,
        dim=64,
        n_heads=4,
        n_kv_heads=4,
        head_dim=16,
        hidden_dim=96,
        seq=16,
        batch=2,
    ),
    "gqa": BlockShape(
        n_layers=1,
        vocab_size=2,
        dim=64,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        hidden_dim=96,
        seq=16,
        batch=2,
    ),
    "mqa-wide": BlockShape(
        n_layers=1,
        vocab_size=2,
        dim=64,
        n_heads=4,
        n_kv_heads=1,
        head_dim=32,
        hidden_dim=64,
        seq=32,
        batch=1,
        rope_theta=500.0,
    ),
}


def rel_err(got: np.ndarray, want: torch.Tensor) -> float:
    want = want.detach().numpy()
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


def fp16(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def t64(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(a.astype(np.float64))


def run(kernel, **fields: np.ndarray) -> dict[str, np.ndarray]:
    buf = kernel.input.pack(**fields)
    with anekit.compile(kernel.program, backend="reference") as k:
        return kernel.output.split(k(x=buf)["y"])


# -- references (token-major: x is [N, D]) ---------------------------------------------------------
def ref_rmsnorm(
    x: torch.Tensor, gain: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * rstd * gain, rstd


def ref_rope(x: torch.Tensor, s: BlockShape) -> torch.Tensor:
    """x: [B, heads, S, hd]."""
    half = s.head_dim // 2
    inv = s.rope_theta ** (-torch.arange(half, dtype=torch.float64) * 2 / s.head_dim)
    ang = torch.arange(s.seq, dtype=torch.float64)[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def ref_attention(xn: torch.Tensor, wq, wk, wv, wo, s: BlockShape) -> dict[str, torch.Tensor]:
    """Attention from the normalised input xn [N, D]; returns o, a and the projections."""

    def heads(t: torch.Tensor, n: int) -> torch.Tensor:
        return t.reshape(s.batch, s.seq, n, s.head_dim).transpose(1, 2)

    q_lin, k_lin, v = xn @ wq, xn @ wk, xn @ wv
    for t in (q_lin, k_lin, v):
        if t.requires_grad:
            t.retain_grad()
    q, k = ref_rope(heads(q_lin, s.n_heads), s), ref_rope(heads(k_lin, s.n_kv_heads), s)
    vh = heads(v, s.n_kv_heads)
    kv_of = torch.arange(s.n_heads) // s.group  # query head h uses KV head h // group
    scores = q @ k[:, kv_of].transpose(-1, -2) / s.head_dim**0.5
    future = torch.triu(torch.ones(s.seq, s.seq, dtype=torch.bool), 1)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
    a = (probs @ vh[:, kv_of]).transpose(1, 2).reshape(s.tokens, s.q_dim)
    return {
        "o": a @ wo.T,
        "a": a,
        "q": q,
        "k": k,
        "v": vh,
        "q_lin": q_lin,
        "k_lin": k_lin,
        "v_lin": v,
    }


def attention_inputs(s: BlockShape, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = 1 / np.sqrt(s.dim)
    return {
        "x": fp16(rng, s.dim, s.tokens),
        "gain": (1 + fp16(rng, s.dim, 1, scale=0.1)).astype(np.float16),
        "wq": fp16(rng, s.dim, s.q_dim, scale=2 * w),
        "wk": fp16(rng, s.dim, s.kv_dim, scale=2 * w),
        "wv": fp16(rng, s.dim, s.kv_dim, scale=w),
        "wo": fp16(rng, s.dim, s.q_dim, scale=1 / np.sqrt(s.q_dim)),
    }


def with_swapped(s: BlockShape, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**w, "wq_s": w["wq"][:, rope_swap(s.n_heads, s.head_dim)],
            "wk_s": w["wk"][:, rope_swap(s.n_kv_heads, s.head_dim)]}  # fmt: skip


@pytest.mark.parametrize("name", list(SHAPES))
def test_attention_forward_matches_torch(name: str) -> None:
    s = SHAPES[name]
    inputs = attention_inputs(s)
    out = run(
        block_kernels(s, ("attention_forward",))["attention_forward"], **with_swapped(s, inputs)
    )

    t = {k: t64(v) for k, v in inputs.items()}
    xn, rstd = ref_rmsnorm(t["x"].T, t["gain"][:, 0], s.norm_eps)
    ref = ref_attention(xn, t["wq"], t["wk"], t["wv"], t["wo"], s)
    assert rel_err(out["o"], ref["o"].T) < RTOL
    assert rel_err(out["xn"], xn.T) < RTOL
    assert rel_err(out["rstd"], rstd.T) < RTOL
    assert rel_err(query_rows_by_token(out["a_rows"], s), ref["a"]) < RTOL
    # the taps, in their documented layouts: queries [B, KV, group*S, hd] scaled, keys/values [B, KV, hd, S]
    q_rows = ref["q"].reshape(s.batch, s.n_kv_heads, s.group * s.seq, s.head_dim) / s.head_dim**0.5
    assert rel_err(out["q_rows"].reshape(q_rows.shape), q_rows) < RTOL
    assert (
        rel_err(
            out["k_cols"].reshape(s.batch, s.n_kv_heads, s.head_dim, s.seq),
            ref["k"].transpose(-1, -2),
        )
        < RTOL
    )
    assert (
        rel_err(
            out["v_cols"].reshape(s.batch, s.n_kv_heads, s.head_dim, s.seq),
            ref["v"].transpose(-1, -2),
        )
        < RTOL
    )


@pytest.mark.parametrize("name", list(SHAPES))
def test_attention_backward_matches_torch(name: str) -> None:
    s = SHAPES[name]
    kernels = block_kernels(s, ("attention_forward", "attention_backward"))
    inputs = attention_inputs(s, seed=1)
    weights = with_swapped(s, {k: v for k, v in inputs.items() if k.startswith("w")})
    fwd = run(kernels["attention_forward"], **weights, x=inputs["x"], gain=inputs["gain"])
    dy = fp16(np.random.default_rng(2), s.dim, s.tokens)
    taps = {k: fwd[k] for k in ("q_rows", "k_cols", "v_cols", "a_rows")}
    out = run(kernels["attention_backward"], dy=dy, **weights, **taps)

    # autograd from the kernel's own normalised input, so only the backward is under test
    xn = t64(fwd["xn"]).T.requires_grad_()
    t = {k: t64(v) for k, v in inputs.items()}
    ref = ref_attention(xn, t["wq"], t["wk"], t["wv"], t["wo"], s)
    ref["o"].backward(t64(dy).T)
    assert rel_err(out["dxn"], xn.grad.T) < RTOL
    q, kv = s.q_dim, s.kv_dim
    dproj = out["dproj"].astype(np.float64)
    assert dproj.shape == (2 * q + 3 * kv, s.tokens)
    swap_q, swap_k = rope_swap(s.n_heads, s.head_dim), rope_swap(s.n_kv_heads, s.head_dim)
    # rows in weight order wq wk wv wq_s wk_s; the swapped parts fold back (docstring)
    dq = dproj[:q] + dproj[q + 2 * kv : 2 * q + 2 * kv][swap_q]
    dk = dproj[q : q + kv] + dproj[2 * q + 2 * kv :][swap_k]
    assert rel_err(dq, ref["q_lin"].grad.T) < RTOL
    assert rel_err(dk, ref["k_lin"].grad.T) < RTOL
    assert rel_err(dproj[q + kv : q + 2 * kv], ref["v_lin"].grad.T) < RTOL


def test_gqa_pairing_is_h_div_group() -> None:
    """Only the KV head h // group may influence query head h (not h mod kv_heads)."""
    s = SHAPES["gqa"]
    inputs = attention_inputs(s, seed=3)
    kernel = block_kernels(s, ("attention_forward",))["attention_forward"]
    base = run(kernel, **with_swapped(s, inputs))["a_rows"]
    wv = inputs["wv"].copy()
    wv[:, s.head_dim :] = 0  # zero the values of KV head 1
    changed = run(kernel, **with_swapped(s, {**inputs, "wv": wv}))["a_rows"]
    per_head = query_rows_by_token(changed - base, s).reshape(s.tokens, s.n_heads, s.head_dim)
    moved = np.abs(per_head).max(axis=(0, 2))
    assert list(moved == 0) == [
        True,
        True,
        False,
        False,
    ]  # heads 0, 1 use KV 0; heads 2, 3 use KV 1


def test_causal_mask_hides_the_future() -> None:
    s = SHAPES["gqa"]
    inputs = attention_inputs(s, seed=4)
    kernel = block_kernels(s, ("attention_forward",))["attention_forward"]
    base = run(kernel, **with_swapped(s, inputs))["o"]
    x = inputs["x"].copy()
    x[:, 10 : s.seq] += 1  # change positions 10.. of the first sequence
    changed = run(kernel, **with_swapped(s, {**inputs, "x": x}))["o"]
    assert np.array_equal(changed[:, :10], base[:, :10])
    assert not np.array_equal(changed[:, 10 : s.seq], base[:, 10 : s.seq])
    assert np.array_equal(changed[:, s.seq :], base[:, s.seq :])  # the other sequence


def ffn_inputs(s: BlockShape, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": fp16(rng, s.dim, s.tokens),
        "gain": (1 + fp16(rng, s.dim, 1, scale=0.1)).astype(np.float16),
        "w1": fp16(rng, s.dim, s.hidden_dim, scale=2 / np.sqrt(s.dim)),
        "w3": fp16(rng, s.dim, s.hidden_dim, scale=2 / np.sqrt(s.dim)),
        "w2": fp16(rng, s.dim, s.hidden_dim, scale=1 / np.sqrt(s.hidden_dim)),
    }


def ref_ffn(xn: torch.Tensor, w1, w3, w2) -> dict[str, torch.Tensor]:
    h1, h3 = xn @ w1, xn @ w3
    for t in (h1, h3):
        if t.requires_grad:
            t.retain_grad()
    u = torch.nn.functional.silu(h1) * h3
    return {"f": u @ w2.T, "h1": h1, "h3": h3, "u": u}


@pytest.mark.parametrize("name", ["mha", "mqa-wide"])
def test_ffn_forward_and_backward_match_torch(name: str) -> None:
    s = SHAPES[name]
    kernels = block_kernels(s, ("ffn_forward", "ffn_backward"))
    inputs = ffn_inputs(s, seed=5)
    fwd = run(kernels["ffn_forward"], **inputs)
    t = {k: t64(v) for k, v in inputs.items()}
    xn, rstd = ref_rmsnorm(t["x"].T, t["gain"][:, 0], s.norm_eps)
    ref = ref_ffn(xn, t["w1"], t["w3"], t["w2"])
    for key in ("f", "h1", "h3", "u"):
        assert rel_err(fwd[key], ref[key].T) < RTOL, key
    assert rel_err(fwd["xn"], xn.T) < RTOL
    assert rel_err(fwd["rstd"], rstd.T) < RTOL

    dy = fp16(np.random.default_rng(6), s.dim, s.tokens)
    weights = {k: v for k, v in inputs.items() if k.startswith("w")}
    out = run(kernels["ffn_backward"], dy=dy, **weights, h1=fwd["h1"], h3=fwd["h3"])
    xn_leaf = t64(fwd["xn"]).T.requires_grad_()
    ref = ref_ffn(xn_leaf, t["w1"], t["w3"], t["w2"])
    ref["f"].backward(t64(dy).T)
    assert rel_err(out["dxn"], xn_leaf.grad.T) < RTOL
    assert rel_err(out["dh1"], ref["h1"].grad.T) < RTOL
    assert rel_err(out["dh3"], ref["h3"].grad.T) < RTOL


@pytest.mark.ane
@pytest.mark.parametrize(
    "kernel", ["attention_forward", "attention_backward", "ffn_forward", "ffn_backward"]
)
def test_kernel_on_the_ane_matches_the_reference_backend(kernel: str) -> None:
    s = SHAPES["gqa"]
    kd = block_kernels(s, (kernel,))[kernel]
    x = fp16(np.random.default_rng(7), *kd.input.shape, scale=0.3)
    with anekit.compile(kd.program, backend="reference") as k:
        want = k(x=x)["y"].astype(np.float64)
    with anekit.compile(kd.program, backend="ane") as k:
        got = k(x=x)["y"].astype(np.float64)
    # both store fp16 after every op; the ANE's accumulation order and width differ
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-2


def layer_parameters(s: BlockShape, seed: int) -> dict[str, np.ndarray]:
    """One layer's fp32 parameters by :data:`~anekit.nn.kernels.LAYER_PARAMETERS` name."""
    att, ffn = attention_inputs(s, seed), ffn_inputs(s, seed + 1)
    weights = {k: v for k, v in {**att, **ffn}.items() if k.startswith("w")}
    layer = {k: v.astype(np.float32) for k, v in weights.items()}
    layer["attn_norm"] = att["gain"][:, 0].astype(np.float32)
    layer["ffn_norm"] = ffn["gain"][:, 0].astype(np.float32)
    return layer


@pytest.mark.parametrize("half", HALVES, ids=lambda h: h.forward.split("_")[0])
def test_a_block_half_with_its_cpu_contract_matches_torch(half) -> None:
    """Pack with kernel_weights, run both kernels, finish on the CPU: every gradient vs autograd."""
    s = SHAPES["gqa"]
    layer = layer_parameters(s, seed=8)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((s.dim, s.tokens)).astype(np.float32)
    dy = rng.standard_normal((s.dim, s.tokens)).astype(np.float32)
    kernels = block_kernels(s, (half.forward, half.backward))
    weights = kernel_weights(s, layer)
    fwd = run(kernels[half.forward], x=x, **weights[half.forward])
    bwd = run(kernels[half.backward], **weights[half.backward], **half.backward_inputs(fwd, dy))
    dx, grads = half.gradients(s, fwd, bwd, dy, x, layer[half.norm])

    t = {k: t64(v).requires_grad_() for k, v in layer.items()}
    x_t = t64(x).T.requires_grad_()
    xn, _ = ref_rmsnorm(x_t, t[half.norm], s.norm_eps)
    if half is ATTENTION:
        out = ref_attention(xn, t["wq"], t["wk"], t["wv"], t["wo"], s)["o"]
    else:
        out = ref_ffn(xn, t["w1"], t["w3"], t["w2"])["f"]
    assert rel_err(fwd[half.residual], out.T) < RTOL
    out.backward(t64(dy).T)
    assert rel_err(dx, x_t.grad.T) < RTOL
    assert sorted(grads) == sorted(k for k, v in t.items() if v.grad is not None)
    for name, g in grads.items():
        assert rel_err(g, t[name].grad) < RTOL, name


def test_kernel_weights_swap_rope_columns_and_make_gains_columns() -> None:
    s = SHAPES["gqa"]
    layer = layer_parameters(s, seed=10)
    w = kernel_weights(s, layer)
    assert set(w) == set(GENERATORS)
    hd, half = s.head_dim, s.head_dim // 2
    # head 1 of wk_s: its second half of columns first, then its first half
    np.testing.assert_array_equal(w["attention_forward"]["wk_s"][:, hd : hd + half],
                                  layer["wk"][:, hd + half : 2 * hd])  # fmt: skip
    np.testing.assert_array_equal(w["ffn_forward"]["gain"][:, 0], layer["ffn_norm"])
    assert "gain" not in w["ffn_backward"]
    with pytest.raises(ValueError, match=r"\['ffn_norm'\] are missing"):
        kernel_weights(s, {k: v for k, v in layer.items() if k != "ffn_norm"})
