"""Model files stay data: the hub cache's links, hostile config values, FIFOs and bombs (issue 23)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from anekit import llm
from anekit.errors import ModelError, UsageError
from anekit.llm.config import config_from_hf, read_config
from anekit.train.data import Llama2cTokenizer

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 96, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
}  # fmt: skip


def _config(**changes: object) -> dict:
    raw = dict(CONFIG)
    for key, value in changes.items():
        if value is ...:
            raw.pop(key)
        else:
            raw[key] = value
    return raw


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """A tiny bf16 Llama saved in 40 KB shards, and transformers' float32 model of it."""
    pytest.importorskip("transformers")
    from tests.llm_models import Case, save_model

    root = tmp_path_factory.mktemp("saved")
    reference = save_model(root / "plain", Case("llama", "bfloat16", False, 2, "new"))
    reference.save_pretrained(root / "sharded", max_shard_size="40KB")
    shutil.copy(root / "plain" / "config.json", root / "sharded" / "config.json")
    return root, reference


def _hub_layout(source: Path, cache: Path) -> Path:
    """``source``'s files as the Hugging Face hub cache keeps them: links into ``../../blobs``."""
    blobs, snapshot = cache / "blobs", cache / "snapshots" / "0123abcd"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, file in enumerate(sorted(source.iterdir())):
        shutil.copy(file, blobs / f"blob{i}")
        (snapshot / file.name).symlink_to(f"../../blobs/blob{i}")
    return snapshot


def test_a_sharded_model_in_the_hub_cache_layout_loads(saved, tmp_path: Path) -> None:
    from tests.llm_models import reference_logits, rel_error

    root, reference = saved
    snapshot = _hub_layout(root / "sharded", tmp_path / "models--tiny")
    assert len(list(snapshot.glob("*.safetensors"))) > 2  # several shards, each a link
    ids = [5, 17, 3, 60, 2, 9]
    with llm.load(snapshot, backend="reference", max_seq=16) as m:
        got = m.logits(ids)
    with llm.load(root / "sharded", backend="reference", max_seq=16) as m:
        assert np.array_equal(got, m.logits(ids))  # the same bytes through the links
    assert rel_error(got, reference_logits(reference, ids)) < 3e-2


def test_a_link_to_a_non_model_file_is_refused_without_quoting_it(saved, tmp_path: Path) -> None:
    root, _ = saved
    model = tmp_path / "m"
    shutil.copytree(root / "plain", model)
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:hunter2 the secret bytes\n")
    (model / "model.safetensors").unlink()
    (model / "model.safetensors").symlink_to(secret)
    with pytest.raises(ModelError) as caught:
        llm.load(model, backend="reference")
    assert "safetensors" in str(caught.value)
    for fragment in ("root", "hunter2", "secret bytes", str(int.from_bytes(b"root:x:0", "little"))):
        assert fragment not in str(caught.value).replace(str(tmp_path), "")


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_a_fifo_or_device_in_a_model_directory_is_refused_at_once(
    saved, tmp_path: Path, name: str
) -> None:
    root, _ = saved
    model = tmp_path / "m"
    shutil.copytree(root / "plain", model)
    (model / name).unlink()
    os.mkfifo(model / name)
    start = time.monotonic()
    with pytest.raises(ModelError, match=r"is a FIFO \(named pipe\)"):
        llm.load(model, backend="reference")
    (model / name).unlink()
    (model / name).symlink_to("/dev/zero")
    with pytest.raises(ModelError, match="is a character device"):
        llm.load(model, backend="reference")
    assert time.monotonic() - start < 10


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rms_norm_eps": float("nan")}, "rms_norm_eps must be a finite number, found nan"),
        ({"rms_norm_eps": 0}, r"rms_norm_eps must be in \(0, 1\), found 0.0"),
        ({"rms_norm_eps": -1e-6}, r"rms_norm_eps must be in \(0, 1\)"),
        ({"rope_theta": 0}, "rope_theta must be above 1, found 0.0"),
        ({"rope_theta": float("nan")}, "rope_scaling.rope_theta must be a finite number"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 0}}, "factor must be above 0"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4,
                           "high_freq_factor": 4}}, "high_freq_factor must be above low"),
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings must be true or false"),
        ({"num_hidden_layers": 2.0}, "num_hidden_layers must be a whole number, found 2.0"),
        ({"num_hidden_layers": 10**9}, r"num_hidden_layers must be in \[1, 4096\]"),
        ({"hidden_size": 10**400}, "hidden_size must be in"),
        ({"vocab_size": "96"}, "vocab_size must be a whole number, found '96'"),
        ({"num_key_value_heads": 0}, "num_key_value_heads must be in"),
        ({"intermediate_size": ...}, "intermediate_size is required"),
        ({"max_position_embeddings": 1e9}, "max_position_embeddings must be a whole number"),
        ({"bos_token_id": 96}, r"bos_token_id must be in \[0, 95\]"),
        ({"eos_token_id": [2, "x"]}, "eos_token_id must be a whole number"),
        ({"hidden_act": ["silu"]}, r"hidden activation \[.silu.\] is not supported"),
        ({"rope_scaling": [1]}, "rope_scaling must be an object"),
        ({"hidden_size": 66}, "hidden_size 66 is not a multiple of num_attention_heads 4"),
        ({"architectures": ["MistralForCausalLM"], "sliding_window": -4},
         r"sliding_window must be in \[1, "),
    ],
)  # fmt: skip
def test_every_config_field_is_typed_and_ranged(changes: dict, message: str) -> None:
    with pytest.raises(ModelError, match=message) as caught:
        config_from_hf(_config(**changes))
    assert str(caught.value).startswith("config.json: ")  # the file is named


