"""The decoder whose blocks run as compiled kernels; embedding, residuals, norms, classifier on the CPU.

Four kernels (``anekit.nn.kernels``) are compiled once and shared by every layer and
every step; each layer keeps its own packed fp16 inputs, whose weight columns are
refreshed after each optimizer update (:meth:`Model.load`). The CPU keeps the
residual stream and all gradients in fp32.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from anekit import backends
from anekit.backends import Kernel
from anekit.nn.cpu import rmsnorm, rmsnorm_backward
from anekit.nn.kernels import HALVES, block_kernels, kernel_weights
from anekit.train import functional as F
from anekit.train.config import ModelConfig
from anekit.train.params import Params

FORWARD_KERNELS = tuple(half.forward for half in HALVES)
TRAIN_KERNELS = FORWARD_KERNELS + tuple(half.backward for half in HALVES)


def training_bytes(cfg: ModelConfig, batch: int) -> dict[str, int]:
    """A lower bound on the memory a training step of ``batch`` sequences holds, by part (bytes).

    Counted are only arrays whose size follows from the config alone; kernel outputs, the
    backend's buffers and NumPy temporaries come on top.
    """
    tokens = batch * cfg.seq_len
    return {
        # fp32 parameters, gradients, AdamW's two moments and its update scratch
        "parameters, gradients and AdamW state": 5 * 4 * cfg.n_params(),
        # fp32 logits [N, V] and the softmax gradient computed from them
        "logits and their gradient": 2 * 4 * tokens * cfg.vocab_size,
        # per layer: both halves keep their fp32 input [D, N] for the backward pass, and the
        # four kernels' packed fp16 inputs hold at least D x N each
        "activations and kernel inputs": cfg.n_layers * tokens * cfg.dim * (2 * 4 + 4 * 2),
    }


@dataclass
class Trace:
    """What a forward pass keeps for the backward pass."""

    inputs: np.ndarray  # [N] token ids
    # per layer and block half: (its input, the residual stream [D, N]; its forward kernel's output)
    blocks: list[dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=list)
    h: np.ndarray | None = None  # final residual stream [D, N], fp32
    rstd: np.ndarray | None = None  # final RMSNorm [1, N]
    hn: np.ndarray | None = None  # normalised final stream [D, N]


class Model:
    """A Llama-style decoder running its blocks on ``backend`` (compiled once, here)."""

    def __init__(
        self,
        cfg: ModelConfig,
        batch: int,
        backend: str | None = None,
        *,
        training: bool = True,
        chip: str | None = None,
        numerics: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.chip = chip
        self.shape = cfg.block(batch)
        # with a chip, the kernels are made for it and checked before anything is compiled
        names = TRAIN_KERNELS if training else FORWARD_KERNELS
        self.defs = block_kernels(self.shape, names, chip=chip)
        start = time.perf_counter()
        self.kernels: dict[str, Kernel] = {}
        options = {} if numerics is None else {"numerics": numerics}  # a reference option
        try:
            for name, kd in self.defs.items():
                # the backend decides whether kernels need a worker (the ANE's compile budget)
                self.kernels[name] = backends.compile(
                    kd.program, backend=backend, isolate="auto", **options
                )
        except BaseException:
            self.close()
            raise
        self.compile_seconds = time.perf_counter() - start
        # values the golden model saturated or replaced since the trainer last reset it
        self.overflows = 0
        self.backend = next(iter(self.kernels.values())).backend
        self._inputs = [
            {name: kd.input.empty() for name, kd in self.defs.items()} for _ in range(cfg.n_layers)
        ]

    # -- weights ------------------------------------------------------------------------------
    def load(self, params: Params) -> None:
        """Copy the current weights (as fp16) into every layer's packed kernel inputs."""
        for i, buffers in enumerate(self._inputs):
            weights = kernel_weights(self.shape, params.layer(i))
            for name, buf in buffers.items():
                self.defs[name].input.pack(buf, **weights[name])

    # -- forward ------------------------------------------------------------------------------
    def forward(self, params: Params, tokens: np.ndarray) -> Trace:
        """Run the decoder on ``tokens [batch, seq]``; returns the trace the backward pass needs."""
        s = self.shape
        if tokens.shape != (s.batch, s.seq):
            raise ValueError(
                f"expected tokens of shape [{s.batch}, {s.seq}], found {list(tokens.shape)}"
            )
        trace = Trace(inputs=tokens.reshape(-1))
        h = np.ascontiguousarray(params["embed"][trace.inputs].T)
        for i in range(self.cfg.n_layers):
            block = {}
            for half in HALVES:
                out = self._run(i, half.forward, x=h)
                block[half.forward] = (h, out)
                h = h + self.defs[half.forward].output.split(out)[half.residual]
            trace.blocks.append(block)
        trace.h = h
        trace.hn, trace.rstd = rmsnorm(h, params["final_norm"], self.cfg.norm_eps)
        return trace

    def logits(self, params: Params, trace: Trace) -> np.ndarray:
        """Classifier output ``[N, V]``: the final stream times the (tied) embedding."""
        return trace.hn.T @ params["embed"].T

    # -- backward -----------------------------------------------------------------------------
    def loss_and_grads(
        self, params: Params, grads: Params, tokens: np.ndarray, grad_scale: float = 1.0
    ) -> float:
        """Forward and backward on ``tokens [batch, seq + 1]``; adds ``grad_scale * dloss`` to ``grads``.

        The loss is the mean next-token cross-entropy. ``grad_scale`` carries the loss
        scale (so fp16 kernel gradients do not underflow) and any averaging over
        accumulated micro-batches. Returns the (unscaled) loss.
        """
        trace = self.forward(params, tokens[:, :-1])
        targets = tokens[:, 1:].reshape(-1)
        loss, dlogits = F.cross_entropy(self.logits(params, trace), targets)
        dlogits[np.arange(len(targets)), targets] -= 1.0
        dlogits *= np.float32(grad_scale / len(targets))
        embed = params["embed"]
        grads["embed"] += dlogits.T @ trace.hn.T
        dh, dgain = rmsnorm_backward(embed.T @ dlogits.T, trace.h, trace.rstd, params["final_norm"])
        grads["final_norm"] += dgain
        for i in reversed(range(self.cfg.n_layers)):
            dh = self._block_backward(i, params, grads, trace.blocks[i], dh)
        F.scatter_rows(trace.inputs, dh.T, grads["embed"])
        return loss

    def _block_backward(
        self, i: int, params: Params, grads: Params, block: dict, dh: np.ndarray
    ) -> np.ndarray:
        """Layer ``i`` backward: ``dh`` is the gradient of the block's output; returns its input's."""
        p = f"layers.{i}."
        for half in reversed(HALVES):
            # out = x + residual(x), so dh is also the gradient of the half's residual output
            x, out = block[half.forward]
            fwd = self.defs[half.forward].output.split(out)
            bwd = self._run(i, half.backward, **half.backward_inputs(fwd, dh))
            bwd_parts = self.defs[half.backward].output.split(bwd)
            dx, layer_grads = half.gradients(
                self.shape, fwd, bwd_parts, dh, x, params[p + half.norm]
            )
            for name, g in layer_grads.items():
                grads[p + name] += g
            dh = dh + dx
        return dh

    def predicted_ane_seconds(self, chip: str) -> float | None:
        """The cost model's ANE time of one micro-batch (every kernel, every layer); None without it.

        CPU work (embedding, norms, classifier, weight gradients, optimizer) is not included:
        :func:`anekit.train.cost.estimate_step` predicts the whole step.
        """
        try:
            from anekit.train.cost import kernel_seconds
        except ImportError:
            return None
        per_layer = sum(kernel_seconds(self.cfg, chip, batch=self.shape.batch).values())
        return per_layer * self.cfg.n_layers

    # -- plumbing -----------------------------------------------------------------------------
    def _run(self, layer: int, kernel: str, **fields: np.ndarray) -> np.ndarray:
        buf = self._inputs[layer][kernel]
        pk = self.defs[kernel].input
        for name, array in fields.items():
            pk.write(buf, name, array)
        k = self.kernels[kernel]
        y = k(x=buf)["y"]
        events = k.events  # the engine returns no NaN (N8): its overflows show only here
        if events is not None:
            self.overflows += events.saturated + events.replaced
        return y

    def close(self) -> None:
        """Release every compiled kernel."""
        for k in self.kernels.values():
            k.close()
        self.kernels = {}

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
