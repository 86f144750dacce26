"""The resampling (nearest, bilinear, bicubic, area), ordering, scan, padding and angle
lowerings against PyTorch, on several shapes: fp32 programs (``passes=()``) compared with the eager module on the reference
backend, and each once more through the default ANE passes (``verify=True``: 2e-2)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import anekit  # noqa: E402
from anekit.errors import ConversionError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


class Fn(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def outputs_of(result) -> list[np.ndarray]:
    leaves = result if isinstance(result, (tuple, list)) else [result]
    return [t.numpy() for t in leaves]


def check(fn, *xs: torch.Tensor, exact: bool = False, ane: bool = True) -> anekit.mil.Program:
    model = Fn(fn)
    prog = anekit.from_torch(model, xs, passes=())
    feeds = {v.name: x.numpy().astype(v.dtype.numpy) for v, x in zip(prog.main.inputs, xs)}
    with anekit.compile(prog, backend="reference") as k:
        got = k(**feeds)
    with torch.no_grad():
        want = outputs_of(model(*xs))
    for v, w in zip(prog.main.outputs, want, strict=True):
        g = np.asarray(got[v.name])
        assert g.shape == w.shape, v.name
        if exact or w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w, err_msg=v.name)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=v.name)
    if ane:
        anekit.from_torch(model, xs)  # the default passes, verified against PyTorch
    return prog


SHAPES = [(1, 3, 4, 5), (2, 2, 3, 7), (1, 1, 6, 6)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "how",
    [dict(scale_factor=2), dict(scale_factor=3), dict(size=(5, 9)), dict(scale_factor=1.5),
     dict(size=(8, 10))],
)  # fmt: skip
def test_interpolate_nearest(shape, how) -> None:
    torch.manual_seed(0)
    prog = check(lambda x: F.interpolate(x, mode="nearest", **how), torch.randn(shape))
    ops = {op.op_type for op in prog.main.ops}
    out = prog.main.outputs[0].shape[2:]
    integer = all(o % s == 0 for o, s in zip(out, shape[2:])) and how.get("scale_factor") != 1.5
    assert ("upsample_nearest_neighbor" in ops) == integer  # else the one-hot matrices


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize(
    "how", [dict(scale_factor=2), dict(size=(5, 9)), dict(scale_factor=1.7), dict(size=(3, 3))]
)
def test_interpolate_bilinear(shape, align_corners, how) -> None:
    torch.manual_seed(0)
    fn = lambda x: F.interpolate(x, mode="bilinear", align_corners=align_corners, **how)  # noqa: E731
    check(fn, torch.randn(shape))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize(
    "how", [dict(scale_factor=2), dict(size=(5, 9)), dict(scale_factor=1.7), dict(size=(3, 2))]
)
def test_interpolate_bicubic(shape, align_corners, how) -> None:
    torch.manual_seed(0)
    fn = lambda x: F.interpolate(x, mode="bicubic", align_corners=align_corners, **how)  # noqa: E731
    check(fn, torch.randn(shape))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("size", [(1, 1), (2, 2), (3, 4), (5, 3), (6, 6)])
def test_interpolate_area_and_adaptive_average_pooling(shape, size) -> None:
    torch.manual_seed(0)
    check(lambda x: F.interpolate(x, size=size, mode="area"), torch.randn(shape))
    check(lambda x: F.adaptive_avg_pool2d(x, size), torch.randn(shape), ane=False)


@pytest.mark.parametrize("length", [1, 3, 4])
def test_interpolate_area_1d(length) -> None:
    torch.manual_seed(0)
    check(lambda x: F.interpolate(x, size=length, mode="area"), torch.randn(2, 3, 7))


@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 4, 6)])
def test_argmax_argmin(shape) -> None:
    torch.manual_seed(0)
    x = torch.randn(shape)
    check(lambda x: (x.argmax(-1), x.argmin(0, keepdim=True), x.argmax()), x, ane=False)


@pytest.mark.parametrize("shape,k", [((6,), 2), ((3, 8), 3), ((2, 3, 5), 5)])
def test_topk_values_and_indices(shape, k) -> None:
    torch.manual_seed(0)
    x = torch.randn(shape)
    check(lambda x: torch.topk(x, k, -1), x, ane=False)
    check(lambda x: torch.topk(x, 1, 0, largest=False), x, ane=False)


@pytest.mark.parametrize("shape", [(7,), (3, 8), (2, 3, 5)])
def test_sort_and_argsort(shape) -> None:
    torch.manual_seed(0)
    x = torch.randn(shape)
    check(lambda x: torch.sort(x, -1, descending=True), x, ane=False)
    check(lambda x: torch.sort(x, stable=True, dim=0), x, ane=False)
    check(lambda x: torch.argsort(x, -1), x, ane=False)
    ties = torch.tensor([[3.0, 1.0, 3.0, 1.0, 2.0]])  # stable: equal values keep their order
    check(lambda x: torch.sort(x, stable=True, dim=-1), ties, ane=False)


@pytest.mark.parametrize("shape", [(6,), (3, 8), (2, 3, 5)])
def test_cumsum_float_and_int(shape) -> None:
    torch.manual_seed(0)
    x = torch.randn(shape)
    check(lambda x: torch.cumsum(x, -1), x)
    ids = torch.randint(0, 5, shape)
    check(lambda i: torch.cumsum(i, 0), ids, ane=False)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
def test_atan2_in_every_quadrant_and_on_the_axes(shape) -> None:
    torch.manual_seed(0)
    y, x = torch.randn(shape), torch.randn(shape)
    check(torch.atan2, y, x)
    axes_y = torch.tensor([1.0, -1.0, 0.0, 2.0, -2.0, 0.0])
    axes_x = torch.tensor([0.0, 0.0, 0.0, -1.0, -1.0, 3.0])
    check(torch.atan2, axes_y, axes_x, ane=False)


@pytest.mark.parametrize("shape", [(4,), (3, 5), (2, 3, 4)])
def test_clamp_with_tensor_bounds(shape) -> None:
    torch.manual_seed(0)
    x, lo = torch.randn(shape), torch.randn(shape) - 0.5
    check(lambda x, lo: torch.clamp(x, lo, lo + 0.7), x, lo)
    check(lambda x, lo: torch.clamp(x, min=lo), x, lo)
    check(lambda x, lo: torch.clamp(x, max=lo), x, lo)


@pytest.mark.parametrize("shape", [(6,), (3, 5), (2, 3, 4)])
def test_roll(shape) -> None:
    torch.manual_seed(0)
    x = torch.randn(shape)
    check(lambda x: torch.roll(x, 2, -1), x, exact=True)
    check(lambda x: torch.roll(x, -1), x, exact=True)  # over the flattened tensor
    if len(shape) == 3:
        check(lambda x: torch.roll(x, (1, -2), (0, 2)), x, exact=True)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", [((1, 2, 6), (1, 2)), ((1, 2, 4, 5), (2, 1, 1, 3))])
def test_pad_modes(mode, shape, pad) -> None:
    torch.manual_seed(0)
    check(lambda x: F.pad(x, pad, mode=mode), torch.randn(shape), exact=True)


def test_gather_along_a_dim() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 5)
    index = torch.tensor([[0, 4, 2], [4, 0, 1], [3, 0, 3]])
    check(lambda x, i: torch.gather(x, 1, i), x, index, exact=True, ane=False)


def test_missing_op_names_op_node_module_source_and_says_open_an_issue() -> None:
    class Inner(torch.nn.Module):
        def forward(self, x):
            return torch.special.erfcx(x)

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Inner()

        def forward(self, x):
            return self.block(x) + 1

    with pytest.raises(ConversionError) as err:
        anekit.from_torch(Outer(), (torch.randn(3),))
    text = str(err.value)
    assert "aten.special_erfcx.default" in text
    assert "module block" in text and "test_torch_ops_more.py" in text
    assert "open an issue" in text and "edit" not in text


class Masked(torch.nn.Module):
    """``x[mask]`` with a mask known at export (a buffer), over one axis or several."""

    def __init__(self, mask: torch.Tensor, lead: int) -> None:
        super().__init__()
        self.register_buffer("mask", mask)
        self.lead = lead

    def forward(self, x):
        return x[(slice(None),) * self.lead + (self.mask,)] * 2


@pytest.mark.parametrize(
    "shape, lead, mask_shape",
    [((3, 5), 1, (5,)), ((3, 5), 0, (3, 5)), ((2, 4, 6), 1, (4, 6)), ((2, 3, 4), 0, (2,))],
)
def test_boolean_mask_known_at_export_selects_as_pytorch(shape, lead, mask_shape) -> None:
    torch.manual_seed(0)
    mask = torch.rand(mask_shape) > 0.4
    mask.view(-1)[0] = True  # never empty
    model = Masked(mask, lead)
    x = torch.randn(shape)
    prog = anekit.from_torch(model, (x,))  # the default passes, verified against PyTorch
    assert list(prog.main.outputs[0].shape) == list(model(x).shape)


def test_boolean_mask_from_constants_in_forward() -> None:
    fn = lambda x: x[..., torch.arange(7) % 3 == 0].sum(-1)  # noqa: E731
    check(fn, torch.randn(2, 4, 7))


def test_boolean_mask_from_the_inputs_is_refused_precisely() -> None:
    class Inner(torch.nn.Module):
        def forward(self, x):
            return x[x > 0]

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pick = Inner()

        def forward(self, x):
            return self.pick(x) * 2

    with pytest.raises(ConversionError) as err:
        anekit.from_torch(Outer(), (torch.randn(3, 4),))
    text = str(err.value)
    assert "aten.index.Tensor" in text and "node 'index'" in text
    assert "module pick (Inner)" in text and "return x[x > 0]" in text
    assert "torch.where" in text and "buffer" in text
