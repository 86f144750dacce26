"""Cases for layer_norm, batch_norm, instance_norm, l2_norm and local_response_norm.

Expected values come from torch float64 (layer_norm, batch_norm, instance_norm,
local_response_norm) and from a NumPy formula for l2_norm, applied to the same
fp16 inputs and fp16 constants the program holds.

Tolerances: outputs are O(1) (|y| <= ~4 with the gammas and betas used here),
so rounding the fp32 result to fp16 costs at most 2**-11 ~ 4.9e-4 relative, and
the fp32 statistics over <= 60 elements add ~1e-6. The fp16 epsilon differs
from torch's float64 one by < 0.2 %, which moves results by < 1e-7 at unit
variance. rtol = atol = 2e-3 (the Case default) covers that with margin and
fails on a wrong axis, a biased variance or epsilon outside the square root
(all O(1e-2) or more here).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from tests.opcases import Case

EPS16 = float(np.float16(1e-5))  # the default epsilon as an fp16 const holds it


def _t(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def _fp16(rng_seed, shape, low=-1.5, high=1.5):
    """A fixed fp16 constant (gamma, beta, mean) for a case."""
    return np.random.default_rng(rng_seed).uniform(low, high, shape).astype(np.float16)


# -- layer_norm ------------------------------------------------------------------------------------


def _layer_norm_case(label, shape, axes, affine=False, dtype="fp16", epsilon=None):
    ax = sorted(range(len(shape)) if axes is None else [a % len(shape) for a in axes])
    normalized = tuple(shape[i] for i in ax)
    np_dtype = np.float16 if dtype == "fp16" else np.float32
    gamma = _fp16(1, normalized, 0.5, 2.0).astype(np_dtype) if affine else None
    beta = _fp16(2, normalized).astype(np_dtype) if affine else None
    params = {"axes": axes, "gamma": gamma, "beta": beta, "epsilon": epsilon}

    def build(b):
        b.output(b.layer_norm(x=b.input("x", shape, dtype), **params), "y")

    def expect(x):
        # torch normalises trailing axes: move the normalised axes to the end, in order
        rest = [i for i in range(len(shape)) if i not in ax]
        moved = _t(x).permute(*rest, *ax)
        eps = EPS16 if epsilon is None else epsilon
        w = None if gamma is None else _t(gamma)
        bias = None if beta is None else _t(beta)
        y = F.layer_norm(moved, normalized, w, bias, eps)
        return {"y": y.permute(*np.argsort(rest + ax).tolist()).numpy()}

    return Case("layer_norm", label, build, {"y": shape}, expect)


CASES = [
    _layer_norm_case("last-axis-affine", (2, 3, 8), [-1], affine=True),
    _layer_norm_case("axes1,2", (2, 3, 4), [1, 2]),
    _layer_norm_case("axes-default", (3, 4), None),
    _layer_norm_case("axes-1,0-noncontiguous-affine", (4, 3, 5), [-1, 0], affine=True),
    _layer_norm_case("axis1-affine", (2, 5, 3), [1], affine=True),
    _layer_norm_case("fp32-axis-1", (2, 16), [-1], affine=True, dtype="fp32", epsilon=0.5),
]


# -- batch_norm ------------------------------------------------------------------------------------


def _batch_norm_case(label, shape, affine=True, epsilon=None):
    c = shape[1]
    mean, variance = _fp16(3, (c,)), _fp16(4, (c,), 0.25, 4.0)
    gamma = _fp16(5, (c,), 0.5, 2.0) if affine else None
    beta = _fp16(6, (c,)) if affine else None
    # fp16 like mean: a Python float literal would become fp32 (domain U must agree)
    eps16 = None if epsilon is None else np.float16(epsilon)

    def build(b):
        x = b.input("x", shape, "fp16")
        y = b.batch_norm(x=x, mean=mean, variance=variance, gamma=gamma, beta=beta, epsilon=eps16)
        b.output(y, "y")

    def expect(x):
        eps = EPS16 if epsilon is None else epsilon
        w = None if gamma is None else _t(gamma)
        bias = None if beta is None else _t(beta)
        y = F.batch_norm(_t(x), _t(mean), _t(variance), w, bias, training=False, eps=eps)
        return {"y": y.numpy()}

    return Case("batch_norm", label, build, {"y": shape}, expect)


CASES += [
    _batch_norm_case("rank3", (2, 3, 5)),
    _batch_norm_case("rank4", (1, 4, 3, 2)),
    _batch_norm_case("rank5-no-affine", (1, 2, 2, 3, 2), affine=False),
    _batch_norm_case("rank4-epsilon", (2, 3, 2, 2), epsilon=0.25),
]


# -- instance_norm ---------------------------------------------------------------------------------


def _instance_norm_case(label, shape, affine=True):
    c = shape[1]
    gamma = _fp16(7, (c,), 0.5, 2.0) if affine else None
    beta = _fp16(8, (c,)) if affine else None

    def build(b):
        b.output(b.instance_norm(x=b.input("x", shape, "fp16"), gamma=gamma, beta=beta), "y")

    def expect(x):
        w = None if gamma is None else _t(gamma)
        bias = None if beta is None else _t(beta)
        return {"y": F.instance_norm(_t(x), weight=w, bias=bias, eps=EPS16).numpy()}

    return Case("instance_norm", label, build, {"y": shape}, expect)


CASES += [
    _instance_norm_case("rank3", (2, 3, 8)),
    _instance_norm_case("rank4", (2, 2, 3, 4)),
    _instance_norm_case("rank4-no-affine", (1, 3, 4, 4), affine=False),
]


# -- l2_norm ---------------------------------------------------------------------------------------


def _l2_norm_case(label, shape, epsilon=None):
    def build(b):
        b.output(b.l2_norm(x=b.input("x", shape, "fp16"), epsilon=epsilon), "y")

    def expect(x):
        eps = float(np.float32(1e-6)) if epsilon is None else epsilon
        flat = x.reshape(-1, int(np.prod(shape[-3:])))  # batch rows x (last three axes)
        norm = np.sqrt((flat**2).sum(axis=1, keepdims=True) + eps)
        return {"y": (flat / norm).reshape(shape)}

    return Case("l2_norm", label, build, {"y": shape}, expect)


CASES += [
    _l2_norm_case("rank3", (2, 3, 4)),
    _l2_norm_case("rank4-batch", (3, 2, 2, 5)),
    _l2_norm_case("rank5-epsilon", (2, 2, 1, 3, 2), epsilon=2.0),
]


# -- local_response_norm ---------------------------------------------------------------------------


def _lrn_case(label, shape, size, **params):
    def build(b):
        b.output(b.local_response_norm(x=b.input("x", shape, "fp16"), size=size, **params), "y")

    def expect(x):
        kw = {"alpha": 1e-4, "beta": 0.75, "k": 1.0}
        kw.update({k: float(np.float32(v)) for k, v in params.items()})
        # channels are axis -3: view x as (batch, C, H, W), where torch's channel axis is 1
        y = F.local_response_norm(_t(x).reshape(-1, *shape[-3:]), size, **kw)
        return {"y": y.reshape(shape).numpy()}

    return Case("local_response_norm", label, build, {"y": shape}, expect)


# Beyond the defaults, alpha is large so that the window matters (1e-4 barely changes x).
CASES += [
    _lrn_case("defaults-rank4", (1, 5, 2, 3), 3),
    _lrn_case("size2-even-window-rank3", (4, 3, 2), 2, alpha=2.0, beta=0.75, k=1.0),
    _lrn_case("size5-rank4", (2, 6, 2, 2), 5, alpha=1.5, beta=0.5, k=2.0),
    _lrn_case("size4-rank5", (2, 1, 5, 2, 2), 4, alpha=3.0, beta=1.0, k=1.0),
    _lrn_case("size1", (3, 4, 1), 1, alpha=1.0, beta=0.75, k=1.0),
]
