"""``Model``: a loaded decoder running its blocks as compiled kernels, with a host-side KV cache.

The host does what is cheap and position-dependent: the embedding lookup, the RoPE
tables and masks, writing each chunk's new keys and values into the cache, and
sampling. Everything else (every block, the output head) runs in the programs of
:mod:`anekit.llm.kernels`, compiled once per shape and shared by all layers.

Weights and the cache are held in the form the backend computes on: fp16 arrays for
the ANE, and float32 arrays holding fp16 values for the reference backend (its own
storage model: fp16 values held as float32, so nothing is converted per call; this
doubles the host bytes of the weights there, the footprint of a float32 model).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from anekit import backends
from anekit.backends import Kernel
from anekit.errors import UsageError
from anekit.llm import kernels as K
from anekit.llm.compressed import FP16, MIN_ELEMENTS, check_scheme, plan_segments
from anekit.llm.config import LlmConfig
from anekit.llm.sampling import Sampler, Sampling

DEFAULT_MAX_SEQ = 1024  # cache slots when neither the caller nor a smaller model limit says
DEFAULT_CHUNK = 64  # prompt tokens per prefill call
MIN_DECODE_SLOTS = 128  # the smallest cache a decode program reads; larger ones double
HOLD = {"fp16": np.float16, "fp32": np.float32}  # host form of weights and cache


class TensorSource(Protocol):
    """Where a model's tensors come from, by Hugging Face name, as fp16."""

    def __contains__(self, name: str) -> bool: ...

    def read_into(self, name: str, shape: tuple[int, ...], out: np.ndarray) -> None:
        """Write the tensor (checked to have ``shape``) into the flat ``out`` as fp16 values."""
        ...


@dataclass(frozen=True)
class SegmentKey:
    """Which segment program: its ``layers``, compiled for the block shape ``block``."""

    layers: range
    block: K.BlockKey


@dataclass
class GenerationStats:
    """Timings of the last ``generate``/``stream`` call (seconds, wall clock on this backend)."""

    prompt_tokens: int = 0
    new_tokens: int = 0
    first_token_s: float = 0.0  # from the call to the first token: prefill and one head
    prefill_s: float = 0.0  # the prompt's blocks and head
    decode_s: float = 0.0  # every later token: one decode step and one head each

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        steps = max(self.new_tokens - 1, 0)
        return steps / self.decode_s if self.decode_s > 0 else 0.0


def decode_slots(max_seq: int) -> tuple[int, ...]:
    """Cache lengths that decode programs are compiled for: 128, 256, ... and ``max_seq``.

    A decode step reads the smallest cache that holds every position so far, so an
    early token does not pay for attention over the whole context.
    """
    sizes, s = [], MIN_DECODE_SLOTS
    while s < max_seq:
        sizes.append(s)
        s *= 2
    return (*sizes, max_seq)


