"""``anekit.llm`` on resident buffer sets: weights written once, the cache updated in place.

On the ANE path these run against the recording stand-in (``tests/ane_fake.py``), which
evaluates each request with the reference backend on the surfaces it was given: they
prove that the model's buffers are wired right (the same tokens as the reference
backend), and count what the host writes into the surfaces per decode token. They say
nothing about Apple's framework.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

import anekit.backends.ane as ane  # noqa: E402
from anekit import llm  # noqa: E402
from anekit.backends import budget  # noqa: E402
from anekit.errors import UsageError  # noqa: E402
from anekit.llm import kernels as K  # noqa: E402
from anekit.llm import runners  # noqa: E402
from tests.ane_fake import FakeFramework, count_surface_writes  # noqa: E402
from tests.llm_models import Case, save_model  # noqa: E402

PROMPT = [5, 17, 3]
MAX_SEQ, CHUNK, NEW = 16, 8, 12  # decode crosses cache buckets 4 -> 8 -> 16


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qwen2")
    save_model(path, Case("qwen2", "float16", False, 2, "new"))  # untied, GQA, q/k/v biases
    return path


@pytest.fixture(autouse=True)
def small_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runners, "MIN_DECODE_SLOTS", 4)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeFramework:
    """The "ane" backend, available here and compiling against the stand-in."""
    fake = FakeFramework(tmp_path / "T")
    monkeypatch.setattr(budget, "BUDGET", budget.CompileBudget())
    monkeypatch.setattr(ane, "available", lambda: (True, "the recording stand-in"))
    monkeypatch.setattr(ane, "compile", functools.partial(ane.compile, framework=fake))
    return fake


@pytest.mark.parametrize("compress", [None, "fp16", "int8"])
def test_decoding_across_cache_buckets_matches_a_full_recompute(
    model_dir: Path, compress: str | None
) -> None:
    """With ``compress``: segment programs on resident sets, caches shared per cache length."""
    load = dict(backend="reference", max_seq=MAX_SEQ, chunk=CHUNK)
    with llm.load(model_dir, **load, compress=compress) as m:
        assert runners.decode_slots(m.max_seq) == (4, 8, 16)
        new = m.generate(PROMPT, NEW, stop=())
        seq = list(PROMPT)
        for _ in range(NEW):
            seq.append(int(np.argmax(m.logits(seq)[-1])))
        assert new == seq[len(PROMPT) :]
        assert m.compiles == 6  # prefill, head, decode at 4, 8 and 16, head over a chunk
        if compress:
            (decode,) = m.runner.cache.block_sets[
                K.BlockKey(1, MAX_SEQ)
            ]  # one segment of both layers
            caches = {f"{kv}_cache{j}" for kv in "kv" for j in range(2)}
            assert decode.shared == caches  # bound to the prefill's; it writes its own tables
            prefill = m.runner.cache.block_sets[K.BlockKey(CHUNK, MAX_SEQ)][0]
            assert decode.buffer("k_cache1") is prefill.buffer("k_cache1")  # one per length
    if compress == "fp16":  # weights compiled in, uncompressed: the dynamic-weight model's tokens
        with llm.load(model_dir, **load) as dense:
            assert dense.generate(PROMPT, NEW, stop=()) == new


def test_the_ane_path_gives_the_reference_tokens(model_dir: Path, fake: FakeFramework) -> None:
    """Two generations in a row (the second starts over from a cache left at another length)."""
    prompts = (PROMPT, [40, 2, 9, 9, 1, 77, 30, 4, 8, 2])  # the second spans two prefill chunks
    with llm.load(model_dir, backend="reference", max_seq=MAX_SEQ, chunk=CHUNK) as r:
        want = [r.generate(p, MAX_SEQ - len(p), stop=()) for p in prompts]
    with llm.load(model_dir, backend="ane", chip="m4", max_seq=MAX_SEQ, chunk=CHUNK) as m:
        assert [m.generate(p, MAX_SEQ - len(p), stop=()) for p in prompts] == want
    assert fake.violations == []
    assert all(s.locks == 0 for s in fake.surfaces), "a surface stayed locked after close"


@pytest.mark.parametrize("compress", [None, "int8"])
def test_a_decode_token_writes_only_its_rows_into_the_surfaces(
    model_dir: Path, fake: FakeFramework, monkeypatch: pytest.MonkeyPatch, compress: str | None
) -> None:
    """Bytes the host writes per decode token: tables, the residual stream, the new K/V rows.

    Counted through the stand-in's surfaces, against what passing every input to
    ``kernel(**inputs)`` copies (each layer's weights and whole cache, the head's weights).
    With ``compress`` the stream goes into each segment program (here one for both layers).
    """
    load = dict(max_seq=MAX_SEQ, chunk=CHUNK, compress=compress)
    with llm.load(model_dir, backend="ane", chip="m4", **load) as m:
        c = m.config
        runs = 1 if compress else c.n_layers  # programs per step: the stream goes into each
        writes = count_surface_writes(monkeypatch)
        tokens = m.stream(PROMPT, NEW, stop=())
        next(tokens)  # the prefill and the first token
        previous = MAX_SEQ  # the prefill's cache length
        for pos in range(len(PROMPT), len(PROMPT) + NEW - 1):
            writes.reset()
            next(tokens)
            s = runners.decode_cache(MAX_SEQ, pos)
            moved = pos if s != previous else 0  # the context's rows, copied once per new length
            previous = s
            per_token = (
                2 * c.head_dim  # cos and sin, written once for every layer
                + c.group * (s + 1)  # the mask
                + (runs + 1) * c.dim  # the residual stream into each program and the head
                + c.n_layers * 2 * c.n_kv_heads * (1 + moved) * c.head_dim  # new K/V rows
            )
            assert writes.bytes == 2 * per_token, (pos, s, moved)
        block = sum(np.prod(shape) for shape in K.block_input_shapes(c, K.BlockKey(1, 16)).values())
        head = c.dim + c.dim + c.vocab_size * c.dim  # x, norm, the head's weights
        assert 30 * per_token < c.n_layers * block + head  # what kernel(**inputs) copies


def test_programs_that_cannot_bind_a_buffer_get_copies_and_the_same_tokens(
    model_dir: Path, fake: FakeFramework
) -> None:
    """Decode programs whose model lays some tensors out otherwise (128-byte rows, as reported
    on M5) cannot bind the prefill program's surfaces for them: those get their own copies."""
    with llm.load(model_dir, backend="reference", max_seq=MAX_SEQ, chunk=CHUNK) as r:
        want = r.generate(PROMPT, NEW, stop=())
    with llm.load(model_dir, backend="ane", chip="m4", max_seq=MAX_SEQ, chunk=CHUNK) as m:
        fake.row_align = 128  # the programs compiled from now on
        assert m.generate(PROMPT, NEW, stop=()) == want
        decode = m.runner.cache.block_sets[K.BlockKey(1, MAX_SEQ)][0]
        assert "wqkv" in decode.shared, "128-byte rows of dim 64: the same layout, still bound"
        assert not {"k_cache", "attn_norm"} & decode.shared, "a layout that differs was bound"
    assert fake.violations == []