def test_config_values_are_taken_as_given() -> None:
    c = config_from_hf(_config(rope_theta=500000, tie_word_embeddings=True, eos_token_id=[2, 3]))
    assert (c.rope.theta, c.tie_embeddings, c.eos_token_ids) == (500000.0, True, (2, 3))
    c = config_from_hf(_config(head_dim=None, eos_token_id=None, rope_scaling=None))
    assert (c.head_dim, c.eos_token_ids, c.rope.kind) == (16, (), "default")


def test_a_deeply_nested_config_is_a_model_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ModelError, match="nested deeper than 64 levels"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ModelError, match="not UTF-8 text at byte 7"):
        read_config(tmp_path)


def test_config_dimensions_above_the_tensors_fail_before_allocating(saved, tmp_path) -> None:
    root, _ = saved
    model = tmp_path / "m"
    shutil.copytree(root / "plain", model)
    raw = json.loads((model / "config.json").read_text())
    raw["intermediate_size"] = 1 << 19  # 2 layers x 3 x 64 x 512k fp32 would be 800 MB
    (model / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelError, match=r"mlp.gate_proj.weight.*expected shape \[524288, 64\]"):
        llm.load(model, backend="reference")
    raw["intermediate_size"], raw["num_hidden_layers"] = 96, 4000
    (model / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelError, match="'model.layers.2.input_layernorm.weight': missing"):
        llm.load(model, backend="reference")


def test_the_llama2c_tokenizer_merges_as_before_and_fast() -> None:
    from tests.fuzz_harness import tokenizer_seed

    tok = Llama2cTokenizer.from_bytes(tokenizer_seed(), "tokenizer.bin")
    rng = np.random.default_rng(3)
    alphabet = list("Once upon a time ")
    for _ in range(50):
        text = "".join(rng.choice(alphabet, int(rng.integers(0, 40))))
        assert tok.encode(text) == _quadratic_encode(tok, text)
    start = time.monotonic()
    ids = tok.encode("Once upon a time " * 6000)  # 102k characters: minutes before
    assert time.monotonic() - start < 5
    # the seed has no " " piece: the dummy prefix stays a byte piece, which decoding keeps
    assert tok.decode(ids) == " " + "Once upon a time " * 6000


def _quadratic_encode(tok: Llama2cTokenizer, text: str) -> list[int]:
    """llama2.c's encoder as run.c writes it: rescan every pair, merge the best, repeat."""
    ids = [tok._ids.get(c.encode(), None) for c in " " + text] if text else []
    flat: list[int] = []
    for c, i in zip(" " + text, ids):
        flat.extend([i] if i is not None else [b + 3 for b in c.encode()])
    while True:
        best, score = -1, -np.inf
        for i in range(len(flat) - 1):
            merged = tok._ids.get(tok.pieces[flat[i]] + tok.pieces[flat[i + 1]])
            if merged is not None and tok.scores[merged] > score:
                best, score = i, tok.scores[merged]
        if best < 0:
            return [1, *flat]
        flat[best : best + 2] = [tok._ids[tok.pieces[flat[best]] + tok.pieces[flat[best + 1]]]]


def test_a_tokenizer_without_byte_pieces_refuses_what_it_cannot_encode() -> None:
    data = struct.pack("<i", 3)
    for i, piece in enumerate([b"<unk>", b"<s>", b"</s>", b" ", b"a"]):
        data += struct.pack("<fi", float(-i), len(piece)) + piece
    tok = Llama2cTokenizer.from_bytes(data, "small.bin")
    assert tok.encode("a") == [1, 3, 4]
    with pytest.raises(UsageError, match="needs byte piece 101, but the tokenizer has 5 pieces"):
        tok.encode("b")
    with pytest.raises(UsageError, match=r"token ids \[7\] are outside"):
        tok.decode([4, 7])


# Each bomb runs in a child under a 2.5 GiB address-space limit and must fail fast with ours.
BOMB = textwrap.dedent(
    """
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (int(2.5 * 2**30), resource.RLIM_INFINITY))
    from anekit.errors import AnekitError
    start = time.monotonic()
    try:
        exec(sys.argv[1])
    except AnekitError as e:
        print("refused", round(time.monotonic() - start, 2), type(e).__name__, str(e)[-200:])
    else:
        print("accepted")
    """
)


