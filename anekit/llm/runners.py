"""Runners: what executes a decoder's blocks and head on compiled programs for ``llm.Model``.

The host does what is cheap and position-dependent: the embedding lookup, the RoPE
tables and masks, writing each chunk's new keys and values into the cache. Everything
else (every block, the output head) runs in the programs of :mod:`anekit.llm.kernels`.

The interface :class:`Runner` (what ``Model`` and anything built on it call)::

    h = runner.blocks(ids, start, key, state)  # every layer on ``ids`` at positions
                                         # start...; writes their new K/V rows into the
                                         # cache of ``state`` (a CacheState: a session's);
                                         # the last residual stream [1, 1, D, T]
    logits = runner.head(h)              # float32 [T, vocab]
    runner.reserve(max_seq, chunk)       # re-plan for another cache size; clears the context
    runner.programs(), runner.compiles, runner.compression, runner.close()

Two runners implement it:

- :class:`ResidentRunner` runs the dynamic-weight programs: one block program per shape
  serves every layer. Each program runs on buffer sets
  (:meth:`anekit.backends.Kernel.buffers`): one per layer, one for the head. A layer's
  weights are written once, at load, into the buffers of the first block program's set;
  every later program's set for that layer binds the same buffers (``share=``).
- :class:`SegmentedRunner` (``compress=``) runs segment programs with the weights
  compiled in (:mod:`anekit.llm.segmented`): one set per segment, holding no weights.

A :class:`CacheState` holds one session's block sets (and so its cache, tables and
residual stream): every session's sets bind the same weight buffers, so weights are held
once however many sessions run (``Model.session()``). The runner's own state, ``cache``,
holds the sets that received the weights at load. Both runners keep the cache of a layer
in its sets, one pair of buffers per cache length, shared
by the programs that read that length; the host writes only each chunk's new rows into
it. The RoPE tables and the mask are written once per step into the first set and bound
by the others. On the ANE a buffer is an IOSurface, so nothing is copied per call but the
residual stream between layers and the new cache rows; the programs are compiled
unpacked (``pack_inputs=False``) so that their surfaces can be shared.

Buffers hold fp16 values in the backend's own form: fp16 on the ANE, float32 on the
reference backend (``hold="fp16"`` keeps them in 2 bytes there and converts them on each
run instead).

The fp32 host residual (:mod:`anekit.llm.host_residual`): where one program cannot hold
the residual stream in fp16, the runner carries it in float32 between programs. After
each program run the runner keeps the kernel's cliff events (values saturated or
replaced: ``Kernel.events``; one kernel serves every layer, so they are read per run) in
``CacheState.cliffs`` for the garbage guard.
"""

from __future__ import annotations

import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from anekit import backends, fp16
from anekit.backends import Buffer, BufferSet, Kernel
from anekit.hw.chips import get_chip
from anekit.llm import kernels as K
from anekit.llm.compressed import plan_segments
from anekit.llm.config import LlmConfig
from anekit.llm.guard import FP16_SATURATION
from anekit.llm.host_residual import check_residual, host_scale, overflow
from anekit.llm.segmented import CompiledIn, SegmentKey
from anekit.llm.source import Parts, TensorSource, fill, head_name, layer_parts
from anekit.mil.program import Program

__all__ = [
    "CacheState",
    "MIN_DECODE_SLOTS",
    "ResidentRunner",
    "Runner",
    "SegmentedRunner",
    "decode_cache",
    "decode_slots",
]

MIN_DECODE_SLOTS = 128  # the smallest cache a decode program reads; larger ones double
ProgramKey = K.BlockKey | K.HeadKey | SegmentKey
Run = tuple[K.BlockKey | SegmentKey, range]  # a program of one step and the layers it runs
Pairs = list[tuple[Buffer, Buffer]]  # (k, v) cache buffers, one pair per layer