def test_compact_buffers_give_the_same_tokens(model_dir: Path) -> None:
    """``hold="fp16"`` keeps the reference backend's buffers in 2 bytes (converted per run)."""
    with llm.load(model_dir, backend="reference", max_seq=MAX_SEQ, chunk=CHUNK) as wide:
        want = wide.generate(PROMPT, NEW, stop=())
        assert wide.runner._weights[0]["wqkv"].array.dtype == np.float32
    with llm.load(model_dir, backend="reference", max_seq=MAX_SEQ, chunk=CHUNK, hold="fp16") as m:
        assert m.runner._weights[0]["wqkv"].array.dtype == np.float16
        assert m.generate(PROMPT, NEW, stop=()) == want


def test_segments_on_the_ane_path_give_the_reference_tokens(
    model_dir: Path, fake: FakeFramework
) -> None:
    load = dict(max_seq=MAX_SEQ, chunk=CHUNK, compress="int8")
    with llm.load(model_dir, backend="reference", **load) as r:
        want = r.generate(PROMPT, MAX_SEQ - len(PROMPT), stop=())
    with llm.load(model_dir, backend="ane", chip="m4", **load) as m:
        assert m.generate(PROMPT, MAX_SEQ - len(PROMPT), stop=()) == want
    assert fake.violations == []
    assert all(s.locks == 0 for s in fake.surfaces), "a surface stayed locked after close"


def test_w8a8_calibration_leaves_the_model_cache_empty(model_dir: Path) -> None:
    """Calibration runs the dynamic-weight block program on a cache of its own."""
    load = dict(backend="reference", max_seq=MAX_SEQ, chunk=CHUNK)
    with llm.load(model_dir, **load, compress="w8a8", calibration=PROMPT * 3) as m:
        assert K.BlockKey(CHUNK, MAX_SEQ) in m.runner._kernels  # compiled for the calibration only
        assert m.runner.packed.states["layers 0-1"].steps and m.runner.packed.states["head"].steps
        cache = [b.array for pair in m.runner.cache.caches[MAX_SEQ] for b in pair]
        assert len(cache) == 4 and not any(a.any() for a in cache)
        with pytest.raises(UsageError, match="calibration: token ids"):
            llm.load(model_dir, **load, compress="w8a8", calibration=[1, 10_000])


@pytest.mark.parametrize("compress", [None, "int8"])
def test_programs_made_for_m1_pass_its_checker_and_give_the_same_tokens(
    model_dir: Path, compress: str | None
) -> None:
    """head_dim 16 and cache and chunk lengths 1-16: every contraction M1 rejects is padded."""
    from anekit.hw.compat import check

    load = dict(backend="reference", max_seq=MAX_SEQ, chunk=CHUNK, compress=compress)
    with llm.load(model_dir, chip="m4", **load) as m4:
        want = m4.generate(PROMPT, NEW, stop=())
        unpadded = [d.rule for p in m4.programs() for d in check(p, "m1") if d.severity == "error"]
    assert "m1-matmul-k" in unpadded  # the m4 programs would not run on m1
    with llm.load(model_dir, chip="m1", **load) as m1:
        assert m1.generate(PROMPT, NEW, stop=()) == want
        errors = [d for p in m1.programs() for d in check(p, "m1") if d.severity == "error"]
    assert errors == []
