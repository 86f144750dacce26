"""Predicted time of one training step of the dynamic-weight recipe (ANE_NOTES section 5).

A step is the four block kernels run once per layer forward and backward on the ANE, costed
by :func:`anekit.hw.cost.estimate_work` (the model ``anekit estimate`` uses), plus the host's
share of the recipe, run one after the other as :class:`anekit.train.model.Model` runs them:

* **kernels**, with the correction the packed input needs: the weight columns of a kernel's
  one input are weights, not activations. They stream from DRAM like the weights the LLM
  kernels take as inputs (:func:`anekit.llm.cost.weights_as_constants`: at the ANE's DRAM
  bandwidth times the fitted streaming efficiency, :func:`anekit.hw.cost.stream_efficiency`, overlapped with the MACs that read
  them), and the ``slice_by_size`` that cuts a field out of the program input is a DMA
  view (a tile's source base address and strides: ``tinygrad-aneregs``), not a copy that
  spills. Without the correction every packed weight moved through the slow activation
  path twice (in, and out and back through the slice) and the prediction was 1.4-1.7x the
  published steps.
* **host GEMMs**: the weight gradients of every layer (``dW = x @ dy^T`` per packed weight,
  RoPE's swapped copies included) and the tied classifier (logits, its weight gradient and
  the gradient of the final stream: three ``N x D x V`` products), at the chip's published
  fp32 matrix rate (``host_fp32_tflops``). The published pipeline runs the weight gradients
  on a background queue while the ANE runs the next kernels (maderix/ANE README: "dW
  gradient sgemms run in parallel with ANE evals"): under ``overlap=True`` (the default,
  the schedule the published figures were measured with) only the part of them longer
  than the kernels adds to the step; ``overlap=False`` is the schedule
  :class:`anekit.train.model.Model` runs today, everything one after the other;
* **host streaming**: the bytes the recipe must move per step at the chip's system DRAM
  bandwidth: one AdamW pass over every parameter (read parameter, gradient and both moments,
  write parameter and moments), zeroing and accumulating the gradients, and repacking each
  layer's weights into the kernels' fp16 inputs. anekit's NumPy optimizer makes about a dozen
  passes where this counts one fused pass (as the published vDSP recipe does), so on a Mac
  anekit's own step is slower than this prediction by that much host traffic.

Published figures: ``anekit/train/published.json`` (each with its source);
``benchmarks/cost_model.py`` prints them beside the predictions.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from anekit.errors import UsageError
from anekit.hw.chips import Chip, get_chip
from anekit.hw.cost import (
    ProgramWork,
    analyze,
    estimate_work,
    input_weight_bytes,
    likely_range,
    padded_bytes,
)
from anekit.hw.kinds import CostKind
from anekit.nn.kernels import HALVES, KernelDef, block_kernels
from anekit.nn.layers import FFN_IN_WEIGHTS, QKV_WEIGHTS
from anekit.train.config import ModelConfig

#: the kernels of a training step, as anekit.train.model.Model compiles them
TRAIN_KERNELS = tuple(h.forward for h in HALVES) + tuple(h.backward for h in HALVES)
#: the packed fields that hold weight matrices (the other fields are activations, taps, gains)
WEIGHT_FIELDS = frozenset((*QKV_WEIGHTS, "wo", *FFN_IN_WEIGHTS, "w2"))
#: host bytes per parameter and step: AdamW reads parameter, gradient, m, v and writes
#: parameter, m, v (7 fp32 passes); the gradient is zeroed, then accumulated into (3 more)
OPTIMIZER_BYTES_PER_PARAM = 10 * 4
#: host bytes per packed weight element and step: read fp32, write fp16
REPACK_BYTES = 4 + 2


@dataclass(frozen=True)
class StepEstimate:
    """Predicted time of one training step (one micro-batch of ``batch`` sequences).

    Attributes:
        chip: chip profile name.
        model: config name.
        tokens: tokens per step (batch x seq).
        kernel_s: each kernel's predicted time per call.
        ane_s: every kernel, every layer (forward and backward).
        dw_flops, dw_s: the weight-gradient products on the CPU.
        classifier_flops, classifier_s: the tied classifier's three products on the CPU.
        host_bytes, host_stream_s: the optimizer, gradient and repacking traffic on the CPU.
        overlap: the weight gradients run beside the kernels (the published schedule).
    """

    chip: str
    model: str
    tokens: int
    kernel_s: dict[str, float]
    ane_s: float
    dw_flops: float
    dw_s: float
    classifier_flops: float
    classifier_s: float
    host_bytes: float
    host_stream_s: float
    overlap: bool = True

    @property
    def seconds(self) -> float:
        dw = max(self.dw_s - self.ane_s, 0.0) if self.overlap else self.dw_s
        return self.ane_s + dw + self.classifier_s + self.host_stream_s

    @property
    def likely_s(self) -> tuple[float, float]:
        """The likely range of :attr:`seconds` (the chip's ``cost.band``)."""
        return likely_range(self.seconds, get_chip(self.chip))

    def record(self) -> dict[str, Any]:
        """A JSON-ready summary (milliseconds)."""
        return {
            "chip": self.chip,
            "model": self.model,
            "tokens": self.tokens,
            "step_ms": round(self.seconds * 1e3, 2),
            "step_ms_likely": [round(t * 1e3, 2) for t in self.likely_s],
            "ane_ms": round(self.ane_s * 1e3, 2),
            "dw_ms": round(self.dw_s * 1e3, 2),
            "classifier_ms": round(self.classifier_s * 1e3, 2),
            "host_stream_ms": round(self.host_stream_s * 1e3, 2),
            "kernel_ms": {k: round(s * 1e3, 3) for k, s in self.kernel_s.items()},
            "overlap": self.overlap,
        }


def host_fp32_flops(chip: Chip) -> float:
    """The chip's published fp32 matrix rate on the CPU (FLOP/s); UsageError where none is."""
    fact = chip.facts.get("host_fp32_tflops")
    if fact is None or fact.value is None:
        raise UsageError(
            f"no published CPU fp32 matrix rate for {chip.name} (host_fp32_tflops in "
            "anekit/hw/data/chips.json): its training step cannot be predicted"
        )
    return float(fact.value) * 1e12


def estimate_step(
    cfg: ModelConfig, chip: str | Chip, *, batch: int = 1, overlap: bool = True
) -> StepEstimate:
    """Predict one training step of ``cfg`` on ``chip`` (see the module docstring)."""
    profile = get_chip(chip)
    gemm_rate = host_fp32_flops(profile)
    shape = cfg.block(batch)
    defs = block_kernels(shape, TRAIN_KERNELS)
    kernel_s = kernel_seconds(cfg, profile, batch=batch)
    n, d, v = shape.tokens, cfg.dim, cfg.vocab_size
    # one dW = x @ dy^T per packed weight column (the backward kernels hold every weight once)
    weight_cols = sum(
        f.width for kd in defs.values() if kd.name.endswith("backward")
        for f in kd.input.fields.values() if f.name in WEIGHT_FIELDS
    )  # fmt: skip
    packed = sum(
        d * f.width for kd in defs.values()
        for f in kd.input.fields.values() if f.name in WEIGHT_FIELDS
    )  # fmt: skip
    dw = cfg.n_layers * 2.0 * n * d * weight_cols
    classifier = 3 * 2.0 * n * d * v
    moved = OPTIMIZER_BYTES_PER_PARAM * cfg.n_params() + cfg.n_layers * REPACK_BYTES * packed
    return StepEstimate(
        chip=profile.name,
        model=cfg.name,
        tokens=n,
        kernel_s=kernel_s,
        ane_s=cfg.n_layers * sum(kernel_s.values()),
        dw_flops=dw,
        dw_s=dw / gemm_rate,
        classifier_flops=classifier,
        classifier_s=classifier / gemm_rate,
        host_bytes=moved,
        host_stream_s=moved / (profile.dram_bw_gbps * 1e9),
        overlap=overlap,
    )


def kernel_seconds(cfg: ModelConfig, chip: str | Chip, *, batch: int = 1) -> dict[str, float]:
    """Each training kernel's predicted time per call on ``chip`` (packed weights as weights)."""
    profile = get_chip(chip)
    defs = block_kernels(cfg.block(batch), TRAIN_KERNELS)
    return {n: estimate_work(packed_work(kd), profile).seconds for n, kd in defs.items()}


def packed_work(kd: KernelDef) -> ProgramWork:
    """A kernel's work with its packed weight columns streamed as weights (see the module doc).

    Each ``slice_by_size`` of the program input becomes free (a view the DMA reads); a slice
    holding only weight fields hands its bytes to the MAC ops that read it, as weights, and
    they leave the input I/O.
    """
    fn = kd.program.main
    work = analyze(kd.program)
    x = fn.inputs[0]
    weights = {}  # id(value) -> bytes, for the slices that carry only weights
    ops = list(work.ops)
    for i, op in enumerate(fn.ops):
        if op.op_type != "slice_by_size" or op.inputs.get("x") is not x:
            continue
        ops[i] = dataclasses.replace(ops[i], kind=CostKind.FREE)
        out = op.outputs[0]
        if _only_weights(kd, int(op.inputs["begin"].const[-1]), int(out.type.shape[-1])):
            weights[id(out)] = input_weight_bytes(padded_bytes(out.type.shape, 2))
    for i, op in enumerate(fn.ops):
        extra = sum(weights.get(id(v), 0.0) for v in op.input_values())
        if extra and ops[i].kind is CostKind.MAC:
            ops[i] = dataclasses.replace(ops[i], weight_bytes=ops[i].weight_bytes + extra)
    io = work.io_bytes - sum(
        kd.input.channels * f.width * 2.0
        for f in kd.input.fields.values()
        if f.name in WEIGHT_FIELDS
    )
    return ProgramWork(tuple(ops), max(io, 0.0), work.host_cast_elements)


def _only_weights(kd: KernelDef, begin: int, width: int) -> bool:
    """Columns ``begin .. begin + width`` of the packed input hold weight fields only."""
    inside = [f for f in kd.input.fields.values()
              if f.offset < begin + width and begin < f.offset + f.width]  # fmt: skip
    return bool(inside) and all(f.name in WEIGHT_FIELDS for f in inside)


def published() -> dict[str, Any]:
    """The published training-step figures (``anekit/train/published.json``)."""
    text = resources.files("anekit.train").joinpath("published.json").read_text("utf-8")
    return json.loads(text)


def compare_published() -> list[dict[str, Any]]:
    """Each published training-step figure beside the prediction for the same shape and chip."""
    from anekit.train.config import get_config

    rows = []
    for fig in published()["figures"]:
        est = estimate_step(get_config(fig["model"]).model, fig["chip"], batch=fig["batch"])
        rows.append(
            {
                "model": fig["model"],
                "chip": fig["chip"],
                "pipeline": fig["pipeline"],
                "published_ms": fig["step_ms"],
                "predicted_ms": round(est.seconds * 1e3, 1),
                "ratio": round(est.seconds * 1e3 / fig["step_ms"], 3),
                "ane_ms": round(est.ane_s * 1e3, 1),
                "dw_ms": round(est.dw_s * 1e3, 1),
                "host_ms": round((est.classifier_s + est.host_stream_s) * 1e3, 1),
                "serial_ms": round(replace(est, overlap=False).seconds * 1e3, 1),
                "source": fig["source"],
            }
        )
    return rows
