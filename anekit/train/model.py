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
from anekit.nn.kernels import QKV_WEIGHTS, KernelDef, block_kernels, stacked_columns
from anekit.nn.layers import query_rows_by_token, rope_swap
from anekit.train import functional as F
from anekit.train.config import ModelConfig
from anekit.train.params import Params

TRAIN_KERNELS = ("attention_forward", "ffn_forward", "attention_backward", "ffn_backward")
FORWARD_KERNELS = ("attention_forward", "ffn_forward")
_WEIGHTS = {
    "attention_forward": (*QKV_WEIGHTS, "wo"),
    "attention_backward": (*QKV_WEIGHTS, "wo"),
    "ffn_forward": ("w1", "w3", "w2"),
    "ffn_backward": ("w1", "w3", "w2"),
}
_GAIN = {"attention_forward": "attn_norm", "ffn_forward": "ffn_norm"}
_ATTENTION_TAPS = ("q_rows", "k_cols", "v_cols", "a_rows")


def compile_kernel(kd: KernelDef, backend: str | None) -> Kernel:
    """Compile one generated kernel; on the ANE in an isolated worker (the compile budget, ANE_NOTES 2.4)."""
    name = backends.resolve_backend(backend)
    return backends.compile(kd.program, backend=name, isolate=name == "ane")


@dataclass
class Trace:
    """What a forward pass keeps for the backward pass."""

    inputs: np.ndarray  # [N] token ids
    blocks: list[dict[str, np.ndarray]] = field(default_factory=list)  # per layer
    h: np.ndarray | None = None  # final residual stream [D, N], fp32
    rstd: np.ndarray | None = None  # final RMSNorm [1, N]
    hn: np.ndarray | None = None  # normalised final stream [D, N]


