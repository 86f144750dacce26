"""Speculative decoding: greedy output equals plain greedy; sampling keeps the target's law."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from anekit import llm  # noqa: E402
from anekit.errors import UsageError  # noqa: E402
from anekit.llm.cost import estimate_speculative
from anekit.llm.speculative import verify_sample  # noqa: E402
from tests.clitools import run  # noqa: E402
from tests.llm_models import Case, save_draft_pair, save_model, save_tokenizer  # noqa: E402

PROMPT = [int(t) for t in np.random.default_rng(5).integers(0, 96, 9)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    draft_dir, target_dir = save_draft_pair(root)
    save_model(root / "other", Case("llama", "float16", False, 2, "new"), seed=3)
    return draft_dir, target_dir, root / "other"


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_greedy_equals_plain_greedy(pair, k) -> None:
    draft_dir, target_dir, other_dir = pair
    with llm.load(target_dir, backend="reference", max_seq=96) as target:
        plain = target.generate(PROMPT, 40, stop=())
        for where, expect_accepting in ((draft_dir, True), (other_dir, False)):
            with llm.load(where, backend="reference", max_seq=96) as draft:
                session = target.session()
                fast = session.generate(PROMPT, 40, stop=(), draft=draft, draft_tokens=k)
                spec = session.stats.speculative
            assert fast == plain, (where.name, k)
            assert spec.proposed == spec.rounds * k
            if expect_accepting:  # the same function: only fp16 near-ties may reject
                assert spec.acceptance_rate > 0.9 and spec.tokens_per_round > 0.9 * (k + 1)
            else:  # an unrelated model: its proposals are mostly rejected, output unchanged
                assert spec.acceptance_rate < 0.5


def test_chunked_and_one_token_logits_agree_closely(pair) -> None:
    """The bound the greedy guarantee rests on: the target's chunked check (k + 1 = 5
    positions) and its one-token decode steps give logits that differ by fp16 rounding only
    (measured on this model: at most 0.0025 for logits up to 2.1, with chunks of 2 to 9; the
    argmax can differ only where the top two logits are closer than that)."""
    _, target_dir, _ = pair
    with llm.load(target_dir, backend="reference", max_seq=96, chunk=5) as target:
        seq = PROMPT + target.generate(PROMPT, 20, stop=())
        chunked = target.logits(seq)[len(PROMPT) - 1 : -1]  # chunks of 5 positions
        session = target.session()
        stepped = [target._prefill(PROMPT, session.cache, all_logits=False)[-1]]
        for pos in range(len(PROMPT), len(seq) - 1):
            stepped.append(target._decode(seq[pos], pos, session.cache))
    gap = np.abs(chunked - np.stack(stepped)).max()
    assert 0 < gap < 0.05


def test_sampling_rule_draws_the_target_distribution() -> None:
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(6))
    q = rng.dirichlet(np.ones(6))
    counts = np.zeros(6)
    n = 40000
    for _ in range(n):
        d = int(rng.choice(6, p=q))
        r = verify_sample(d, p, q, rng)
        counts[d if r is None else r] += 1
    assert np.abs(counts / n - p).sum() / 2 < 0.015  # total variation
    assert verify_sample(2, p, p, rng) is None  # a draft equal to the target is always kept


def test_sampled_generation_is_seeded_and_counts(pair) -> None:
    draft_dir, target_dir, _ = pair
    with (
        llm.load(target_dir, backend="reference", max_seq=96) as target,
        llm.load(draft_dir, backend="reference", max_seq=96) as draft,
    ):
        runs = [
            target.session().generate(
                PROMPT,
                25,
                stop=(),
                temperature=0.9,
                top_p=0.95,
                seed=s,
                draft=draft,
                draft_tokens=3,
            )  # fmt: skip
            for s in (7, 7, 8)
        ]
        assert len(runs[0]) == 25 and runs[0] == runs[1] and runs[0] != runs[2]
        s = target.session()
        s.generate(PROMPT, 25, stop=(), temperature=0.9, seed=1, draft=draft, draft_tokens=3)
        assert s.stats.speculative.acceptance_rate > 0.8  # same function: p == q but rounding


def test_refusals(pair) -> None:
    draft_dir, target_dir, _ = pair
    with llm.load(target_dir, backend="reference", max_seq=32) as target:
        with pytest.raises(UsageError, match="another Model"):
            target.generate(PROMPT, 4, draft=target)
        with llm.load(draft_dir, backend="reference", max_seq=32) as draft:
            with pytest.raises(UsageError, match="draft_tokens must be in"):
                target.generate(PROMPT, 4, draft=draft, draft_tokens=0)
            with pytest.raises(UsageError, match="exceed the target's cache"):
                target.generate(PROMPT, 20, draft=draft, draft_tokens=8)
        with pytest.raises(UsageError, match="must be an anekit.llm Model"):
            target.generate(PROMPT, 4, draft="draft")


def test_cli_generate_and_estimate_with_a_draft(pair, capsys) -> None:
    draft_dir, target_dir, _ = pair
    for d in (draft_dir, target_dir):
        save_tokenizer(d)
    code, out, err = run(capsys, "generate", "--model", str(target_dir), "--draft",
                         str(draft_dir), "--draft-tokens", "3", "--prompt", "Once upon",
                         "--tokens", "12", "--temperature", "0", "--backend", "reference",
                         "--stats", "--json")  # fmt: skip
    assert code == 0, err
    report = json.loads(err[err.index("{") :])
    assert report["speculative"]["draft_tokens"] == 3
    assert report["speculative"]["acceptance_rate"] > 0.8
    code, plain, err = run(capsys, "generate", "--model", str(target_dir), "--prompt",
                           "Once upon", "--tokens", "12", "--temperature", "0", "--backend",
                           "reference")  # fmt: skip
    assert code == 0 and plain == out
    code, out, err = run(capsys, "estimate", "--model", str(target_dir), "--draft",
                         str(draft_dir), "--draft-tokens", "4", "--acceptance", "0.8",
                         "--chip", "m4", "--json")  # fmt: skip
    assert code == 0, err
    est = json.loads(out)
    target_cfg = llm.read_model_config(target_dir)
    draft_cfg = llm.read_model_config(draft_dir)
    again = estimate_speculative(target_cfg, draft_cfg, "m4", draft_tokens=4, acceptance=0.8)
    assert est["speedup"] == round(again.speedup, 3)
    assert est["tokens_per_round"] == round((1 - 0.8**5) / 0.2, 3)


def test_estimate_speedup_model() -> None:
    cfg = llm.LlmConfig("LlamaForCausalLM", "llama", dim=2048, n_layers=16, n_heads=32,
                        n_kv_heads=8, head_dim=64, hidden_dim=8192, vocab_size=32000)  # fmt: skip
    small = llm.LlmConfig("LlamaForCausalLM", "llama", dim=512, n_layers=4, n_heads=8,
                          n_kv_heads=4, head_dim=64, hidden_dim=1536, vocab_size=32000)  # fmt: skip
    none = estimate_speculative(cfg, small, "m4", draft_tokens=4, acceptance=0.0)
    full = estimate_speculative(cfg, small, "m4", draft_tokens=4, acceptance=1.0)
    assert none.tokens_per_round == 1 and full.tokens_per_round == 5
    assert none.speedup < 1 < full.speedup  # rejected drafts cost time; accepted ones save it
    assert full.speedup == pytest.approx(5 * none.target_step_s / full.round_s)
