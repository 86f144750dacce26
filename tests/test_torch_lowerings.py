"""Single ATen families through the converter, against PyTorch; errors name every bad node.

Each module is small and is converted twice: with ``passes=()`` (fp32, PyTorch's layout:
the lowering alone, compared tightly) and with the default passes (fp16, ANE layout).
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import anekit  # noqa: E402
from anekit import passes  # noqa: E402
from anekit.errors import ConversionError  # noqa: E402
from anekit.frontends.torch import (  # noqa: E402
    LOWERINGS,
    capture,
    check_fidelity,
    compare,
    convert_exported,
    decompose,
)
from anekit.hw.numerics import MASK_MIN  # noqa: E402

# torch.export's pytree code warns about its own deprecated API
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


class Fn(torch.nn.Module):
    """A module around a function of the inputs (and optional parameters)."""

    def __init__(self, fn, **params: torch.Tensor) -> None:
        super().__init__()
        self.fn = fn
        for k, v in params.items():
            self.register_buffer(k, v)

    def forward(self, *xs: torch.Tensor):
        return self.fn(self, *xs)


def check_both(module: torch.nn.Module, *args: torch.Tensor, fp32_tol: float = 1e-5):
    """Export once; the fp32 program matches tightly, the ANE one within 2e-2."""
    exact = convert_exported(capture(module, args))
    report = compare(module, args, exact)
    assert report.worst.rel_error < fp32_tol, str(report)
    ane = passes.convert(exact)
    assert check_fidelity(module, args, ane).worst.rel_error < 2e-2
    return ane


def test_elementwise_broadcasting_and_python_scalars() -> None:
    torch.manual_seed(1)

    def fn(m, x, y):
        a = (x * 2 + y) / 3 - 1.5  # [4, 1] with [1, 5]; Python scalars
        b = 1 - torch.sigmoid(a) ** 2 + torch.relu(-a) * 0.5
        c = torch.where(a > 0, a, 0.1 * a).clamp(-2, 2) + torch.tanh(b).abs()
        return c.exp().sqrt() + torch.rsqrt(c * c + 1) + torch.maximum(a, b) - a.neg()

    check_both(Fn(fn), torch.randn(4, 1), torch.randn(1, 5))


def test_activations_both_gelus() -> None:
    torch.manual_seed(2)
    acts = [
        torch.nn.GELU(), torch.nn.GELU(approximate="tanh"), torch.nn.SiLU(), torch.nn.ReLU(),
        torch.nn.Tanh(), torch.nn.Sigmoid(), torch.nn.LeakyReLU(0.2), torch.nn.Hardswish(),
    ]  # fmt: skip
    model = Fn(lambda m, x: torch.stack([a(x) for a in acts]).sum(0))
    check_both(model, torch.randn(2, 3, 16) * 3)


def test_view_and_data_movement_ops() -> None:
    torch.manual_seed(3)

    def fn(m, x):
        a = x.view(2, 3, 4, 5).permute(0, 2, 1, 3).reshape(2, 12, 5)
        b = a.transpose(1, 2).flatten(1).unsqueeze(0).squeeze(0)  # [2, 60]
        c = b[:, 2:50:3] + b[:, -16:]  # strided and negative slices
        d = torch.cat([c, b.select(1, 7).unsqueeze(1).expand(2, 16)], dim=1)
        p, q = d.split([10, 22], dim=1)
        r, s = q.chunk(2, dim=1)
        return torch.cat([p.sum(1, keepdim=True), r * s, q.mean(-1, keepdim=True)], 1)

    check_both(Fn(fn), torch.randn(2, 60))


def test_reductions() -> None:
    torch.manual_seed(4)
    model = Fn(lambda m, x: x.mean((1, 2)) + x.sum(-1).amax(-1) - x.amax(dim=(1, 2)))
    check_both(model, torch.randn(3, 4, 5))


def test_rmsnorm_written_out_and_layernorm() -> None:
    torch.manual_seed(5)
    w = torch.randn(16)

    def fn(m, x):
        rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * m.w
        return F.layer_norm(rms, (16,), m.w, m.w * 0.1, eps=1e-12)  # BERT's eps

    check_both(Fn(fn, w=w), torch.randn(1, 6, 16))


@pytest.mark.parametrize(
    "groups,stride,padding,dilation", [(1, 1, 1, 1), (2, 2, 2, 2), (4, 1, 0, 3)]
)
def test_conv1d_and_conv2d_parameters(
    groups: int, stride: int, padding: int, dilation: int
) -> None:
    torch.manual_seed(6)
    c1 = torch.nn.Conv1d(8, 12, 3, stride=stride, padding=padding, dilation=dilation, groups=groups)
    c2 = torch.nn.Conv2d(8, 4, 3, stride=stride, padding=padding, dilation=dilation, groups=groups)
    model = Fn(lambda m, x, y: (c1(x).sum(), c2(y)))
    check_both(model, torch.randn(1, 8, 20), torch.randn(1, 8, 12, 12))


@pytest.mark.parametrize(
    "stride,padding,output_padding,dilation,groups",
    [(1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (3, 2, 2, 2, 2), (2, 0, 1, 1, 4)],
)
def test_conv_transpose1d_and_2d_parameters(
    stride: int, padding: int, output_padding: int, dilation: int, groups: int
) -> None:
    """output_padding lengthens the end: uncropped values where they reach, bias beyond."""
    torch.manual_seed(7)
    kw = dict(stride=stride, padding=padding, output_padding=output_padding,
              dilation=dilation, groups=groups)  # fmt: skip
    t1 = torch.nn.ConvTranspose1d(8, 12, 3, **kw)
    t2 = torch.nn.ConvTranspose2d(8, 4, (3, 2), **kw)
    model = Fn(lambda m, x, y: (t1(x), t2(y)))
    ane = check_both(model, torch.randn(1, 8, 9), torch.randn(1, 8, 5, 6))
    assert sum(op.op_type == "conv_transpose" for op in ane.main.ops) == 2


def test_group_norm_and_its_statistics() -> None:
    torch.manual_seed(8)
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.GroupNorm(4, 16))
    with torch.no_grad():  # not the identity affine PyTorch starts from
        net[1].weight.uniform_(0.5, 1.5)
        net[1].bias.uniform_(-0.5, 0.5)
    check_both(Fn(lambda m, x: F.silu(net(x))), torch.randn(2, 8, 6, 5))
    w, b = torch.rand(6) + 0.5, torch.randn(6)

    def stats(m, x):  # the mean and 1/std PyTorch also returns, [N, G]
        return torch.ops.aten.native_group_norm(x, m.w, m.b, 2, 6, 7, 3, 1e-5)

    check_both(Fn(stats, w=w, b=b), torch.randn(2, 6, 7) * 3 + 1)


def test_pools_and_embedding_and_addmm() -> None:
    torch.manual_seed(7)
    emb = torch.nn.Embedding(50, 8)
    w, bias = torch.randn(8, 6), torch.randn(6)

    def fn(m, ids, img):
        pooled = F.max_pool2d(img, 3, 2, 1) + F.avg_pool2d(img, 3, 2, 1, count_include_pad=False)
        pooled = F.adaptive_avg_pool2d(pooled, (2, 2)).amax((2, 3))  # [1, 8, 4, 4] -> [1, 8]
        pooled = pooled + F.adaptive_avg_pool2d(img, 1).flatten(1)
        return torch.addmm(m.bias, emb(ids)[0] + pooled, m.w)  # GPT-2's Conv1D

    check_both(Fn(fn, w=w, bias=bias), torch.randint(0, 50, (1, 5)), torch.randn(1, 8, 8, 8))


@pytest.mark.parametrize(
    "mode", ["plain", "causal", "bool_mask", "float_mask", "scale", "gqa", "runtime_mask"]
)
def test_scaled_dot_product_attention(mode: str) -> None:
    torch.manual_seed(8)
    q, k, v = torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8)
    keep = torch.rand(6, 6) > 0.3
    keep |= torch.eye(6, dtype=torch.bool)  # every row attends somewhere
    kwargs: dict = {
        "plain": {},
        "causal": {"is_causal": True},
        "bool_mask": {"attn_mask": keep},
        "float_mask": {"attn_mask": torch.randn(1, 1, 6, 6)},
        "scale": {"scale": 0.3},
        "gqa": {"enable_gqa": True, "is_causal": True},
    }.get(mode, {})
    if mode == "gqa":
        k, v = k[:, :2], v[:, :2]
    if mode == "runtime_mask":
        model = Fn(lambda m, q, k, v, mask: F.scaled_dot_product_attention(q, k, v, mask))
        check_both(model, q, k, v, torch.randn(1, 4, 6, 6))
        return
    model = Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs))
    prog = check_both(model, q, k, v)
    masked = mode in ("causal", "bool_mask", "float_mask", "gqa")
    fused = "scaled_dot_product_attention" in {op.op_type for op in prog.main.ops}
    assert fused is not masked  # the ANE ignores attn_mask: masked attention is spelled out
    assert [d for d in anekit.check(prog, chip="m4") if d.severity == "error"] == []


def test_composites_pytorch_decomposes_convert_through_their_parts() -> None:
    torch.manual_seed(10)

    def fn(m, x):
        a = F.mish(x) + torch.var(x, -1, keepdim=True) + F.log_softmax(x, -1)
        return F.glu(torch.lerp(a, torch.addcmul(x, x, a, value=0.5), 0.3), -1)

    model = Fn(fn)
    x = torch.randn(2, 3, 8)
    exported = torch.export.export(model, (x,), strict=False)
    assert decompose(exported) is not exported  # mish, var, glu... need PyTorch's tables
    check_both(model, x)


def test_decomposition_is_skipped_when_every_node_has_a_lowering() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    exported = torch.export.export(model, (torch.randn(2, 4),), strict=False)
    assert decompose(exported) is exported


def test_position_ids_and_masks_from_arange_fold_to_constants() -> None:
    torch.manual_seed(9)

    def fn(m, x):
        n = x.shape[1]
        pos = torch.arange(n).unsqueeze(0).float()  # depends only on the shape
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return (x @ x.transpose(-1, -2) / math.sqrt(x.shape[-1]) + mask).softmax(-1) @ x + pos.T

    prog = anekit.from_torch(Fn(fn), (torch.randn(1, 5, 8),))
    ops = {op.op_type for op in prog.main.ops}
    assert ops.isdisjoint({"range_1d", "band_part", "fill"})
    consts = [np.asarray(op.outputs[0].const) for op in prog.main.ops if op.op_type == "const"]
    assert all(np.isfinite(c).all() for c in consts if c.dtype.kind == "f")  # -inf masks finite
    assert any(c.min() == MASK_MIN for c in consts if c.dtype.kind == "f" and c.size)


class Unsupported(torch.nn.Module):
    """Three ops with no lowering, one per line (PyTorch records the forward() line)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.lgamma(x)
        b = torch.special.erfcx(x)
        c = torch.digamma(a)
        return a + b + c


