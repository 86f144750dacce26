"""Sessions own their KV cache over shared weights; the old API refuses a reused cache and a
closed model with our errors (issue #23 item 4)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from anekit import llm
from anekit.errors import ModelClosed, SessionReused, UsageError
from anekit.llm import kernels as K

pytest.importorskip("transformers")

PROMPTS = [[5, 9, 14, 3], [40, 2], [7, 7, 11, 60, 23, 8], [90]]
NEW = 10


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from tests.llm_models import Case, save_model

    directory = tmp_path_factory.mktemp("session")
    save_model(directory, Case("llama", "float16", False, 2, "new"))
    return directory


@pytest.fixture(scope="module")
def alone(model_dir) -> list[list[int]]:
    """Each prompt's tokens from a model of its own (greedy, and sampled with a seed)."""
    out = []
    for i, ids in enumerate(PROMPTS):
        with llm.load(model_dir, backend="reference", max_seq=64) as m:
            out.append(m.generate(ids, NEW, temperature=0.9 * (i % 2), seed=i, stop=()))
    return out


def test_interleaved_sessions_give_each_its_tokens_alone(model_dir, alone):
    with llm.load(model_dir, backend="reference", max_seq=64) as m:
        sessions = [m.session() for _ in PROMPTS]
        streams = [
            s.stream(ids, NEW, temperature=0.9 * (i % 2), seed=i, stop=())
            for i, (s, ids) in enumerate(zip(sessions, PROMPTS))
        ]
        got: list[list[int]] = [[] for _ in PROMPTS]
        for _ in range(NEW):  # one token of each in turn
            for i, stream in enumerate(streams):
                got[i].append(next(stream))
        assert got == alone
        # weights are held once: every session's block sets bind the model's buffers
        key = K.BlockKey(m.chunk, m.max_seq)
        own = m.runner.cache.block_sets[key][0]
        other = sessions[1].cache.block_sets[key][0]
        assert other.buffer("wqkv").memory is own.buffer("wqkv").memory
        assert other.buffer("k_cache").memory is not own.buffer("k_cache").memory


def test_sessions_in_threads_give_each_its_tokens_alone(model_dir, alone):
    with llm.load(model_dir, backend="reference", max_seq=64) as m:
        got: dict[int, list[int]] = {}

        def work(i: int) -> None:
            with m.session() as s:
                got[i] = s.generate(PROMPTS[i], NEW, temperature=0.9 * (i % 2), seed=i, stop=())

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [got[i] for i in range(len(PROMPTS))] == alone


def test_old_api_refuses_a_generator_whose_cache_was_reused(model_dir, alone):
    with llm.load(model_dir, backend="reference", max_seq=64) as m:
        first = m.stream(PROMPTS[0], NEW, stop=())
        assert next(first) == alone[0][0]
        second = m.stream(PROMPTS[1], NEW, temperature=0.9, seed=1, stop=())
        assert next(second) == alone[1][0]
        with pytest.raises(SessionReused, match="model.session"):
            next(first)
        assert list(second) == alone[1][1:]  # the later one is right
        third = m.stream(PROMPTS[0], NEW, stop=())
        next(third)
        m.logits(PROMPTS[2])
        with pytest.raises(SessionReused):
            next(third)


def test_everything_after_close_raises_our_error(model_dir):
    m = llm.load(model_dir, backend="reference", max_seq=64)
    running = m.stream(PROMPTS[0], NEW, stop=())
    next(running)
    session = m.session()
    m.close()
    calls = [
        lambda: next(running),
        lambda: m.generate(PROMPTS[0], 2),
        lambda: list(m.stream(PROMPTS[0], 2)),
        lambda: m.logits(PROMPTS[0]),
        lambda: m.session(),
        lambda: session.generate(PROMPTS[0], 2),
    ]
    for call in calls:
        with pytest.raises(ModelClosed):
            call()
    assert issubclass(ModelClosed, UsageError)


def test_compiles_are_counted_apart_from_the_first_token(model_dir):
    with llm.load(model_dir, backend="reference", max_seq=64) as m:
        m.generate(PROMPTS[0], 2, stop=())
        first = m.stats
        assert first.compile_s > 0  # the first decode bucket's program was compiled then
        m.generate(PROMPTS[0], 2, stop=())
        assert m.stats.compile_s == 0
        assert 0 < first.first_token_s and first.prefill_s > 0