class Model:
    """A decoder-only language model on a backend; see :func:`anekit.llm.load`.

    Attributes:
        config: the model's :class:`~anekit.llm.config.LlmConfig`.
        tokenizer: its tokenizer (``encode``/``decode``), or None when the directory has none.
        backend: "ane" or "reference".
        chip: the chip profile whose dimension limit splits the head (and that ``cost`` uses).
        max_seq: cache slots: prompt plus generated tokens must fit.
        chunk: prompt tokens per prefill call.
        hold: host form of the weights and cache: "fp16" (the file's bytes) or "fp32"
            (fp16 values held as float32, the reference backend's compute form; the
            default there, as it converts nothing per call). Default: "fp16" elsewhere.
        stats: timings of the last generation (:class:`GenerationStats`).
        compress: the weight compression (``anekit.llm.compressed``: a scheme, or "fp16"
            for weights compiled in uncompressed), or None for the dynamic-weight kernels.
        compression: the report of each compressed program (segment or head), by name,
            as each is first compiled.
    """

    def __init__(
        self,
        config: LlmConfig,
        source: TensorSource,
        *,
        tokenizer: Any = None,
        backend: str | None = None,
        chip: str | None = None,
        max_seq: int | None = None,
        chunk: int = DEFAULT_CHUNK,
        hold: str | None = None,
        compress: str | None = None,
        calibration: Sequence[int] | None = None,
    ) -> None:
        from anekit.hw.chips import default_chip, get_chip

        self.config = config
        self.tokenizer = tokenizer
        self.backend = backends.resolve_backend(backend)
        self.chip = get_chip(chip or default_chip()[0]).name
        limit = get_chip(self.chip).max_dim_channel
        if chunk < 1:
            raise UsageError(f"chunk must be at least 1, found {chunk}")
        self._chunk = chunk
        if hold is None:
            hold = "fp32" if self.backend == "reference" else "fp16"
        if hold not in HOLD:
            raise UsageError(f"hold must be one of {sorted(HOLD)}, found {hold!r}")
        self._dtype = HOLD[hold]
        self._kernels: dict[K.BlockKey | K.HeadKey | SegmentKey, Kernel] = {}
        self.stats = GenerationStats()
        self.compress = None if compress is None else check_scheme(compress)
        self.compression: dict[str, Any] = {}
        self._calibration_ids = None if calibration is None else [int(t) for t in calibration]
        self._states: dict[str, Any] = {}  # program name -> anekit.compress.CompressState
        self._streams: dict[K.BlockKey, tuple[list[np.ndarray], dict[str, np.ndarray]]] = {}
        self._load(source, limit)
        self.reserve(max_seq or min(config.max_position, DEFAULT_MAX_SEQ))

    def reserve(self, max_seq: int) -> None:
        """Size the KV cache for ``max_seq`` positions (prompt plus new tokens); clears it.

        Beyond the model's trained context (``config.max_position``) only a model with a
        sliding window may go: its attention never reaches further back than the window.
        """
        c = self.config
        if max_seq < 2:
            raise UsageError(f"max_seq must be at least 2, found {max_seq}")
        if max_seq > c.max_position and c.sliding_window is None:
            raise UsageError(
                f"max_seq {max_seq} exceeds the model's context of {c.max_position} positions"
            )
        self.max_seq = max_seq
        self.chunk = min(self._chunk, max_seq)
        kv = (1, c.n_kv_heads, max_seq, c.head_dim)
        self._k = [np.zeros(kv, self._dtype) for _ in range(c.n_layers)]
        self._v = [np.zeros(kv, self._dtype) for _ in range(c.n_layers)]
        self._slots = decode_slots(max_seq)
        widths = 1 + len(self._slots)  # the prefill chunk and every decode bucket
        self._segments = plan_segments(c, self.compress, widths) if self.compress else []

    # -- weights ------------------------------------------------------------------------------
    def _load(self, src: TensorSource, limit: int) -> None:
        c = self.config
        shapes = K.block_weight_shapes(c)
        self._layers = [self._layer(src, i, shapes) for i in range(c.n_layers)]
        d, v = c.dim, c.vocab_size
        self._embed = self._stack(src, (v, d), [("model.embed_tokens.weight", (v, d))])
        self._final_norm = self._stack(src, (1, 1, d, 1), [("model.norm.weight", (d,))])
        head = self._embed
        if not c.tie_embeddings:
            head = self._stack(src, (v, d), [("lm_head.weight", (v, d))])
        self._pieces = K.head_pieces(v, limit)
        bounds = np.cumsum((0, *self._pieces))
        self._head = {
            f"w{j}": head[lo:hi][None, None] for j, (lo, hi) in enumerate(zip(bounds, bounds[1:]))
        }

    def _layer(
        self, src: TensorSource, i: int, shapes: dict[str, tuple[int, ...]]
    ) -> dict[str, np.ndarray]:
        c = self.config
        p = f"model.layers.{i}."
        d, q, kv, f, hd = c.dim, c.q_dim, c.kv_dim, c.hidden_dim, c.head_dim
        att = p + "self_attn."
        parts: dict[str, list[tuple[str, tuple[int, ...]]]] = {
            "attn_norm": [(p + "input_layernorm.weight", (d,))],
            "wqkv": [(att + "q_proj.weight", (q, d)), (att + "k_proj.weight", (kv, d)),
                     (att + "v_proj.weight", (kv, d))],
            "bqkv": [(att + "q_proj.bias", (q,)), (att + "k_proj.bias", (kv,)), (att + "v_proj.bias", (kv,))],
            "q_norm": [(att + "q_norm.weight", (hd,))],
            "k_norm": [(att + "k_norm.weight", (hd,))],
            "wo": [(att + "o_proj.weight", (d, q))],
            "bo": [(att + "o_proj.bias", (d,))],
            "ffn_norm": [(p + "post_attention_layernorm.weight", (d,))],
            "w13": [(p + "mlp.gate_proj.weight", (f, d)), (p + "mlp.up_proj.weight", (f, d))],
            "w2": [(p + "mlp.down_proj.weight", (d, f))],
        }  # fmt: skip
        return {name: self._stack(src, shape, parts[name]) for name, shape in shapes.items()}

    def _stack(
        self, src: TensorSource, shape: tuple[int, ...], parts: list[tuple[str, tuple[int, ...]]]
    ) -> np.ndarray:
        """One host array of ``shape`` holding the named tensors' elements one after another."""
        out = np.empty(shape, self._dtype)
        flat = out.reshape(-1)
        at = 0
        for name, part_shape in parts:
            size = int(np.prod(part_shape))
            src.read_into(name, part_shape, flat[at : at + size])
            at += size
        return out

    # -- kernels ------------------------------------------------------------------------------
    @property
    def compiles(self) -> int:
        """Programs compiled so far for this model (each once, shared by every layer)."""
        return len(self._kernels)

    def programs(self) -> list[Any]:
        """The programs compiled so far, in order (with ``compress``: their weights as stored)."""
        return [kernel.program for kernel in self._kernels.values()]

    def _kernel(self, key: K.BlockKey | K.HeadKey | SegmentKey) -> Kernel:
        kernel = self._kernels.get(key)
        if kernel is None:
            if isinstance(key, K.BlockKey):
                program = K.block_program(self.config, key)
            elif isinstance(key, SegmentKey):
                program = self._segment_program(key)
            elif self.compress:
                program = self._head_constants(key)
            else:
                program = K.head_program(self.config, key)
            kernel = self._kernels[key] = backends.compile(program, backend=self.backend)
        return kernel

    def _segment_program(self, key: SegmentKey) -> Any:
        layers = [self._layers[i] for i in key.layers]
        program = K.segment_program(self.config, key.block, layers, key.layers.start)
        name = f"layers {key.layers.start}-{key.layers.stop - 1}"
        return self._compressed(name, program, lambda: self._segment_samples(key))

    def _head_constants(self, key: K.HeadKey) -> Any:
        pieces = [self._head[f"w{j}"] for j in range(len(key.pieces))]
        program = K.head_constants_program(self.config, key, self._final_norm, pieces)
        return self._compressed("head", program, lambda: self._head_samples(key))

    def _compressed(self, name: str, program: Any, samples: Any) -> Any:
        """``program`` compressed by this model's scheme (weights encoded once per program name)."""
        if self.compress == FP16:
            return program
        from anekit.compress import CompressState, compress_with_report

        state = self._states.setdefault(name, CompressState())
        result = compress_with_report(
            program,
            self.compress,
            chip=self.chip,
            calibration=samples() if self.compress == "w8a8" and not state.steps else None,
            min_elements=MIN_ELEMENTS,
            measure=False,
            state=state,
        )
        self.compression.setdefault(name, result.report)
        return result.program

    # -- W8A8 calibration: activations of the uncompressed model -------------------------------
    def _dense_streams(self, key: K.BlockKey) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        """The residual stream entering every layer, and after the last, on the calibration ids.

        Runs the dynamic-weight fp16 kernels on a fresh, empty cache (the model's own cache
        is not touched).
        """
        found = self._streams.get(key)
        if found is None:
            ids = self._calibration_ids
            if ids is None:  # no calibration text: seeded random tokens
                rng = np.random.default_rng(0)
                ids = rng.integers(0, self.config.vocab_size, key.tokens).tolist()
            ids = self._check_ids(ids[: key.tokens], 0)
            x, shared = self._stream_inputs(ids, 0, key)
            empty = np.zeros((1, self.config.n_kv_heads, key.cache, self.config.head_dim))
            caches = {"k_cache": empty.astype(self._dtype), "v_cache": empty.astype(self._dtype)}
            xs = [x]
            for weights in self._layers:
                x = self._call(key, {"x": x, **shared, **caches, **weights})["y"]
                xs.append(x)
            found = self._streams[key] = (xs, shared)
        return found

    def _segment_samples(self, key: SegmentKey) -> list[dict[str, np.ndarray]]:
        xs, shared = self._dense_streams(key.block)
        c = self.config
        empty = np.zeros((1, c.n_kv_heads, key.block.cache, c.head_dim), self._dtype)
        caches = {f"{n}{j}": empty for j in range(len(key.layers)) for n in ("k_cache", "v_cache")}
        return [{"x": xs[key.layers.start], **shared, **caches}]

    def _head_samples(self, key: K.HeadKey) -> list[dict[str, np.ndarray]]:
        chunk = min(self.chunk, self.max_seq)
        xs, _ = self._dense_streams(K.BlockKey(chunk, self.max_seq))
        return [{"x": xs[-1][..., : key.tokens]}]

    def _call(
        self, key: K.BlockKey | K.HeadKey | SegmentKey, inputs: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        kernel = self._kernel(key)
        if self.backend == "reference":
            # our arrays have the programs' shapes by construction and hold fp16 values
            # (as fp16, or as float32: the reference backend's own held form): no re-validation
            return kernel.evaluate(inputs)
        return kernel(**inputs)

    def _host(self, a: np.ndarray) -> np.ndarray:
        """An array rounded to fp16 and held in the backend's form."""
        return a.astype(np.float16).astype(self._dtype, copy=False)

    # -- forward ------------------------------------------------------------------------------
    def _stream_inputs(
        self, ids: Sequence[int], start: int, key: K.BlockKey
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The embedded tokens ``x`` (padded to the key's width) and the RoPE tables and mask."""
        n, t = len(ids), key.tokens
        padded = np.zeros(t, np.int64)
        padded[:n] = ids
        x = np.ascontiguousarray(self._embed[padded].T)[None, None]
        cos, sin = K.rope_tables(self.config, start, t)
        shared = {
            "cos": self._host(cos),
            "sin": self._host(sin),
            "mask": self._host(K.attention_mask(self.config, key, start, n)),
        }
        return x, shared

    def _blocks(self, ids: Sequence[int], start: int, key: K.BlockKey) -> np.ndarray:
        """Run every block on ``ids`` at positions ``start...`` (padded to the key's width).

        Writes the new keys and values into the cache; returns the last residual stream
        ``[1, 1, D, T]``.
        """
        n = len(ids)
        x, shared = self._stream_inputs(ids, start, key)
        s = key.cache
        if self._segments:
            return self._segment_blocks(x, shared, key, start, n)
        for i, weights in enumerate(self._layers):
            k_cache, v_cache = self._k[i], self._v[i]
            out = self._call(
                key,
                {
                    "x": x,
                    **shared,
                    "k_cache": k_cache[:, :, :s],
                    "v_cache": v_cache[:, :, :s],
                    **weights,
                },
            )
            k_cache[0, :, start : start + n] = out["k_new"][0, :, :n]
            v_cache[0, :, start : start + n] = out["v_new"][0, :, :n]
            x = out["y"]
        return x

    def _segment_blocks(
        self, x: np.ndarray, shared: dict[str, np.ndarray], key: K.BlockKey, start: int, n: int
    ) -> np.ndarray:
        """:meth:`_blocks` through the segment programs, their weights compiled in."""
        s = key.cache
        for layers in self._segments:
            caches = {}
            for j, i in enumerate(layers):
                caches[f"k_cache{j}"] = self._k[i][:, :, :s]
                caches[f"v_cache{j}"] = self._v[i][:, :, :s]
            out = self._call(SegmentKey(layers, key), {"x": x, **shared, **caches})
            for j, i in enumerate(layers):
                self._k[i][0, :, start : start + n] = out[f"k_new{j}"][0, :, :n]
                self._v[i][0, :, start : start + n] = out[f"v_new{j}"][0, :, :n]
            x = out["y"]
        return x

    def _head_logits(self, h: np.ndarray) -> np.ndarray:
        """Logits ``[T, V]`` (float32) of a residual stream ``[1, 1, D, T]``."""
        weights = {} if self.compress else {"norm": self._final_norm, **self._head}
        out = self._call(K.HeadKey(h.shape[3], self._pieces), {"x": h, **weights})
        rows = [out[f"logits{j}"][0, 0] for j in range(len(self._pieces))]
        return np.concatenate(rows, axis=0).T.astype(np.float32)

    def _prefill(self, ids: Sequence[int], *, all_logits: bool) -> np.ndarray:
        """Fill the cache with ``ids`` from position 0; logits of every token, or of the last."""
        key = K.BlockKey(self.chunk, self.max_seq)
        rows = []
        for start in range(0, len(ids), self.chunk):
            part = ids[start : start + self.chunk]
            h = self._blocks(part, start, key)
            if all_logits:
                rows.append(self._head_logits(h)[: len(part)])
            elif start + self.chunk >= len(ids):
                rows.append(self._head_logits(h[..., len(part) - 1 : len(part)]))
        return np.concatenate(rows, axis=0)

    def _decode(self, token: int, pos: int) -> np.ndarray:
        """One token at position ``pos`` (the cache holds ``pos`` tokens); its logits ``[V]``."""
        slots = next(s for s in self._slots if s >= pos)
        h = self._blocks([token], pos, K.BlockKey(1, slots))
        return self._head_logits(h)[0]

    # -- public API ---------------------------------------------------------------------------
    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Logits ``float32 [T, vocab]`` of every position of ``ids`` (a full prefill, for evaluation)."""
        ids = self._check_ids(ids, 0)
        return self._prefill(ids, all_logits=True)

    def generate(self, ids: Sequence[int], max_new_tokens: int, **sampling: Any) -> list[int]:
        """The new tokens (not the prompt) continuing ``ids``; keywords as :meth:`stream`."""
        return list(self.stream(ids, max_new_tokens, **sampling))

    def stream(
        self,
        ids: Sequence[int],
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: int = 0,
        stop: int | Iterable[int] | None = None,
    ) -> Iterator[int]:
        """Yield new tokens as they are decoded: prefill once, then one KV-cached step per token.

        Args:
            ids: the prompt's token ids (at least one).
            max_new_tokens: the most tokens to generate.
            temperature, top_k, top_p, repetition_penalty, seed: see :class:`~anekit.llm.sampling.Sampling`.
            stop: token ids that end generation (not yielded); None: the model's EOS tokens.
        """
        sampler = Sampler(Sampling(temperature, top_k, top_p, repetition_penalty, seed))
        if max_new_tokens < 0:
            raise UsageError(f"max_new_tokens must be at least 0, found {max_new_tokens}")
        ids = self._check_ids(ids, max_new_tokens)
        stops = set(
            self.config.eos_token_ids
            if stop is None
            else ([stop] if isinstance(stop, int) else stop)
        )
        return self._stream(ids, max_new_tokens, sampler, stops)

    def _stream(
        self, ids: list[int], limit: int, sampler: Sampler, stops: set[int]
    ) -> Iterator[int]:
        stats = self.stats = GenerationStats(prompt_tokens=len(ids))
        if limit == 0:
            return
        begin = time.perf_counter()
        logits = self._prefill(ids, all_logits=False)[-1]
        stats.prefill_s = time.perf_counter() - begin
        history = list(ids)
        while True:
            token = sampler(logits, history)
            if token in stops:
                return
            if stats.new_tokens == 0:
                stats.first_token_s = time.perf_counter() - begin
            stats.new_tokens += 1
            yield token
            history.append(token)
            if stats.new_tokens == limit:
                return
            step = time.perf_counter()
            logits = self._decode(token, len(history) - 1)
            stats.decode_s += time.perf_counter() - step

    def _check_ids(self, ids: Sequence[int], new_tokens: int) -> list[int]:
        ids = [int(t) for t in ids]
        if not ids:
            raise UsageError("the prompt has no tokens; give at least one (e.g. the BOS token)")
        bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
        if bad:
            raise UsageError(
                f"token ids {bad[:5]} are outside the vocabulary [0, {self.config.vocab_size})"
            )
        if len(ids) + new_tokens > self.max_seq:
            raise UsageError(
                f"{len(ids)} prompt tokens + {new_tokens} new ones exceed the cache of "
                f"{self.max_seq} positions (load with a larger max_seq, or reserve())"
            )
        return ids

    # -- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Release every compiled kernel."""
        for kernel in self._kernels.values():
            kernel.close()
        self._kernels = {}

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        params = c.n_params() / 1e6
        packed = f", compress={self.compress!r}" if self.compress else ""
        return (
            f"<Model {c.architecture} {params:.1f}M params, {c.n_layers} layers, "
            f"backend={self.backend!r}, max_seq={self.max_seq}{packed}, compiles={self.compiles}>"
        )
