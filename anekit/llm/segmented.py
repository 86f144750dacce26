"""The weights of a model loaded with ``compress=``, compiled into segment programs.

:mod:`anekit.llm.compressed` says why the layers then run as segments (programs of
several layers with their weights compiled in) and plans them. This module holds what
such a model needs on the host: every weight, read once from the source, since each
segment is compiled again for every token width it reaches (the prefill chunk and each
decode cache bucket); and each program's compression, encoded once per program name
(``anekit.compression.CompressState``), so that every width decodes the same weights.

W8A8 calibration measures the activations of the uncompressed model on the calibration
ids: the dynamic-weight block program, called per layer with these host weights (as
arrays, no buffer set) on a fresh, empty cache; the model's own cache is not touched.
The segment programs themselves run on the model's resident buffer sets (their caches
shared per cache length, as the block programs' are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from anekit.backends import Kernel
from anekit.hw.chips import get_chip
from anekit.llm import kernels as K
from anekit.llm.compressed import FP16, MIN_ELEMENTS
from anekit.llm.config import LlmConfig
from anekit.llm.source import TensorSource, head_name, layer_parts, stacked
from anekit.mil.program import Program

Streams = tuple[list[np.ndarray], dict[str, np.ndarray]]  # residual streams, tables and mask


@dataclass(frozen=True)
class SegmentKey:
    """Which segment program: its ``layers``, compiled for the block shape ``block``."""

    layers: range
    block: K.BlockKey


class CompiledIn:
    """Host weights of a compressed model and the programs they are compiled into.

    Attributes:
        layers: per layer, each block weight (named as the block program's inputs).
        embed: the embedding ``[V, D]``; head: the head's pieces ``[1, 1, V_j, D]``.
        reports: the ``anekit.compress`` report of each compressed program, by name.
        states: each program name's ``CompressState`` (encodings and W8A8 steps).
    """

    def __init__(
        self,
        config: LlmConfig,
        source: TensorSource,
        *,
        scheme: str,
        chip: str,
        dtype: type,
        pieces: Sequence[int],
        calibration: list[int] | None,
        dense: Callable[[K.BlockKey], Kernel],
        states: dict[str, Any] | None = None,
    ) -> None:
        """``dense`` gives the dynamic-weight block kernel of a shape (W8A8 calibration only);
        ``states``: compression states saved before (``anekit.llm.saved``), reused as they are."""
        c = self.config = config
        self.scheme, self.chip, self.dtype = scheme, chip, dtype
        self._calibration = calibration
        self._dense = dense
        shapes = K.block_weight_shapes(c)
        self.layers = []
        for i in range(c.n_layers):
            parts = layer_parts(c, i)
            self.layers.append({n: stacked(source, s, parts[n], dtype) for n, s in shapes.items()})
        d, v = c.dim, c.vocab_size
        self.embed = stacked(source, (v, d), [("model.embed_tokens.weight", (v, d))], dtype)
        self.final_norm = stacked(source, (1, 1, d, 1), [("model.norm.weight", (d,))], dtype)
        head = self.embed
        if not c.tie_embeddings:
            head = stacked(source, (v, d), [(head_name(c), (v, d))], dtype)
        bounds = np.cumsum((0, *pieces))
        self.head = [head[lo:hi][None, None] for lo, hi in zip(bounds, bounds[1:])]
        self.reports: dict[str, Any] = {}
        self.states: dict[str, Any] = dict(states or {})
        self._streams: dict[K.BlockKey, Streams] = {}

    def segment_program(self, key: SegmentKey) -> Program:
        """The program of the segment ``key.layers`` at ``key.block``'s shape, compressed."""
        layers = [self.layers[i] for i in key.layers]
        k_multiple = get_chip(self.chip).matmul_k_multiple
        program = K.segment_program(self.config, key.block, layers, key.layers.start, k_multiple)
        name = f"layers {key.layers.start}-{key.layers.stop - 1}"
        return self._compressed(name, program, lambda: self._segment_samples(key))

    def head_program(self, key: K.HeadKey, prefill: K.BlockKey) -> Program:
        """The head with its weights compiled in; ``prefill``: the shape W8A8 calibrates at."""
        program = K.head_constants_program(self.config, key, self.final_norm, self.head)
        return self._compressed("head", program, lambda: self._head_samples(key, prefill))

    def release(self) -> None:
        """Drop the host weights (the reports stay)."""
        self.layers, self.head, self._streams = [], [], {}

    def _compressed(self, name: str, program: Program, samples: Callable[[], Any]) -> Program:
        """``program`` compressed by the scheme (weights encoded once per program name)."""
        if self.scheme == FP16:
            return program
        from anekit.compression import CompressState, compress_with_report

        state = self.states.setdefault(name, CompressState())
        result = compress_with_report(
            program,
            self.scheme,
            chip=self.chip,
            calibration=samples() if self.scheme == "w8a8" and not state.steps else None,
            min_elements=MIN_ELEMENTS,
            measure=False,
            state=state,
        )
        self.reports.setdefault(name, result.report)
        return result.program

    # -- W8A8 calibration: activations of the uncompressed model -------------------------------
    def _dense_streams(self, key: K.BlockKey) -> Streams:
        """The residual stream entering every layer, and after the last, on the calibration ids."""
        found = self._streams.get(key)
        if found is None:
            c = self.config
            ids = self._calibration
            if ids is None:  # no calibration text: seeded random tokens
                ids = np.random.default_rng(0).integers(0, c.vocab_size, key.tokens).tolist()
            x, shared = self._stream_inputs(ids[: key.tokens], key)
            empty = np.zeros((1, c.n_kv_heads, key.cache, c.head_dim), self.dtype)
            xs = [x]
            for i, weights in enumerate(self.layers):
                layer = K.layer_key(c, key, i)
                tables = {n: shared[n] for n in K.table_names(layer.local)}
                inputs = {"x": x, **tables, "k_cache": empty, "v_cache": empty, **weights}
                out = self._dense(layer)(**inputs)  # arrays of fp16 values
                x = out["y"]
                xs.append(x)
            found = self._streams[key] = (xs, shared)
        return found

    def _stream_inputs(
        self, ids: list[int], key: K.BlockKey
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The embedded ``ids`` ``[1, 1, D, T]`` (padded) and the tables and mask at position 0."""
        padded = np.zeros(key.tokens, np.int64)
        padded[: len(ids)] = ids
        c = self.config
        x = np.ascontiguousarray(self.embed[padded].T)[None, None]
        scale = c.residual_scale * c.embed_scale  # as the runner feeds the stream
        x = x if scale == 1.0 else (x * np.float32(scale)).astype(np.float16).astype(self.dtype)
        held = K.step_tables(c, key, 0, len(ids))
        return x, {n: a.astype(np.float16).astype(self.dtype) for n, a in held.items()}

    def _segment_samples(self, key: SegmentKey) -> list[dict[str, np.ndarray]]:
        xs, shared = self._dense_streams(replace(key.block, host=False))
        c = self.config
        empty = np.zeros((1, c.n_kv_heads, key.block.cache, c.head_dim), self.dtype)
        caches = {f"{n}{j}": empty for j in range(len(key.layers)) for n in ("k_cache", "v_cache")}
        tables = {n: shared[n] for i in key.layers for n in K.table_names(i in c.local_layers)}
        if key.block.host:  # the host residual's form, at the scale the stream has here
            tables["rescale"] = np.ones((1, 1, 1, 1), self.dtype)
        return [{"x": xs[key.layers.start], **tables, **caches}]

    def _head_samples(self, key: K.HeadKey, prefill: K.BlockKey) -> list[dict[str, np.ndarray]]:
        xs, _ = self._dense_streams(replace(prefill, host=False))
        return [{"x": xs[-1][..., : key.tokens]}]