def _bomb(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run([sys.executable, "-c", BOMB, code], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_bombs_are_refused_quickly_under_an_address_space_limit(saved, tmp_path: Path) -> None:
    root, _ = saved
    bin_file = tmp_path / "bomb.bin"
    bin_file.write_bytes(struct.pack("<7i", 8, 16, 2**31 - 1, 2, 1, 12, 4))  # 28 bytes
    layers = tmp_path / "layers"
    shutil.copytree(root / "plain", layers)
    raw = json.loads((layers / "config.json").read_text())
    (layers / "config.json").write_text(json.dumps({**raw, "num_hidden_layers": 4096}))
    zero = tmp_path / "zero"
    zero.mkdir()
    (zero / "config.json").symlink_to("/dev/zero")
    big = tmp_path / "big"
    shutil.copytree(root / "plain", big)
    with open(big / "tokenizer.json", "wb") as f:
        f.truncate(1 << 40)  # sparse: a terabyte that takes no disk
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as f:
        f.truncate(8 << 30)  # 8 GiB of nothing: mapping it needs more than the limit allows
    mil_model = tmp_path / "mil"
    from tests.clitools import weighted_program

    weighted_program().save(mil_model)
    (weight,) = (mil_model / "weights").iterdir()
    with open(weight, "r+b") as f:
        f.truncate(8 << 30)
    npz = tmp_path / "calibration.npz"
    _declaring_npz(npz, (1 << 36,))  # 64 Gi float32 elements declared in a ~100-byte member
    bombs = {
        "sparse llama2c": f"from anekit import llm; llm.load({str(sparse)!r})",
        "sparse MIL weights": f"from anekit import mil; mil.load({str(mil_model)!r})",
        "npz header": f"from anekit.cli.compress import _sample; _sample({str(npz)!r})",
        "classes --diff /dev/zero": "from anekit.doctor.classes import read_listing; "
        "read_listing('/dev/zero')",
        "llama2c layers": f"from anekit import llm; llm.load({str(bin_file)!r})",
        "config layers": f"from anekit import llm; llm.load({str(layers)!r}, backend='reference')",
        "config /dev/zero": f"from anekit import llm; llm.load({str(zero)!r})",
        "tokenizer.json": f"from anekit import llm; llm.load({str(big)!r}, backend='reference')",
    }
    for name, code in bombs.items():
        result = _bomb(code)
        assert result.startswith("refused"), (name, result)
        assert float(result.split()[1]) < 10, (name, result)


def _declaring_npz(path: Path, shape: tuple[int, ...]) -> None:
    """An .npz whose one member's header declares ``shape`` float32 but holds 16 bytes."""
    import io
    import zipfile

    member = io.BytesIO()
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(member, header)
    member.write(b"\0" * 16)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", member.getvalue())


def test_calibration_files_are_bounded_and_typed(tmp_path: Path) -> None:
    from anekit.files import read_npz

    good = tmp_path / "good.npz"
    np.savez(good, x=np.arange(6, dtype=np.float16).reshape(2, 3))
    assert np.array_equal(read_npz(good, limit=10_000, what="x")["x"], np.arange(6).reshape(2, 3))
    cases = {
        "declared": (r"declares \[1000\] float32 \(4000 bytes\), its member holds", None),
        "empty": ("not a readable .npz file", b""),
        "inflating": ("its arrays inflate to 800128 bytes; expected x of at most 100000", None),
        "pickle": ("holds Python objects", None),
        "fifo": (r"is a FIFO \(named pipe\)", None),
    }
    for name, (message, data) in cases.items():
        path = tmp_path / f"{name}.npz"
        if name == "declared":
            _declaring_npz(path, (1000,))
        elif name == "inflating":
            np.savez_compressed(path, x=np.zeros(100_000))  # 800 KB of zeros in ~1 KB
        elif name == "pickle":
            np.savez(path, x=np.array([{"a": 1}], dtype=object))
        elif name == "fifo":
            os.mkfifo(path)
        else:
            path.write_bytes(data)
        with pytest.raises(UsageError, match=message):
            read_npz(path, limit=100_000, what="x")


def test_a_missing_buffer_name_is_our_error_and_still_a_key_error() -> None:
    import anekit
    from anekit import mil
    from anekit.errors import AnekitError

    b = mil.Builder()
    b.output(b.relu(x=b.input("x", (1, 4), "fp16")), "y")
    with anekit.compile(b.build(), backend="reference") as kernel:
        sets = kernel.buffers()
        for lookup in (lambda: sets.input("z"), lambda: sets.output("z"), lambda: kernel.spec("z")):
            with pytest.raises(KeyError) as caught:
                lookup()
            assert isinstance(caught.value, AnekitError)
            assert "'z'; " in str(caught.value) and not str(caught.value).startswith('"')


def test_a_tokenizer_smaller_than_the_model_refuses_ids_it_lacks(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    from anekit.llm.tokenizer import HFTokenizer
    from tests.llm_models import save_tokenizer

    save_tokenizer(tmp_path, vocab_size=60)
    tok = HFTokenizer(tmp_path / "tokenizer.json")
    assert tok.decode(tok.encode("the robot")) == "the robot"
    with pytest.raises(ModelError, match=r"token ids \[95\] are beyond the tokenizer's"):
        tok.decode([5, 95])  # a padded vocabulary's id: dropped silently before
