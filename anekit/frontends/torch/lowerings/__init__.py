"""The lowering table: each ATen overload the converter handles, declared once.

A lowering is ``fn(ctx, *args, **kwargs)``: ``ctx`` is the converter's
:class:`~anekit.frontends.torch.lower.Lower` (the Builder, the node, shape and
dtype from ``node.meta["val"]``), the arguments are the node's, with each input
node replaced by its MIL value, or by its ``torch.Tensor`` when it is constant.
It returns a MIL value (a tuple for ops with several results). The op-coverage
table in ``docs/torch.md`` is generated from this table (``tools/gen_torch_ops.py``).

An op missing here is a ``ConversionError`` listing every node that needs it, unless
all its inputs are constant: then PyTorch evaluates it during conversion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from anekit.frontends.torch.lowerings import attention, elementwise, linear, norm, shape

aten = torch.ops.aten
_e, _l, _n, _s = elementwise, linear, norm, shape

Lowering = Callable[..., Any]

LOWERINGS: dict[Any, Lowering] = {
    # arithmetic, with broadcasting and Python scalars
    aten.add.Tensor: _e.add,
    aten.add.Scalar: _e.add,
    aten.sub.Tensor: _e.sub,
    aten.sub.Scalar: _e.sub,
    aten.rsub.Scalar: _e.rsub,
    aten.rsub.Tensor: _e.rsub,
    aten.mul.Tensor: _e.mul,
    aten.mul.Scalar: _e.mul,
    aten.div.Tensor: _e.div,
    aten.div.Scalar: _e.div,
    aten.div.Tensor_mode: _e.div,
    aten.pow.Tensor_Scalar: _e.pow_,
    aten.pow.Tensor_Tensor: _e.pow_,
    aten.pow.Scalar: _e.pow_,
    aten.maximum.default: _e.maximum,
    aten.minimum.default: _e.minimum,
    aten.neg.default: _e.neg,
    aten.reciprocal.default: _e.reciprocal,
    aten.rsqrt.default: _e.rsqrt,
    aten.sqrt.default: _e.unary("sqrt"),
    aten.exp.default: _e.unary("exp"),
    aten.log.default: _e.unary("log"),
    aten.abs.default: _e.unary("abs"),
    aten.sign.default: _e.unary("sign"),
    aten.floor.default: _e.unary("floor"),
    aten.ceil.default: _e.unary("ceil"),
    aten.cos.default: _e.unary("cos"),
    aten.sin.default: _e.unary("sin"),
    aten.erf.default: _e.unary("erf"),
    aten.log1p.default: _e.log1p,
    # comparisons and logic
    aten.eq.Tensor: _e.compare("equal"),
    aten.eq.Scalar: _e.compare("equal"),
    aten.ne.Tensor: _e.compare("not_equal"),
    aten.ne.Scalar: _e.compare("not_equal"),
    aten.lt.Tensor: _e.compare("less"),
    aten.lt.Scalar: _e.compare("less"),
    aten.le.Tensor: _e.compare("less_equal"),
    aten.le.Scalar: _e.compare("less_equal"),
    aten.gt.Tensor: _e.compare("greater"),
    aten.gt.Scalar: _e.compare("greater"),
    aten.ge.Tensor: _e.compare("greater_equal"),
    aten.ge.Scalar: _e.compare("greater_equal"),
    aten.logical_and.default: _e.logical("logical_and"),
    aten.logical_or.default: _e.logical("logical_or"),
    aten.bitwise_and.Tensor: _e.logical("logical_and"),
    aten.bitwise_or.Tensor: _e.logical("logical_or"),
    aten.logical_not.default: _e.logical_not,
    aten.bitwise_not.default: _e.logical_not,
    aten.where.self: _e.where,
    aten.masked_fill.Scalar: _e.masked_fill,
    aten.masked_fill.Tensor: _e.masked_fill,
    # activations
    aten.relu.default: _e.unary("relu"),
    aten.sigmoid.default: _e.unary("sigmoid"),
    aten.tanh.default: _e.unary("tanh"),
    aten.silu.default: _e.unary("silu"),
    aten.gelu.default: _e.gelu,
    aten.leaky_relu.default: _e.leaky_relu,
    aten.elu.default: _e.elu,
    aten.hardtanh.default: _e.hardtanh,
    aten.hardsigmoid.default: _e.hardsigmoid,
    aten.hardswish.default: _e.hardswish,
    aten.softplus.default: _e.softplus,
    aten.clamp.default: _e.clamp,
    aten.clamp_min.default: _e.clamp_min,
    aten.clamp_max.default: _e.clamp_max,
    # casts and no-ops at inference
    aten._to_copy.default: _e.to_dtype,
    aten.to.dtype: _e.to_dtype,
    aten.clone.default: _e.same,
    aten.alias.default: _e.same,
    aten.detach.default: _e.same,
    aten.contiguous.default: _e.same,
    aten.lift_fresh_copy.default: _e.same,
    aten.dropout.default: _e.same,
    aten._assert_tensor_metadata.default: _e.nothing,
    aten.zeros_like.default: _e.zeros_like,
    aten.ones_like.default: _e.ones_like,
    aten.full_like.default: _e.full_like,
    aten.new_zeros.default: _e.new_zeros,
    aten.new_ones.default: _e.new_ones,
    aten.new_full.default: _e.new_full,
    aten.sym_size.int: _e.sym_size,
    # matrix products, convolution, pooling
    aten.linear.default: _l.linear,
    aten.addmm.default: _l.addmm,
    aten.mm.default: _l.matmul,
    aten.bmm.default: _l.matmul,
    aten.matmul.default: _l.matmul,
    aten.conv1d.default: _l.conv,
    aten.conv2d.default: _l.conv,
    aten.conv1d.padding: _l.conv,
    aten.conv2d.padding: _l.conv,
    aten.convolution.default: _l.convolution,
    aten.conv_transpose1d.default: _l.conv_transpose,
    aten.conv_transpose2d.input: _l.conv_transpose,
    aten.max_pool2d.default: _l.max_pool2d,
    aten.avg_pool2d.default: _l.avg_pool2d,
    aten.adaptive_avg_pool2d.default: _l.adaptive_avg_pool2d,
    aten.constant_pad_nd.default: _l.pad_constant,
    # normalisation, softmax, reductions
    aten.layer_norm.default: _n.layer_norm,
    aten.batch_norm.default: _n.batch_norm,
    aten._native_batch_norm_legit_no_training.default: _n.batch_norm_eval,
    aten.rms_norm.default: _n.rms_norm,
    aten.group_norm.default: _n.group_norm,
    aten.native_group_norm.default: _n.native_group_norm,
    aten.softmax.int: _n.softmax,
    aten._softmax.default: _n.softmax,
    aten.log_softmax.int: _n.log_softmax,
    aten._log_softmax.default: _n.log_softmax,
    aten.var.correction: _n.var,
    aten.mean.dim: _n.reduction("reduce_mean", needs_float=True),
    aten.mean.default: _n.reduction("reduce_mean", needs_float=True),
    aten.sum.dim_IntList: _n.reduction("reduce_sum"),
    aten.sum.default: _n.reduction("reduce_sum"),
    aten.amax.default: _n.reduction("reduce_max"),
    aten.amin.default: _n.reduction("reduce_min"),
    # attention
    aten.scaled_dot_product_attention.default: attention.sdpa,
    # data movement
    aten.view.default: _s.view,
    aten._unsafe_view.default: _s.view,
    aten.reshape.default: _s.view,
    aten.flatten.using_ints: _s.view,
    aten.unflatten.int: _s.view,
    aten.unsqueeze.default: _s.view,
    aten.squeeze.default: _s.view,
    aten.squeeze.dim: _s.view,
    aten.squeeze.dims: _s.view,
    aten.permute.default: _s.permute,
    aten.transpose.int: _s.transpose,
    aten.t.default: _s.t,
    aten.expand.default: _s.expand,
    aten.repeat.default: _s.repeat,
    aten.slice.Tensor: _s.slice_,
    aten.select.int: _s.select,
    aten.cat.default: _s.cat,
    aten.stack.default: _s.stack,
    aten.split.Tensor: _s.split,
    aten.split_with_sizes.default: _s.split,
    aten.chunk.default: _s.chunk,
    aten.unbind.int: _s.unbind,
    aten.embedding.default: _s.embedding,
    aten.index_select.default: _s.index_select,
    aten.index.Tensor: _s.index,
    aten.flip.default: _s.flip,
}
