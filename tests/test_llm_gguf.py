"""``anekit.llm.load("model.gguf")`` against transformers' own GGUF loader, on files the test writes."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from anekit import llm  # noqa: E402
from anekit.errors import ModelError  # noqa: E402
from tests.clitools import run  # noqa: E402
from tests.gguf_models import bpe_vocab, spm_vocab, tiny_model, write_gguf  # noqa: E402
from tests.llm_models import rel_error  # noqa: E402

IDS = [1, 5, 9, 30, 100, 7, 3, 44, 260, 12]
TEXTS = ["Once upon a time there was", "the robot read on, and on. 42!", ""]

# (arch, matrix type, tokenizer model, extra config): llama's q/k rows are permuted by
# llama.cpp; Qwen3 with head_dim 128, the only one transformers' GGUF mapping reads for it
CASES = [
    ("llama", "Q8_0", "llama", {}),
    ("llama", "Q4_0", "llama", {}),
    ("qwen2", "Q8_0", "gpt2", {}),
    ("qwen3", "Q4_0", "gpt2", {"head_dim": 128}),
    # K-quants (rows of 256): blocks made by hand, gguf has no Python quantizer for them
    ("llama", "Q4_K", "llama", {"hidden_size": 256, "intermediate_size": 256, "head_dim": 64}),
    ("qwen2", "Q6_K", "gpt2", {"hidden_size": 256, "intermediate_size": 256, "head_dim": 64}),
]


def vocab_size(tokenizer: str) -> int:
    return len(spm_vocab()[0] if tokenizer == "llama" else bpe_vocab()[0])


def transformers_gguf(path):
    kw = {"gguf_file": path.name, "local_files_only": True}
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), **kw).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), **kw)
    return model, tok


@pytest.mark.parametrize(("arch", "qtype", "tokenizer", "extra"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])  # fmt: skip
def test_gguf_matches_transformers_loader(tmp_path, arch, qtype, tokenizer, extra) -> None:
    path = write_gguf(
        tmp_path / "m.gguf",
        tiny_model(arch, vocab_size(tokenizer), **extra),
        arch,
        qtype,
        tokenizer,
    )
    reference, ref_tok = transformers_gguf(path)
    with torch.no_grad():
        want = reference(torch.tensor([IDS])).logits[0].numpy()
    with llm.load(path, backend="reference", max_seq=64) as m:
        assert m.config.family == arch and m.config.head_dim == extra.get("head_dim", 16)
        assert rel_error(m.logits(IDS), want) < 0.03
        for text in TEXTS:
            ids = m.tokenizer.encode(text)
            assert ids == ref_tok(text)["input_ids"], text
            assert m.tokenizer.decode(ids) == text
        report = "\n".join(m.load_report)
    lines = {line.split()[0]: line.split()[1:] for line in report.splitlines()}
    assert lines["blk.0.ffn_down.weight"][:2] == [qtype, f"[{m.config.dim},"]
    assert lines["blk.1.attn_norm.weight"][0] == "F32"
    assert "(dequantized)" in " ".join(lines["token_embd.weight"])
    assert ("rows un-permuted" in report) == (arch == "llama")


def test_unpermuted_f16_gguf_equals_the_original_model(tmp_path) -> None:
    """Independent of transformers' loader: F16 matrices give the original model back."""
    original = tiny_model("llama", vocab_size("llama"))
    path = write_gguf(tmp_path / "m.gguf", original, "llama", "F16")
    with torch.no_grad():
        want = original(torch.tensor([IDS])).logits[0].numpy()
    with llm.load(path, backend="reference", max_seq=64) as m:
        assert rel_error(m.logits(IDS), want) < 5e-3
        greedy = m.generate(IDS[:4], 6)
    ids = torch.tensor([IDS[:4]])
    with torch.no_grad():
        ref = original.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert greedy == ref[0, 4:].tolist()


def test_compress_report_and_commands(tmp_path, capsys) -> None:
    path = write_gguf(
        tmp_path / "m.gguf", tiny_model("llama", vocab_size("llama")), "llama", "Q8_0"
    )
    with llm.load(path, backend="reference", max_seq=64, compress="int8") as m:
        assert "per output channel with int8" in m.load_report[-1]
        assert m.compression  # the segments were compressed
    assert llm.read_model_config(path).n_layers == 2
    code, out, err = run(capsys, "generate", "--model", str(path), "--prompt", "Once upon",
                         "--tokens", "3", "--temperature", "0", "--backend", "reference")  # fmt: skip
    assert code == 0, err
    assert out.startswith("Once upon")
    code, out, err = run(capsys, "estimate", "--model", str(path), "--chip", "m4", "--json")
    assert code == 0, err and "decode" in out


def test_unsupported_gguf_refused(tmp_path) -> None:
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "phi.gguf"), "phi3")
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelError, match="general.architecture 'phi3' is not supported"):
        llm.load(tmp_path / "phi.gguf", backend="reference")