class Model:
    """A Llama-style decoder running its blocks on ``backend`` (compiled once, here)."""

    def __init__(
        self, cfg: ModelConfig, batch: int, backend: str | None = None, *, training: bool = True
    ) -> None:
        self.cfg = cfg
        self.shape = cfg.block(batch)
        self.defs = block_kernels(self.shape, TRAIN_KERNELS if training else FORWARD_KERNELS)
        start = time.perf_counter()
        self.kernels: dict[str, Kernel] = {}
        try:
            for name, kd in self.defs.items():
                self.kernels[name] = compile_kernel(kd, backend)
        except BaseException:
            self.close()
            raise
        self.compile_seconds = time.perf_counter() - start
        self.backend = next(iter(self.kernels.values())).backend
        self._inputs = [
            {name: kd.input.empty() for name, kd in self.defs.items()} for _ in range(cfg.n_layers)
        ]
        self._swap_q = rope_swap(cfg.n_heads, cfg.head_dim)
        self._swap_k = rope_swap(cfg.n_kv_heads, cfg.head_dim)

    # -- weights ------------------------------------------------------------------------------
    def load(self, params: Params) -> None:
        """Copy the current weights (as fp16) into every layer's packed kernel inputs."""
        for i, buffers in enumerate(self._inputs):
            layer = params.layer(i)
            layer["wq_s"] = layer["wq"][:, self._swap_q]
            layer["wk_s"] = layer["wk"][:, self._swap_k]
            for name, buf in buffers.items():
                pk = self.defs[name].input
                for w in _WEIGHTS[name]:
                    pk.write(buf, w, layer[w])
                if name in _GAIN:
                    pk.write(buf, "gain", layer[_GAIN[name]][:, None])

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
            block: dict[str, np.ndarray] = {"x_att": h}
            block["att"] = self._run(i, "attention_forward", x=h)
            h = h + self.defs["attention_forward"].output.split(block["att"])["o"]
            block["x_ffn"] = h
            block["ffn"] = self._run(i, "ffn_forward", x=h)
            h = h + self.defs["ffn_forward"].output.split(block["ffn"])["f"]
            trace.blocks.append(block)
        trace.h = h
        trace.hn, trace.rstd = F.rmsnorm(h, params["final_norm"], self.cfg.norm_eps)
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
        dh, dgain = F.rmsnorm_backward(
            embed.T @ dlogits.T, trace.h, trace.rstd, params["final_norm"]
        )
        grads["final_norm"] += dgain
        for i in reversed(range(self.cfg.n_layers)):
            dh = self._block_backward(i, params, grads, trace.blocks[i], dh)
        F.scatter_rows(trace.inputs, dh.T, grads["embed"])
        return loss

    def _block_backward(
        self, i: int, params: Params, grads: Params, block: dict[str, np.ndarray], dh: np.ndarray
    ) -> np.ndarray:
        """Layer ``i`` backward: ``dh`` is the gradient of the block's output; returns its input's."""
        p = f"layers.{i}."
        # SwiGLU FFN: out = x_ffn + f, so the gradient of f is dh
        ffn = self.defs["ffn_forward"].output.split(block["ffn"])
        out = self._run(i, "ffn_backward", dy=dh, h1=ffn["h1"], h3=ffn["h3"])
        bwd = _fp32(self.defs["ffn_backward"].output.split(out), "dxn", "dh1", "dh3")
        fwd = _fp32(ffn, "u", "xn", "rstd")
        grads[p + "w2"] += dh @ fwd["u"].T
        grads[p + "w1"] += fwd["xn"] @ bwd["dh1"].T
        grads[p + "w3"] += fwd["xn"] @ bwd["dh3"].T
        dh = dh + self._norm_backward(
            p + "ffn_norm", params, grads, bwd["dxn"], block["x_ffn"], fwd["rstd"]
        )
        # attention: x_ffn = x_att + o, so the gradient of o is dh
        att = self.defs["attention_forward"].output.split(block["att"])
        out = self._run(i, "attention_backward", dy=dh, **{t: att[t] for t in _ATTENTION_TAPS})
        bwd = _fp32(self.defs["attention_backward"].output.split(out), "dxn", "dproj")
        fwd = _fp32(att, "xn", "rstd")
        grads[p + "wo"] += dh @ query_rows_by_token(att["a_rows"], self.shape).astype(np.float32)
        dw = fwd["xn"] @ bwd["dproj"].T  # the gradient of the stacked [wq wk wv wq_s wk_s]
        col = stacked_columns(self.shape)
        # RoPE's swapped copies fold back into wq and wk
        grads[p + "wq"] += dw[:, col["wq"]] + dw[:, col["wq_s"]][:, self._swap_q]
        grads[p + "wk"] += dw[:, col["wk"]] + dw[:, col["wk_s"]][:, self._swap_k]
        grads[p + "wv"] += dw[:, col["wv"]]
        return dh + self._norm_backward(
            p + "attn_norm", params, grads, bwd["dxn"], block["x_att"], fwd["rstd"]
        )

    @staticmethod
    def _norm_backward(
        name: str, params: Params, grads: Params, dxn: np.ndarray, x: np.ndarray, rstd: np.ndarray
    ) -> np.ndarray:
        dx, dgain = F.rmsnorm_backward(dxn, x, rstd, params[name])
        grads[name] += dgain
        return dx

    def predicted_ane_seconds(self, chip: str) -> float | None:
        """The cost model's ANE time of one micro-batch (every kernel, every layer); None without it.

        CPU work (embedding, norms, classifier, weight gradients, optimizer) is not included.
        """
        try:
            from anekit.hw import estimate
        except ImportError:
            return None
        per_layer = sum(estimate(kd.program, chip).seconds for kd in self.defs.values())
        return per_layer * self.cfg.n_layers

    # -- plumbing -----------------------------------------------------------------------------
    def _run(self, layer: int, kernel: str, **fields: np.ndarray) -> np.ndarray:
        buf = self._inputs[layer][kernel]
        pk = self.defs[kernel].input
        for name, array in fields.items():
            pk.write(buf, name, array)
        return self.kernels[kernel](x=buf)["y"]

    def close(self) -> None:
        """Release every compiled kernel."""
        for k in self.kernels.values():
            k.close()
        self.kernels = {}

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fp32(parts: dict[str, np.ndarray], *names: str) -> dict[str, np.ndarray]:
    return {k: parts[k].astype(np.float32) for k in names}