def test_unsupported_ops_are_all_named_with_source_lines() -> None:
    with pytest.raises(ConversionError) as err:
        anekit.from_torch(Unsupported(), (torch.randn(2, 5),))
    problems = err.value.problems
    ops = {"aten.lgamma.default", "aten.special_erfcx.default", "aten.digamma.default"}
    assert {op for _, op, _ in problems} == ops
    source = {op: src for _, op, src in problems}
    assert source["aten.lgamma.default"].endswith("a = torch.lgamma(x)")
    assert source["aten.special_erfcx.default"].endswith("b = torch.special.erfcx(x)")
    assert source["aten.digamma.default"].endswith("c = torch.digamma(a)")
    assert all(f"{__file__}:" in src for src in source.values())
    text = str(err.value)
    assert "3 ATen op(s) with no lowering" in text
    assert all(src in text for src in source.values())


def test_verify_names_the_output_that_differs() -> None:
    """A program that does not match the module fails verification, naming the output."""
    model = Fn(lambda m, x: (x * 2, x + 1))
    wrong = anekit.from_torch(Fn(lambda m, x: (x * 2, x - 1)), (torch.randn(3, 4),))
    with pytest.raises(ConversionError, match="output_1") as err:
        check_fidelity(model, (torch.randn(3, 4),), wrong)
    assert err.value.output == "output_1"


def test_fidelity_report_values() -> None:
    model = Fn(lambda m, x: x * 3)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    prog = anekit.from_torch(Fn(lambda m, x: x * 3 + 0.5), (x,), verify=False)
    (row,) = compare(model, (x,), prog).outputs
    want = np.array([3.0, 6.0, 9.0, 12.0])
    assert row.max_abs_error == pytest.approx(0.5)
    assert row.rel_error == pytest.approx(1.0 / np.linalg.norm(want), rel=1e-6)
    got = want + 0.5
    assert row.cosine == pytest.approx(got @ want / np.linalg.norm(got) / np.linalg.norm(want))


def test_every_lowering_key_is_an_aten_overload() -> None:
    for op in LOWERINGS:
        assert isinstance(op, torch._ops.OpOverload), op
        assert str(op).startswith("aten."), op


def test_import_anekit_does_not_import_torch() -> None:
    code = "import sys, anekit; anekit.mil; anekit.check; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