@dataclass
class CacheState:
    """One session's block-program buffer sets and the cache buffers in them.

    Attributes:
        block_sets: per program shape, one set per program run of a step.
        caches: per cache length, the first (k, v) buffers made for it, shared by later
            programs of that length.
        cache_of: per program shape, the (k, v) buffers its sets read.
        cache_at: the buffers that hold the context now (None before the first prefill).
    """

    block_sets: dict[K.BlockKey, list[BufferSet]] = field(default_factory=dict)
    caches: dict[int, Pairs] = field(default_factory=dict)
    cache_of: dict[K.BlockKey, Pairs] = field(default_factory=dict)
    cache_at: Pairs | None = None
    cliffs: list[tuple[range, Any]] = field(default_factory=list)  # the last step's events


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


def decode_cache(max_seq: int, pos: int) -> int:
    """The cache length a decode step at position ``pos`` reads (one of :func:`decode_slots`).

    The smallest one longer than ``pos``: its buffers hold the context (positions before
    ``pos``) and take the step's new row at ``pos``.
    """
    return next(s for s in decode_slots(max_seq) if s > pos)


class Runner(ABC):
    """The buffer sets, caches and head of one model on one backend (the module docstring).

    Subclasses say which programs a step runs (:meth:`_runs`), how each is made
    (:meth:`_program`) and where the weights live (:meth:`_hold_layer`, :meth:`_hold_head`).

    Attributes:
        config: the model's config; backend: "ane" or "reference"; chip: the chip's name.
        max_seq, chunk: cache positions and prompt tokens per prefill call (:meth:`reserve`).
        pieces: rows of each piece of the split output head.
    """

    def __init__(
        self,
        config: LlmConfig,
        *,
        backend: str,
        chip: str,
        dtype: type,
        max_seq: int,
        chunk: int,
        compile_options: dict[str, Any] | None = None,
        residual: str = "fp16",
        saturation: float = FP16_SATURATION,
    ) -> None:
        self.config, self.backend, self.chip = config, backend, chip
        self.residual, self.saturation = check_residual(residual), saturation
        self.host = residual == "host"  # the stream between programs is float32 on the host
        self.host_reason: str | None = "residual='host'" if self.host else None
        self.head_cliffs: Any = None  # the head's cliff events of its last run (or None)
        self._compile_options = compile_options or {}  # numerics=, storage= (the reference)
        profile = get_chip(chip)
        self.pieces = K.head_pieces(config.vocab_size, profile.max_dim_channel)
        self._k_multiple = profile.matmul_k_multiple  # programs made for the chip
        self._dtype = dtype
        self._compact = dtype == np.float16
        self._kernels: dict[ProgramKey, Kernel] = {}
        self._head_sets: dict[K.HeadKey, BufferSet] = {}
        self._head_weights: dict[str, Buffer] = {}
        self.cache = CacheState()  # the sets that receive the weights at load
        self.compile_s = 0.0  # seconds spent compiling programs (and compressing their weights)
        self._embed: np.ndarray | None = None  # host rows (untied, or segmented); else the head's
        self._source: TensorSource | None = None  # read once, while the buffers are made
        self.reserve(max_seq, chunk)

    def load(self, source: TensorSource) -> None:
        """Read the weights from ``source`` into the first prefill and head sets (then forget it)."""
        self._source = source
        try:
            self._sets_for(K.BlockKey(self.chunk, self.max_seq), self.cache)
            self._head_set(K.HeadKey(1, self.pieces))
        except BaseException:
            self.close()
            raise
        finally:
            self._source = None

    # -- the interface ----------------------------------------------------------------------------
    def reserve(self, max_seq: int, chunk: int) -> None:
        """Plan for ``max_seq`` cache positions and prefill calls of ``chunk`` tokens; clears
        the context (every later prefill starts at position 0)."""
        self.max_seq, self.chunk = max_seq, chunk
        self.cache.cache_at = None

    def blocks(
        self, ids: Sequence[int], start: int, key: K.BlockKey, state: CacheState
    ) -> np.ndarray:
        """Run every layer on ``ids`` at positions ``start...`` (padded to the key's width).

        Writes the new keys and values into ``state``'s cache; returns the last residual
        stream ``[1, 1, D, T]`` (a view of the last program's output buffer, or with the
        host residual the host's stream as fp16 values at its scale for the head).
        """
        key = replace(key, host=self.host)
        h = self._blocks(ids, start, key, state)
        if self.residual == "auto" and not self.host:
            reason = overflow(self.residuals(key, state), start, len(ids), self.saturation)
            if reason is not None:  # the stream does not fit one program: carry it on the host
                self.host, self.host_reason = True, reason
                warnings.warn(
                    f"{reason}: the residual stream is carried in float32 on the host between "
                    "programs from now on (anekit.llm.host_residual)",
                    RuntimeWarning,
                    stacklevel=3,
                )
                h = self._blocks(ids, start, replace(key, host=True), state)
        return h

    def _blocks(
        self, ids: Sequence[int], start: int, key: K.BlockKey, state: CacheState
    ) -> np.ndarray:
        n, t = len(ids), key.tokens
        sets, runs = self._sets_for(key, state), self._runs(key)
        self._use_cache(key, start, state)
        state.cliffs = []
        padded = np.zeros(t, np.int64)
        padded[:n] = ids
        first = sets[0]
        tables = K.step_tables(self.config, key, start, n)
        written: set[str] = set()
        for bs, (_, layers) in zip(sets, runs):
            # the first set reading a table holds it; every later one that could bind it does
            for name in self._tables(layers):
                if name not in written or name not in bs.shared:
                    bs.write(name, tables[name])
                    written.add(name)
        rows = self._embedding(padded).T[None, None]
        alpha = self.config.residual_scale
        stream = None  # the host residual's float32 stream [D, T], at scale 1
        if key.host:
            stream = np.asarray(rows[0, 0], np.float32) * np.float32(self.config.embed_scale)
        else:
            # the stream is held at alpha * x (llm.residual), Gemma's embeddings times sqrt(dim)
            scale = alpha * self.config.embed_scale
            fp16.cast_into(first.input("x"), rows if scale == 1.0 else rows * np.float32(scale))
        for u, (bs, (_, layers)) in enumerate(zip(sets, runs)):
            if stream is not None:
                s = host_scale(stream, alpha)
                fp16.cast_into(bs.input("x"), (stream * np.float32(s))[None, None])
                bs.input("rescale")[...] = s / alpha  # a power of two: exact in fp16
            elif u:
                np.copyto(bs.input("x"), sets[u - 1].output("y"))
            bs.run()
            events = bs.kernel.events  # of this run: one kernel serves every layer
            if events is not None and (events.saturated or events.replaced):
                state.cliffs.append((layers, events))
            if stream is not None:
                stream += np.asarray(bs.output("d")[0, 0], np.float32) * np.float32(1.0 / alpha)
            for j in range(len(layers)):  # only the chunk's new rows go into the cache, in place
                for kind in "kv":
                    rows = bs.output(self._cache_name(f"{kind}_new", j))[0, :, :n]
                    bs.input(self._cache_name(f"{kind}_cache", j))[0, :, start : start + n] = rows
        if stream is None:
            return sets[-1].output("y")
        out = np.empty((1, 1, *stream.shape), sets[-1].output("d").dtype)
        fp16.cast_into(out, (stream * np.float32(host_scale(stream, alpha)))[None, None])
        return out

    def residuals(self, key: K.BlockKey, state: CacheState) -> list[tuple[range, np.ndarray]]:
        """Each program of a step at ``key``'s shape, in order: the layers it runs and what it
        stored of the residual stream ``[1, 1, D, T]`` (as the last step left it): its output
        stream, or with the host residual what its layers add (``d``)."""
        key = replace(key, host=self.host)
        sets = self._sets_for(key, state)
        name = "d" if key.host else "y"
        return [(layers, bs.output(name)) for bs, (_, layers) in zip(sets, self._runs(key))]

    def head(self, h: np.ndarray) -> np.ndarray:
        """Logits ``[T, V]`` (float32) of a residual stream ``[1, 1, D, T]``."""
        key = K.HeadKey(h.shape[3], self.pieces)
        bs = self._head_set(key)
        np.copyto(bs.input("x"), h)
        kernel = self._kernels[key]
        kernel.run(bs)
        self.head_cliffs = kernel.events
        rows = [bs.output(f"logits{j}")[0, 0] for j in range(len(self.pieces))]
        return np.concatenate(rows, axis=0).T.astype(np.float32)

    @property
    def compiles(self) -> int:
        """Programs compiled so far (each once, shared by every layer it serves)."""
        return len(self._kernels)

    @property
    def compression(self) -> dict[str, Any]:
        """The report of each compressed program, by name (empty when nothing is compressed)."""
        return {}

    def programs(self) -> list[Program]:
        """The programs compiled so far, in order."""
        return [kernel.program for kernel in self._kernels.values()]

    def kernels(self) -> list[Kernel]:
        """The kernels compiled so far, in order (where each program runs: ``/health``)."""
        return list(self._kernels.values())

    def close(self) -> None:
        """Release every compiled kernel (and so the buffers of the weights and cache)."""
        for kernel in self._kernels.values():
            kernel.close()
        self._kernels = {}
        self._head_sets, self.cache = {}, CacheState()
        self._head_weights = {}

    # -- what a subclass says ---------------------------------------------------------------------
    @abstractmethod
    def _runs(self, key: K.BlockKey) -> list[Run]:
        """The programs one step at ``key``'s shape runs, in order, and the layers of each."""

    @abstractmethod
    def _program(self, key: ProgramKey) -> Program:
        """The program compiled for ``key``."""

    def _cache_name(self, name: str, j: int) -> str:
        """A program's cache input or new rows (``k_cache``, ``k_new``, ...) of its layer ``j``."""
        return name

    def _layer_share(self, layers: range) -> dict[str, Buffer]:
        """Buffers the set running ``layers`` binds besides caches and tables (its weights)."""
        return {}

    @abstractmethod
    def _hold_layer(self, layers: range, bs: BufferSet) -> None:
        """Put the weights of ``layers`` into ``bs`` when the set holds them."""

    @abstractmethod
    def _hold_head(self, bs: BufferSet) -> None:
        """Put the head's weights into its first set when the set holds them."""

    # -- shared machinery -------------------------------------------------------------------------
    def _kernel(self, key: ProgramKey) -> Kernel:
        kernel = self._kernels.get(key)
        if kernel is None:
            begin = time.perf_counter()
            options = backends.capabilities(self.backend).shared_buffer_options  # sets bind
            options = {**options, **self._compile_options}
            program = self._program(key)
            kernel = self._kernels[key] = backends.compile(program, self.backend, **options)
            self.compile_s += time.perf_counter() - begin
        return kernel

    def _sets_for(self, key: K.BlockKey, state: CacheState) -> list[BufferSet]:
        """One buffer set per program run of a step at ``key``'s shape, made once per state.

        Sets bind the weights a subclass shares, the cache buffers of their cache length if
        another program made them, and (after the first) the first set's tables. A buffer
        a program cannot bind (its model lays the tensor out otherwise) gets its own
        memory: tables are then written into it each step, and the cache rows moved when
        this program takes over the context (see ``_use_cache``).
        """
        sets = state.block_sets.get(key)
        if sets is not None:
            return sets
        caches = state.caches.get(key.cache)
        sets, pairs = [], []
        tables: dict[str, Buffer] = {}  # each table's buffer in the first set reading it
        for program, layers in self._runs(key):
            share = self._layer_share(layers)
            for j, i in enumerate(layers):
                if caches is not None:
                    share[self._cache_name("k_cache", j)] = caches[i][0]
                    share[self._cache_name("v_cache", j)] = caches[i][1]
            names = self._tables(layers)
            share.update({n: tables[n] for n in names if n in tables})
            bs = self._kernel(program).buffers(share, compact=self._compact, strict=False)
            for n in names:
                tables.setdefault(n, bs.buffer(n))
            self._hold_layer(layers, bs)
            for j in range(len(layers)):
                names = self._cache_name("k_cache", j), self._cache_name("v_cache", j)
                pairs.append((bs.buffer(names[0]), bs.buffer(names[1])))
            sets.append(bs)
        state.cache_of[key] = pairs
        state.caches.setdefault(key.cache, pairs)
        state.block_sets[key] = sets
        return sets

    def _head_set(self, key: K.HeadKey) -> BufferSet:
        """The head program's buffer set; the first one receives the head weights."""
        bs = self._head_sets.get(key)
        if bs is not None:
            return bs
        bs = self._kernel(key).buffers(self._head_weights, compact=self._compact, strict=False)
        for name, home in self._head_weights.items():
            if name not in bs.shared:
                np.copyto(bs.input(name), home.array)  # a layout this program cannot bind
        if not self._head_weights:
            self._hold_head(bs)
        self._head_sets[key] = bs
        return bs

    def _tables(self, layers: range) -> list[str]:
        """The tables the program running ``layers`` reads (a local layer's are its own)."""
        local = {i in self.config.local_layers for i in layers}
        return [n for flag in sorted(local) for n in K.table_names(flag)]

    def _fill(self, out: np.ndarray, parts: Parts) -> None:
        """Write the named tensors into ``out`` (a buffer's view; see ``source.fill``)."""
        assert self._source is not None, "weights are read only while loading"
        fill(self._source, out, parts)

    def _embedding(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``[T, D]`` of the embedding (a tied model's are the head's weight buffers)."""
        if self._embed is not None:
            return self._embed[ids]
        bounds = np.cumsum((0, *self.pieces))
        pieces = [self._head_weights[f"w{j}"].array[0, 0] for j in range(len(self.pieces))]
        rows = np.empty((len(ids), self.config.dim), pieces[0].dtype)
        for piece, lo, hi in zip(pieces, bounds, bounds[1:]):
            inside = (ids >= lo) & (ids < hi)
            rows[inside] = piece[ids[inside] - lo]
        return rows

    def _use_cache(self, key: K.BlockKey, start: int, state: CacheState) -> None:
        """Make ``key``'s cache buffers hold the context (its first ``start`` rows).

        Programs of one cache length share their buffers; one of another length (or one
        that could not bind them) has its own, and taking over the context copies the rows
        once (a decode step moving to the next longer cache: once per doubling).
        """
        target, home = state.cache_of[key], state.cache_at
        if home is not None and start > 0:
            for (k_from, v_from), (k_to, v_to) in zip(home, target):
                if k_to.memory is not k_from.memory:
                    k_to.array[0, :, :start] = k_from.array[0, :, :start]
                if v_to.memory is not v_from.memory:
                    v_to.array[0, :, :start] = v_from.array[0, :, :start]
        state.cache_at = target


class ResidentRunner(Runner):
    """The dynamic-weight programs: one block program per shape for every layer, the weights
    resident in each layer's buffer set."""

    def __init__(self, config: LlmConfig, source: TensorSource, **options: Any) -> None:
        super().__init__(config, **options)
        self._weights: list[dict[str, Buffer]] = []  # per layer, bound into every block set
        self.load(source)

    def close(self) -> None:
        super().close()
        self._weights = []

    def _runs(self, key: K.BlockKey) -> list[Run]:
        return [
            (K.layer_key(self.config, key, i), range(i, i + 1)) for i in range(self.config.n_layers)
        ]

    def _program(self, key: ProgramKey) -> Program:
        if isinstance(key, K.BlockKey):
            return K.block_program(self.config, key, self._k_multiple)
        assert isinstance(key, K.HeadKey)
        return K.head_program(self.config, key)

    def _layer_share(self, layers: range) -> dict[str, Buffer]:
        return dict(self._weights[layers.start]) if layers.start < len(self._weights) else {}

    def _hold_layer(self, layers: range, bs: BufferSet) -> None:
        """Layer ``i``'s weights: read into the first set of the layer, copied into a later set
        that could not bind the first set's."""
        i = layers.start
        if len(self._weights) == i:  # the first block program: its sets hold the weights
            for name, parts in layer_parts(self.config, i).items():
                self._fill(bs.input(name), parts)
            self._weights.append({n: bs.buffer(n) for n in K.block_weight_shapes(self.config)})
        for name, home in self._weights[i].items():
            if name not in bs.shared and bs.buffer(name) is not home:
                np.copyto(bs.input(name), home.array)  # a layout this program cannot bind

    def _hold_head(self, bs: BufferSet) -> None:
        """Read the final norm and the head's weights into ``bs`` (and an untied embedding)."""
        c = self.config
        self._fill(bs.input("norm"), [("model.norm.weight", (c.dim,))])
        if not c.tie_embeddings:
            self._embed = np.empty((c.vocab_size, c.dim), self._dtype)
            self._fill(self._embed, [("model.embed_tokens.weight", (c.vocab_size, c.dim))])
        rows = [(head_name(c), (c.vocab_size, c.dim))]
        if len(self.pieces) == 1:
            self._fill(bs.input("w0"), rows)
        else:  # pieces of one tensor: staged whole once, then split
            whole = np.empty((c.vocab_size, c.dim), bs.input("w0").dtype)
            self._fill(whole, rows)
            bounds = np.cumsum((0, *self.pieces))
            for j, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
                np.copyto(bs.input(f"w{j}")[0, 0], whole[lo:hi])
            del whole
        names = ["norm", *(f"w{j}" for j in range(len(self.pieces)))]
        self._head_weights = {n: bs.buffer(n) for n in names}


class SegmentedRunner(Runner):
    """Segment programs of several layers with their weights compiled in (and compressed by
    ``scheme``); their sets hold caches and tables only."""

    def __init__(
        self,
        config: LlmConfig,
        source: TensorSource,
        *,
        scheme: str,
        calibration: list[int] | None,
        states: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        self.scheme = scheme
        self._segments: list[range] = []
        self.packed: CompiledIn | None = None  # the host weights, once read
        super().__init__(config, **options)
        try:
            self.packed = CompiledIn(
                config,
                source,
                scheme=scheme,
                chip=self.chip,
                dtype=self._dtype,
                pieces=self.pieces,
                calibration=calibration,
                dense=self._kernel,
                states=states,
            )
        except BaseException:
            self.close()
            raise
        self._embed = self.packed.embed
        self.load(source)

    def reserve(self, max_seq: int, chunk: int) -> None:
        widths = 1 + len(decode_slots(max_seq))  # the prefill chunk and every decode bucket
        self._segments = plan_segments(self.config, self.scheme, widths)
        super().reserve(max_seq, chunk)

    @property
    def compression(self) -> dict[str, Any]:
        return {} if self.packed is None else self.packed.reports

    def close(self) -> None:
        super().close()
        if self.packed is not None:
            self.packed.release()

    def _runs(self, key: K.BlockKey) -> list[Run]:
        return [(SegmentKey(layers, key), layers) for layers in self._segments]

    def _cache_name(self, name: str, j: int) -> str:
        return f"{name}{j}"  # a segment numbers its layers' caches

    def _program(self, key: ProgramKey) -> Program:
        assert self.packed is not None, "programs are made after the weights are read"
        if isinstance(key, SegmentKey):
            return self.packed.segment_program(key)
        if isinstance(key, K.BlockKey):  # W8A8's calibration runs the dense block program
            return K.block_program(self.config, key, self._k_multiple)
        assert isinstance(key, K.HeadKey)
        return self.packed.head_program(key, K.BlockKey(self.chunk, self.max_seq))

    def _hold_layer(self, layers: range, bs: BufferSet) -> None:
        """Nothing: a segment's weights are compiled into its program."""

    def _hold_head(self, bs: BufferSet) -> None:
        """Nothing: the head's weights are compiled into its program."""
