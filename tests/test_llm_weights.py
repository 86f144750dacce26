"""The safetensors reader: bounded header parsing, dtype conversion, and the memory a load holds."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from anekit.errors import ModelError
from anekit.llm.weights import SafetensorsFile, WeightStore


def write_safetensors(path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """A safetensors file by hand: dtype name -> raw array (bf16 given as its uint16 bits)."""
    header, blobs, at = {}, [], 0
    for name, (dtype, array) in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [at, at + len(data)],
        }
        blobs.append(data)
        at += len(data)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (nearest even) and return the 16-bit patterns."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def test_every_stored_dtype_reads_as_fp16(tmp_path):
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    write_safetensors(
        tmp_path / "m.safetensors",
        {"a": ("F32", x), "b": ("F16", x.astype(np.float16)), "c": ("BF16", bf16_bits(x))},
    )
    f = SafetensorsFile(tmp_path / "m.safetensors")
    np.testing.assert_array_equal(f.fp16("a"), x.astype(np.float16))
    np.testing.assert_array_equal(f.fp16("b"), x.astype(np.float16))
    expected = (bf16_bits(x).astype(np.uint32) << 16).view(np.float32).astype(np.float16)
    np.testing.assert_array_equal(f.fp16("c"), expected)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda h: h["a"].update(dtype="I64"), "dtype I64 is not supported"),
        (lambda h: h["a"].update(shape=[5, 6]), "does not hold F32"),
        (lambda h: h["a"].update(data_offsets=[0, 10**9]), "does not hold F32"),
        (lambda h: h["a"].update(shape=[-4, 6]), "not whole numbers"),
    ],
)
def test_a_bad_header_entry_is_named(tmp_path, edit, message):
    header = {"a": {"dtype": "F32", "shape": [4, 6], "data_offsets": [0, 96]}}
    edit(header)
    text = json.dumps(header).encode()
    (tmp_path / "m.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + bytes(96))
    with pytest.raises(ModelError, match=message) as info:
        SafetensorsFile(tmp_path / "m.safetensors")
    assert info.value.tensor == "a"


def test_header_length_past_the_file_and_overflow_from_fp32(tmp_path):
    (tmp_path / "m.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(ModelError, match="exceeds the file"):
        SafetensorsFile(tmp_path / "m.safetensors")
    write_safetensors(
        tmp_path / "m.safetensors", {"big": ("F32", np.array([1.0, 7e4], np.float32))}
    )
    with pytest.raises(ModelError, match="'big'.*1 value.*overflow fp16.*70000"):
        SafetensorsFile(tmp_path / "m.safetensors").fp16("big")


def test_pickle_checkpoints_are_never_loaded(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(ModelError, match="pytorch_model.bin are pickles"):
        WeightStore(tmp_path)


_MEMORY = r"""
import json, sys
import anekit.backends.reference, anekit.llm.kernels, anekit.llm.tokenizer
from anekit.hw.chips import get_chip
from anekit.llm import load
import anekit.llm.weights
get_chip("m4")  # imports and data the load would otherwise count
# a block's fixed temporaries (~3 MB) are 7 % of this small model, not of a real one's GBs
anekit.llm.weights.BLOCK = 1 << 16

def rss_mb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024

base = rss_mb("VmRSS")
# the weights of the loaded model; the residual-scale calibration (a probe of the model, run
# and closed before it is built) is measured by tests/test_numerics_llm.py
m = load(sys.argv[1], backend="reference", max_seq=16, hold=sys.argv[2], residual_scale=1.0)
print(json.dumps({"base": base, "peak": rss_mb("VmHWM"), "after": rss_mb("VmRSS")}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("dtype", ["BF16", "F16"])
def test_loading_holds_about_the_fp16_weights(tmp_path, dtype):
    """Peak resident memory of a load, in a fresh process: the fp16 weights plus one tensor."""
    dim, hidden, layers, vocab = 512, 1536, 6, 4096
    rng = np.random.default_rng(0)
    shapes = {"model.embed_tokens.weight": (vocab, dim), "model.norm.weight": (dim,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (dim,), p + "post_attention_layernorm.weight": (dim,),
            p + "self_attn.q_proj.weight": (dim, dim), p + "self_attn.k_proj.weight": (dim, dim),
            p + "self_attn.v_proj.weight": (dim, dim), p + "self_attn.o_proj.weight": (dim, dim),
            p + "mlp.gate_proj.weight": (hidden, dim), p + "mlp.up_proj.weight": (hidden, dim),
            p + "mlp.down_proj.weight": (dim, hidden),
        })  # fmt: skip
    tensors = {}
    for name, shape in shapes.items():
        x = rng.standard_normal(shape, dtype=np.float32) * 0.02
        tensors[name] = ("BF16", bf16_bits(x)) if dtype == "BF16" else ("F16", x.astype(np.float16))
    write_safetensors(tmp_path / "model.safetensors", tensors)
    config = {
        "architectures": ["LlamaForCausalLM"], "hidden_size": dim, "intermediate_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": 8, "vocab_size": vocab,
        "tie_word_embeddings": True,
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    fp16_mb = sum(np.prod(s) for s in shapes.values()) * 2 / 2**20
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY, str(tmp_path), "fp16"],
        capture_output=True,
        text=True,
        check=True,
    )
    mem = json.loads(out.stdout)
    assert fp16_mb > 40
    assert mem["peak"] - mem["base"] < 1.2 * fp16_mb, (mem, fp16_mb)
    assert mem["after"] - mem["base"] > 0.9 * fp16_mb  # the weights really were staged
