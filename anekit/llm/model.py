"""``Model``: a loaded decoder running its blocks as compiled kernels over resident buffer sets.

The host does what is cheap and position-dependent: the embedding lookup, the RoPE
tables and masks, writing each chunk's new keys and values into the cache, and
sampling. Everything else (every block, the output head) runs in the programs of
:mod:`anekit.llm.kernels`, compiled once per shape and shared by all layers.

Each program runs on buffer sets (:meth:`anekit.backends.Kernel.buffers`): one per layer
for a block program, one for the head. A layer's weights are written once, at load,
into the buffers of the first block program's set, and every later program's set for
that layer binds the same buffers (``share=``); the cache of a layer lives in its sets
too, one pair of buffers per cache length, shared by the programs that read that
length, and the host writes only each chunk's new rows into it. The RoPE tables and
the mask are written once per step into layer 0's set and bound by the others. On the
ANE a buffer is an IOSurface, so nothing is copied per call but the residual stream
between layers and the new cache rows; the block programs are compiled unpacked
(``pack_inputs=False``) so that their surfaces can be shared.

Buffers hold fp16 values in the backend's own form: fp16 on the ANE, float32 on the
reference backend (its storage model; ``hold="fp16"`` keeps them in 2 bytes there and
converts them on each run instead).

With ``compress=`` the layers run as segment programs with their weights compiled in
(:mod:`anekit.llm.segmented`): a step runs one set per segment instead of one per layer,
the sets hold no weights, and the caches and tables are bound as above.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit import backends, fp16
from anekit.backends import Buffer, BufferSet, Kernel
from anekit.errors import UsageError
from anekit.llm import kernels as K
from anekit.llm.compressed import check_scheme, plan_segments
from anekit.llm.config import LlmConfig
from anekit.llm.sampling import Sampler, Sampling
from anekit.llm.segmented import CompiledIn, SegmentKey
from anekit.llm.source import Parts, TensorSource, check_shapes, fill, head_name, layer_parts

__all__ = ["GenerationStats", "Model", "TensorSource", "decode_cache", "decode_slots"]

DEFAULT_MAX_SEQ = 1024  # cache slots when neither the caller nor a smaller model limit says
DEFAULT_CHUNK = 64  # prompt tokens per prefill call
MIN_DECODE_SLOTS = 128  # the smallest cache a decode program reads; larger ones double
HOLD = {"fp16": np.float16, "fp32": np.float32}  # host form of weights and cache
# Backend options of every program: ANE surfaces can be bound into several requests only
# when each input has its own (packing puts all inputs into one surface).
COMPILE_OPTIONS: dict[str, dict[str, Any]] = {"ane": {"pack_inputs": False}}
TABLES = ("cos", "sin", "mask")  # block inputs that depend on the step, not on the layer


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


def decode_cache(max_seq: int, pos: int) -> int:
    """The cache length a decode step at position ``pos`` reads (one of :func:`decode_slots`).

    The smallest one longer than ``pos``: its buffers hold the context (positions before
    ``pos``) and take the step's new row at ``pos``.
    """
    return next(s for s in decode_slots(max_seq) if s > pos)


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

        check_shapes(config, source)  # before any buffer is made
        self.config = config
        self.tokenizer = tokenizer
        self.backend = backends.resolve_backend(backend)
        self.chip = get_chip(chip or default_chip()[0]).name
        limit = get_chip(self.chip).max_dim_channel
        self._k_multiple = get_chip(self.chip).matmul_k_multiple  # programs made for the chip
        if chunk < 1:
            raise UsageError(f"chunk must be at least 1, found {chunk}")
        self._chunk = chunk
        if hold is None:
            hold = "fp32" if self.backend == "reference" else "fp16"
        if hold not in HOLD:
            raise UsageError(f"hold must be one of {sorted(HOLD)}, found {hold!r}")
        self._dtype = HOLD[hold]
        self._compact = hold == "fp16"
        self.compress = None if compress is None else check_scheme(compress)
        self._segments: list[range] = []  # with compress: the layers of each segment
        self._packed: CompiledIn | None = None  # with compress: the host weights
        self._kernels: dict[K.BlockKey | K.HeadKey | SegmentKey, Kernel] = {}
        self._block_sets: dict[K.BlockKey, list[BufferSet]] = {}
        self._head_sets: dict[K.HeadKey, BufferSet] = {}
        self._weights: list[dict[str, Buffer]] = []  # per layer, bound into every block set
        self._head_weights: dict[str, Buffer] = {}
        self._caches: dict[int, list[tuple[Buffer, Buffer]]] = {}  # cache length -> per layer
        self._cache_of: dict[K.BlockKey, list[tuple[Buffer, Buffer]]] = {}  # each program's
        self._cache_at: list[tuple[Buffer, Buffer]] | None = None  # the buffers with the context
        self._embed: np.ndarray | None = None  # host rows (untied, or compress); else the head's
        self.stats = GenerationStats()
        self.reserve(max_seq or min(config.max_position, DEFAULT_MAX_SEQ))
        self._pieces = K.head_pieces(config.vocab_size, limit)
        self._source: TensorSource | None = source  # read once, while the buffers are made
        try:
            if self.compress is not None:
                self._packed = CompiledIn(
                    config,
                    source,
                    scheme=self.compress,
                    chip=self.chip,
                    dtype=self._dtype,
                    pieces=self._pieces,
                    calibration=None if calibration is None else self._tokens(calibration),
                    dense=self._kernel,
                )
                self._embed = self._packed.embed
            self._sets_for(K.BlockKey(self.chunk, self.max_seq))
            self._head_set(K.HeadKey(1, self._pieces))
        except BaseException:
            self.close()
            raise
        finally:
            self._source = None

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
        widths = 1 + len(decode_slots(max_seq))  # the prefill chunk and every decode bucket
        self._segments = plan_segments(c, self.compress, widths) if self.compress else []
        self.max_seq = max_seq
        self.chunk = min(self._chunk, max_seq)
        self._cache_at = None  # every later prefill starts at position 0

    # -- kernels and their buffer sets ----------------------------------------------------------
    @property
    def compiles(self) -> int:
        """Programs compiled so far for this model (each once, shared by every layer)."""
        return len(self._kernels)

    @property
    def compression(self) -> dict[str, Any]:
        """The report of each compressed program, by name (empty without ``compress``)."""
        return {} if self._packed is None else self._packed.reports

    def programs(self) -> list[Any]:
        """The programs compiled so far, in order (with ``compress``: their weights as stored)."""
        return [kernel.program for kernel in self._kernels.values()]

    def _kernel(self, key: K.BlockKey | K.HeadKey | SegmentKey) -> Kernel:
        kernel = self._kernels.get(key)
        if kernel is None:
            if isinstance(key, K.BlockKey):  # also W8A8's calibration with compress
                program = K.block_program(self.config, key, self._k_multiple)
            elif isinstance(key, SegmentKey):
                assert self._packed is not None
                program = self._packed.segment_program(key)
            elif self._packed is not None:
                program = self._packed.head_program(key, K.BlockKey(self.chunk, self.max_seq))
            else:
                program = K.head_program(self.config, key)
            options = COMPILE_OPTIONS.get(self.backend, {})
            kernel = self._kernels[key] = backends.compile(program, self.backend, **options)
        return kernel

    def _runs(self, key: K.BlockKey) -> list[tuple[K.BlockKey | SegmentKey, range]]:
        """The programs one step at ``key``'s shape runs, in order, and the layers of each:
        the block program once per layer, or (with ``compress``) each segment program."""
        if self._segments:
            return [(SegmentKey(layers, key), layers) for layers in self._segments]
        return [(key, range(i, i + 1)) for i in range(self.config.n_layers)]

    def _cache_name(self, name: str, j: int) -> str:
        """A program's cache input or new rows (``k_cache``, ``k_new``, ...) of its layer ``j``:
        a segment numbers them per layer, the block program has one layer."""
        return f"{name}{j}" if self._segments else name

    def _sets_for(self, key: K.BlockKey) -> list[BufferSet]:
        """One buffer set per program run of a step at ``key``'s shape, made once.

        The first block program's sets receive the weights (read from the source now);
        later ones bind them, and the cache buffers of their cache length if another
        program made them. Sets after the first bind its tables. A buffer a program cannot
        bind (its model lays the tensor out otherwise) gets its own memory: weights are
        then copied into it once, tables written into it each step, and the cache rows
        moved when this program takes over the context (see ``_use_cache``). Segment
        programs hold their weights themselves: their sets bind caches and tables only.
        """
        sets = self._block_sets.get(key)
        if sets is not None:
            return sets
        caches = self._caches.get(key.cache)
        sets, pairs = [], []
        for program, layers in self._runs(key):
            share: dict[str, Buffer] = {}
            if not self._segments and layers.start < len(self._weights):
                share.update(self._weights[layers.start])
            for j, i in enumerate(layers):
                if caches is not None:
                    share[self._cache_name("k_cache", j)] = caches[i][0]
                    share[self._cache_name("v_cache", j)] = caches[i][1]
            if sets:
                share.update({n: sets[0].buffer(n) for n in TABLES})
            bs = self._kernel(program).buffers(share, compact=self._compact, strict=False)
            if not self._segments:
                self._hold_weights(layers.start, bs)
            for j in range(len(layers)):
                names = self._cache_name("k_cache", j), self._cache_name("v_cache", j)
                pairs.append((bs.buffer(names[0]), bs.buffer(names[1])))
            sets.append(bs)
        self._cache_of[key] = pairs
        self._caches.setdefault(key.cache, pairs)
        self._block_sets[key] = sets
        return sets

    def _hold_weights(self, i: int, bs: BufferSet) -> None:
        """Put layer ``i``'s weights into ``bs``: read them if it is the first set of the layer,
        copy them where it could not bind the first set's."""
        if len(self._weights) == i:  # the first block program: its sets hold the weights
            for name, parts in layer_parts(self.config, i).items():
                self._fill(bs.input(name), parts)
            self._weights.append({n: bs.buffer(n) for n in K.block_weight_shapes(self.config)})
        for name, home in self._weights[i].items():
            if name not in bs.shared and bs.buffer(name) is not home:
                np.copyto(bs.input(name), home.array)  # a layout this program cannot bind

    def _fill(self, out: np.ndarray, parts: Parts) -> None:
        """Write the named tensors into ``out`` (a buffer's view; see ``source.fill``)."""
        assert self._source is not None, "weights are read only while loading"
        fill(self._source, out, parts)

    def _head_set(self, key: K.HeadKey) -> BufferSet:
        """The head program's buffer set; the first one receives the head weights."""
        bs = self._head_sets.get(key)
        if bs is not None:
            return bs
        bs = self._kernel(key).buffers(self._head_weights, compact=self._compact, strict=False)
        for name, home in self._head_weights.items():
            if name not in bs.shared:
                np.copyto(bs.input(name), home.array)  # a layout this program cannot bind
        if not self._head_weights and self._packed is None:
            self._hold_head(bs)
        self._head_sets[key] = bs
        return bs

    def _hold_head(self, bs: BufferSet) -> None:
        """Read the final norm and the head's weights into ``bs`` (and an untied embedding)."""
        c = self.config
        self._fill(bs.input("norm"), [("model.norm.weight", (c.dim,))])
        if not c.tie_embeddings:
            self._embed = np.empty((c.vocab_size, c.dim), self._dtype)
            self._fill(self._embed, [("model.embed_tokens.weight", (c.vocab_size, c.dim))])
        rows = [(head_name(c), (c.vocab_size, c.dim))]
        if len(self._pieces) == 1:
            self._fill(bs.input("w0"), rows)
        else:  # pieces of one tensor: staged whole once, then split
            whole = np.empty((c.vocab_size, c.dim), bs.input("w0").dtype)
            self._fill(whole, rows)
            bounds = np.cumsum((0, *self._pieces))
            for j, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
                np.copyto(bs.input(f"w{j}")[0, 0], whole[lo:hi])
            del whole
        names = ["norm", *(f"w{j}" for j in range(len(self._pieces)))]
        self._head_weights = {n: bs.buffer(n) for n in names}

    def _embedding(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``[T, D]`` of the embedding (a tied model's are the head's weight buffers)."""
        if self._embed is not None:
            return self._embed[ids]
        bounds = np.cumsum((0, *self._pieces))
        pieces = [self._head_weights[f"w{j}"].array[0, 0] for j in range(len(self._pieces))]
        rows = np.empty((len(ids), self.config.dim), pieces[0].dtype)
        for piece, lo, hi in zip(pieces, bounds, bounds[1:]):
            inside = (ids >= lo) & (ids < hi)
            rows[inside] = piece[ids[inside] - lo]
        return rows

    def _use_cache(self, key: K.BlockKey, start: int) -> None:
        """Make ``key``'s cache buffers hold the context (its first ``start`` rows).

        Programs of one cache length share their buffers; one of another length (or one
        that could not bind them) has its own, and taking over the context copies the rows
        once (a decode step moving to the next longer cache: once per doubling).
        """
        target, home = self._cache_of[key], self._cache_at
        if home is not None and start > 0:
            for (k_from, v_from), (k_to, v_to) in zip(home, target):
                if k_to.memory is not k_from.memory:
                    k_to.array[0, :, :start] = k_from.array[0, :, :start]
                if v_to.memory is not v_from.memory:
                    v_to.array[0, :, :start] = v_from.array[0, :, :start]
        self._cache_at = target

    # -- forward ------------------------------------------------------------------------------
    def _blocks(self, ids: Sequence[int], start: int, key: K.BlockKey) -> np.ndarray:
        """Run every block on ``ids`` at positions ``start...`` (padded to the key's width).

        Writes the new keys and values into the cache; returns the last residual stream
        ``[1, 1, D, T]`` (a view of the last layer's output buffer).
        """
        n, t = len(ids), key.tokens
        sets, runs = self._sets_for(key), self._runs(key)
        self._use_cache(key, start)
        padded = np.zeros(t, np.int64)
        padded[:n] = ids
        first = sets[0]
        cos, sin = K.rope_tables(self.config, start, t)
        tables = {"cos": cos, "sin": sin, "mask": K.attention_mask(self.config, key, start, n)}
        for bs in sets:  # the first set's tables are bound by every set that could bind them
            for name, value in tables.items():
                if bs is first or name not in bs.shared:
                    bs.write(name, value)
        fp16.cast_into(first.input("x"), self._embedding(padded).T[None, None])
        for u, (bs, (_, layers)) in enumerate(zip(sets, runs)):
            if u:
                np.copyto(bs.input("x"), sets[u - 1].output("y"))
            bs.run()
            for j in range(len(layers)):  # only the chunk's new rows go into the cache, in place
                for kind in "kv":
                    rows = bs.output(self._cache_name(f"{kind}_new", j))[0, :, :n]
                    bs.input(self._cache_name(f"{kind}_cache", j))[0, :, start : start + n] = rows
        return sets[-1].output("y")

    def _head_logits(self, h: np.ndarray) -> np.ndarray:
        """Logits ``[T, V]`` (float32) of a residual stream ``[1, 1, D, T]``."""
        key = K.HeadKey(h.shape[3], self._pieces)
        bs = self._head_set(key)
        np.copyto(bs.input("x"), h)
        self._kernels[key].run(bs)
        rows = [bs.output(f"logits{j}")[0, 0] for j in range(len(self._pieces))]
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
        h = self._blocks([token], pos, K.BlockKey(1, decode_cache(self.max_seq, pos)))
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

    def _tokens(self, ids: Sequence[int], what: str = "calibration") -> list[int]:
        """``ids`` as ints: at least one, each in the vocabulary (else UsageError naming ``what``)."""
        ids = [int(t) for t in ids]
        if not ids:
            raise UsageError(f"{what} has no tokens; give at least one (e.g. the BOS token)")
        bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
        if bad:
            raise UsageError(
                f"{what}: token ids {bad[:5]} are outside the vocabulary "
                f"[0, {self.config.vocab_size})"
            )
        return ids

    def _check_ids(self, ids: Sequence[int], new_tokens: int) -> list[int]:
        ids = self._tokens(ids, "the prompt")
        if len(ids) + new_tokens > self.max_seq:
            raise UsageError(
                f"{len(ids)} prompt tokens + {new_tokens} new ones exceed the cache of "
                f"{self.max_seq} positions (load with a larger max_seq, or reserve())"
            )
        return ids

    # -- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Release every compiled kernel (and so the buffers of the weights and cache)."""
        for kernel in self._kernels.values():
            kernel.close()
        self._kernels = {}
        self._block_sets, self._head_sets, self._caches, self._cache_of = {}, {}, {}, {}
        self._weights, self._head_weights = [], {}
        if self._packed is not None:
            self._packed.release()

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
