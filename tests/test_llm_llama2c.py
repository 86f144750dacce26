"""llama2.c checkpoints: a .bin written here loads and matches run.c's algorithm written in NumPy."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from anekit import llm
from anekit.errors import ModelError
from anekit.llm.llama2c import MAGIC, V1_HEADER

DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB, SEQ = 32, 64, 2, 4, 2, 40, 48


def _weights(rng: np.random.Generator, shared: bool) -> dict[str, np.ndarray]:
    kv = DIM // HEADS * KV_HEADS

    def r(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = {
        "emb": r(VOCAB, DIM, scale=1.0),
        "rms_att": 1 + r(LAYERS, DIM, scale=0.1),
        "wq": r(LAYERS, DIM, DIM),
        "wk": r(LAYERS, kv, DIM),
        "wv": r(LAYERS, kv, DIM),
        "wo": r(LAYERS, DIM, DIM),
        "rms_ffn": 1 + r(LAYERS, DIM, scale=0.1),
        "w1": r(LAYERS, HIDDEN, DIM),
        "w2": r(LAYERS, DIM, HIDDEN),
        "w3": r(LAYERS, HIDDEN, DIM),
        "rms_final": 1 + r(DIM, scale=0.1),
    }
    if not shared:
        w["wcls"] = r(VOCAB, DIM)
    return w


def write_legacy(path, w: dict[str, np.ndarray]) -> None:
    """The version-0 layout run.c reads (karpathy/llama2.c export.py legacy_export)."""
    vocab = VOCAB if "wcls" not in w else -VOCAB
    header = struct.pack("<7i", DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, vocab, SEQ)
    hs = DIM // HEADS
    rope = np.zeros((SEQ, hs // 2), np.float32)
    order = ["emb", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final"]
    body = b"".join(w[k].tobytes() for k in order) + rope.tobytes() * 2
    path.write_bytes(header + body + (w["wcls"].tobytes() if "wcls" in w else b""))


def write_v1(path, w: dict[str, np.ndarray]) -> None:
    """The version-1 layout (export.py version1_export): magic, version, params, flag, padding."""
    shared = "wcls" not in w
    header = struct.pack(
        "<Ii7iB", MAGIC, 1, DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB, SEQ, shared
    )
    header += b"\0" * (V1_HEADER - len(header))
    order = ["rms_att", "rms_ffn", "rms_final", "emb", "wq", "wk", "wv", "wo", "w1", "w2", "w3"]
    body = b"".join(w[k].tobytes() for k in order)
    path.write_bytes(header + body + (b"" if shared else w["wcls"].tobytes()))


def write_tokenizer(path, pieces: list[bytes]) -> None:
    data = struct.pack("<i", max(len(p) for p in pieces))
    for i, p in enumerate(pieces):
        data += struct.pack("<fi", float(-i), len(p)) + p
    path.write_bytes(data)


def run_c_forward(w: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    """run.c's forward(), position by position, in float64: logits [T, V]."""
    hs = DIM // HEADS
    group = HEADS // KV_HEADS
    k_cache, v_cache, out = [], [], []

    def rmsnorm(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return g * x / np.sqrt(np.mean(x * x) + 1e-5)

    for _ in range(LAYERS):
        k_cache.append([])
        v_cache.append([])
    for pos, tok in enumerate(tokens):
        x = w["emb"][tok].astype(np.float64)
        for layer in range(LAYERS):
            xb = rmsnorm(x, w["rms_att"][layer])
            q, k, v = w["wq"][layer] @ xb, w["wk"][layer] @ xb, w["wv"][layer] @ xb
            for vec in (q, k):  # rotate channel pairs (2i, 2i + 1) of each head
                for i in range(0, len(vec), 2):
                    freq = 1.0 / 10000.0 ** ((i % hs) / hs)
                    c, s = np.cos(pos * freq), np.sin(pos * freq)
                    vec[i], vec[i + 1] = vec[i] * c - vec[i + 1] * s, vec[i] * s + vec[i + 1] * c
            k_cache[layer].append(k)
            v_cache[layer].append(v)
            att = np.zeros(DIM)
            for h in range(HEADS):
                kvh = h // group
                qh = q[h * hs : (h + 1) * hs]
                ks = np.array([kk[kvh * hs : (kvh + 1) * hs] for kk in k_cache[layer]])
                vs = np.array([vv[kvh * hs : (kvh + 1) * hs] for vv in v_cache[layer]])
                scores = ks @ qh / np.sqrt(hs)
                p = np.exp(scores - scores.max())
                att[h * hs : (h + 1) * hs] = (p / p.sum()) @ vs
            x = x + w["wo"][layer] @ att
            xb = rmsnorm(x, w["rms_ffn"][layer])
            h1, h3 = w["w1"][layer] @ xb, w["w3"][layer] @ xb
            x = x + w["w2"][layer] @ (h1 / (1 + np.exp(-h1)) * h3)
        out.append(w.get("wcls", w["emb"]) @ rmsnorm(x, w["rms_final"]))
    return np.array(out)


def _rel(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("writer", [write_legacy, write_v1])
@pytest.mark.parametrize("shared", [True, False])
def test_llama2c_checkpoint_matches_run_c(tmp_path, writer, shared):
    w = _weights(np.random.default_rng(3), shared)
    writer(tmp_path / "model.bin", w)
    tokens = [1, 5, 9, 2, 33, 17, 17, 4, 39, 0]
    ref = run_c_forward(w, tokens)
    with llm.load(tmp_path / "model.bin", backend="reference", chunk=4) as m:
        assert m.config.tie_embeddings is shared
        assert m.tokenizer is None
        got = m.logits(tokens)
        assert got.shape == (len(tokens), VOCAB)
        assert _rel(got, ref) < 3e-2
        # KV-cached greedy decoding picks what run.c's full forward picks
        new = m.generate(tokens[:3], 5, stop=())
    seq = tokens[:3]
    for _ in range(5):
        seq.append(int(np.argmax(run_c_forward(w, seq)[-1])))
    assert new == seq[3:]


def test_llama2c_tokenizer_is_loaded_beside_the_checkpoint(tmp_path):
    pieces = [b"<unk>", b"<s>", b"</s>"] + [bytes([32 + i]) for i in range(VOCAB - 3)]
    write_tokenizer(tmp_path / "tokenizer.bin", pieces)
    write_legacy(tmp_path / "model.bin", _weights(np.random.default_rng(0), True))
    m = llm.load(tmp_path / "model.bin", backend="reference")
    ids = m.tokenizer.encode("AB")  # pieces " ", "A", "B" after BOS (codes 32, 65, 66)
    assert ids == [1, 3, 36, 37] and m.tokenizer.decode(ids) == "AB"
    m.close()


def test_llama2c_rejects_a_truncated_file_and_a_mismatched_tokenizer(tmp_path):
    w = _weights(np.random.default_rng(0), True)
    write_legacy(tmp_path / "model.bin", w)
    data = (tmp_path / "model.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[:-8])
    with pytest.raises(ModelError, match="the file has"):
        llm.load(tmp_path / "cut.bin", backend="reference")
    write_tokenizer(tmp_path / "tokenizer.bin", [b"a", b"b", b"c"])
    with pytest.raises(ModelError, match="3 tokens, but the checkpoint has 40"):
        llm.load(tmp_path / "model.bin", backend="reference")
