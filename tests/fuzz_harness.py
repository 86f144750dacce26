"""Fuzz anekit's binary and checkpoint readers under a time and memory bound, and count what breaks.

Run as ``python tests/fuzz_harness.py SECONDS [TARGET ...]`` from a checkout (the repository
root on ``sys.path``); prints one JSON object: per target, the inputs tried and the inputs
that raised something other than an ``AnekitError`` (``non_anekit``), ran past the per-input
time bound (``hangs``) or hit the address-space limit (``memory``), with a few examples.
``tests/test_robust_fuzz.py`` runs it in a subprocess, so the limit set here
(``resource.setrlimit``) cannot touch the test process.

Inputs are mutations of real files (hypothesis draws them): byte edits, truncations,
splices and, for ``state.json``, JSON values replaced by hostile ones (huge, negative,
fractional and non-numeric numbers, deep nesting, paths that leave the directory).
"""

from __future__ import annotations

import copy
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from anekit import mil  # noqa: E402
from anekit.errors import AnekitError  # noqa: E402

MIN_INPUTS = 20  # however slow the machine, each target tries at least this many inputs
PER_INPUT_SECONDS = 5.0  # no single input may take longer (the machine is shared and slow)
MEMORY_HEADROOM = 1536 * 2**20  # address space allowed beyond what the imports took


class TimeUp(Exception):
    """The target's time is over (raised to stop hypothesis)."""


class Hang(BaseException):
    """One input ran past PER_INPUT_SECONDS (a BaseException, so ``except Exception`` misses it)."""


def _alarm(signum, frame):
    raise Hang


# ---- what is fuzzed -------------------------------------------------------------------------


def hwx_seed() -> bytes:
    return (ROOT / "tests" / "data" / "hwx" / "conv.hwx").read_bytes()


def flatbuffer_seed() -> bytes:
    import flatbuffers

    b = flatbuffers.Builder(0)
    names = [b.CreateString(s) for s in ("a", "bc", "def")]
    b.StartVector(4, len(names), 4)
    for n in reversed(names):
        b.PrependUOffsetTRelative(n)
    vec = b.EndVector()
    b.StartObject(1)
    b.PrependInt64Slot(0, 12345, 0)
    child = b.EndObject()
    b.StartObject(3)
    b.PrependUOffsetTRelativeSlot(0, vec, 0)
    b.PrependUOffsetTRelativeSlot(1, child, 0)
    b.PrependUint16Slot(2, 7, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def weighted_model(directory: Path) -> Path:
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 8), "fp16")
    w = b.weight("w", np.arange(32, dtype=np.float16).reshape(1, 4, 1, 8))
    v = b.weight("v", np.ones((1, 4, 1, 8), np.int8))
    b.output(b.add(x=b.mul(x=x, y=w), y=b.cast(x=v, dtype="fp16")), "y")
    b.build().save(directory)
    return directory


def small_checkpoint(directory: Path):
    """A one-step checkpoint of a tiny model, and a trainer of that model to restore into."""
    from anekit.train.config import ModelConfig, TrainConfig
    from anekit.train.loop import Trainer

    cfg = ModelConfig(name="fuzz", dim=16, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=8,
                      hidden_dim=32, vocab_size=256, seq_len=8)  # fmt: skip
    tokens = np.frombuffer(b"fuzzing checkpoints, one byte at a time. " * 4, dtype=np.uint8)
    trainer = Trainer(cfg, TrainConfig(steps=2, batch_size=1, warmup=1), tokens, "reference")
    trainer.train_step()
    ckpt = trainer.save(directory)
    return ckpt, trainer


def pt2_seeds_in(directory: Path) -> tuple[Path, Path, list[bytes]]:
    """A plain ``.pt2`` and one hostile variant of each kind, all with the same marker path."""
    from tests import pt2_craft

    directory.mkdir()
    plain, marker = directory / "plain.pt2", directory / "payload_ran"
    pt2_craft.small_archive(plain)
    seeds = [plain.read_bytes()]
    for kind in pt2_craft.KINDS:
        seeds.append(pt2_craft.hostile(kind, plain, directory / f"{kind}.pt2", marker).read_bytes())
    return directory / "fuzz.pt2", marker, seeds


def byte_mutations(seed: bytes) -> st.SearchStrategy[bytes]:
    """Edits, truncation and splices of ``seed``."""
    n = len(seed)
    edit = st.tuples(st.integers(0, max(n - 1, 0)), st.integers(0, 255))
    big = st.sampled_from(
        [b"\xff" * 8, b"\x00" * 8, (2**63).to_bytes(8, "little"), b"\x7f\xff\xff\xff"]
    )

    @st.composite
    def mutate(draw) -> bytes:
        data = bytearray(seed)
        for pos, value in draw(st.lists(edit, max_size=16)):
            data[pos] = value
        if draw(st.booleans()):
            pos = draw(st.integers(0, n))
            data[pos : pos + 8] = draw(big)
        return bytes(data[: draw(st.integers(0, n + 8))])

    return mutate()


HOSTILE_JSON = st.one_of(
    st.sampled_from([10**6, 10**400, -1, 0, 16.5, 1e308, float("inf"), True, None, "x", [], {},
                     "/dev/zero", "../x", "/etc/passwd", "a/../../b", 2**63, -(2**63)]),
    st.integers(), st.floats(), st.text(max_size=8),
    st.recursive(st.integers(-3, 3), lambda c: st.lists(c, max_size=3), max_leaves=50),
)  # fmt: skip


def json_paths(value, prefix=()) -> list[tuple]:
    if isinstance(value, dict):
        return [prefix] + [p for k, v in value.items() for p in json_paths(v, (*prefix, k))]
    if isinstance(value, list):
        return [prefix] + [p for i, v in enumerate(value) for p in json_paths(v, (*prefix, i))]
    return [prefix]


def state_mutations(state: dict) -> st.SearchStrategy[str]:
    paths = [p for p in json_paths(state) if p]

    @st.composite
    def mutate(draw) -> str:
        doc = json.loads(json.dumps(state))
        for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=4)):
            node = doc
            try:
                for key in path[:-1]:
                    node = node[key]
                node[path[-1]] = copy.deepcopy(draw(HOSTILE_JSON))  # never one object twice
            except (KeyError, IndexError, TypeError):
                continue  # an earlier edit replaced a parent
        if draw(st.integers(0, 19)) == 0:
            return "[" * 50_000 + "]" * 50_000
        return json.dumps(doc)

    return mutate()


LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 96, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": [2, 3],
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 16},
    "rope_scaling": {"type": "linear", "factor": 2.0}, "rope_theta": 500000.0,
    "sliding_window": 8, "attention_bias": False, "dtype": "bfloat16",
}  # fmt: skip


def tokenizer_seed() -> bytes:
    """A llama2.c tokenizer.bin: <unk>, <s>, </s>, the 256 byte pieces, a few merges."""
    import struct

    pieces = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{b:02X}>".encode() for b in range(256)]
    pieces += [b" O", b"nc", b"e ", b" Onc", b" Once", b"up", b"on", b" a", b" t", b"im"]
    data = struct.pack("<i", max(len(p) for p in pieces))
    for i, piece in enumerate(pieces):
        data += struct.pack("<fi", float(-i), len(piece)) + piece
    return data


def llama2c_seed() -> bytes:
    """A tiny legacy (version 0) llama2.c checkpoint: header and float32 weights."""
    import struct

    dim, hidden, layers, heads, kv, vocab, seq = 8, 16, 1, 2, 1, 12, 4
    header = struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq)
    kv_dim = dim // heads * kv
    count = vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * kv_dim * dim + 3 * dim * hidden)
    count += dim + seq * (dim // heads)
    return header + np.linspace(-1, 1, count, dtype=np.float32).tobytes()


def gguf_seed(directory: Path) -> bytes:
    """A small llama GGUF file (one layer, F32 and F16 tensors, a SentencePiece vocabulary)."""
    import gguf

    from tests.gguf_models import spm_vocab

    tokens, scores, types = spm_vocab()
    dim, ff, vocab = 16, 32, len(tokens)
    path = directory / "seed.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    for add, value in ((w.add_context_length, 64), (w.add_embedding_length, dim),
                       (w.add_block_count, 1), (w.add_feed_forward_length, ff),
                       (w.add_head_count, 2), (w.add_head_count_kv, 1),
                       (w.add_layer_norm_rms_eps, 1e-5), (w.add_vocab_size, vocab)):  # fmt: skip
        add(value)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (vocab, dim), "output_norm.weight": (dim,),
              "blk.0.attn_norm.weight": (dim,), "blk.0.attn_q.weight": (dim, dim),
              "blk.0.attn_k.weight": (dim // 2, dim), "blk.0.attn_v.weight": (dim // 2, dim),
              "blk.0.attn_output.weight": (dim, dim), "blk.0.ffn_norm.weight": (dim,),
              "blk.0.ffn_gate.weight": (ff, dim), "blk.0.ffn_up.weight": (ff, dim),
              "blk.0.ffn_down.weight": (dim, ff)}  # fmt: skip
    for name, shape in shapes.items():
        dtype = np.float32 if len(shape) == 1 else np.float16
        w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(dtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def header_mutations(seed: bytes, header: int) -> st.SearchStrategy[bytes]:
    """``seed`` with its first ``header`` bytes edited (int32 fields set to hostile values)."""
    fields = st.sampled_from([0, 1, -1, 2, 3, 2**31 - 1, -(2**31), 2**16, 2**20, 7, 4096])

    @st.composite
    def mutate(draw) -> bytes:
        import struct

        data = bytearray(seed)
        for slot in draw(st.lists(st.integers(0, header // 4 - 1), max_size=4)):
            struct.pack_into("<i", data, 4 * slot, draw(fields))
        if draw(st.booleans()):
            data = data[: draw(st.integers(0, len(data)))]
        return bytes(data)

    return mutate()


def pt2_mutations(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    """Byte mutations of plain and hostile ``.pt2`` archives, and archives whose payload
    configs have hostile JSON values (each config rewritten, the zip rebuilt)."""
    from tests import pt2_craft

    def rebuilt(seed: bytes) -> st.SearchStrategy[bytes]:
        files = pt2_craft.members_of(seed)
        configs = [n for n in files if n.endswith("_config.json")]

        @st.composite
        def mutate(draw) -> bytes:
            name = draw(st.sampled_from(configs))
            copy = dict(files)
            copy[name] = draw(state_mutations(json.loads(files[name]))).encode()
            return pt2_craft.zip_of(copy)

        return mutate()

    return st.one_of(*[byte_mutations(s) for s in seeds], *[rebuilt(s) for s in seeds])


def targets(work: Path) -> dict[str, tuple[st.SearchStrategy, Callable[[object], None]]]:
    """Target name -> (inputs, what to do with one)."""
    from anekit.inspect.flatbuf import read_flatbuffer, render, to_plain
    from anekit.inspect.hwx import read_hwx
    from anekit.inspect.report import describe
    from anekit.train.loop import load_model

    def hwx(data: bytes) -> None:
        read_hwx(data, file="fuzz.hwx")
        describe(data, "fuzz.hwx")

    def flatbuffer(data: bytes) -> None:
        fb = read_flatbuffer(data)
        to_plain(fb)
        render(fb)

    model = weighted_model(work / "model")
    weight_file = model / "weights" / "weight.bin"
    if not weight_file.exists():
        weight_file = next((model / "weights").iterdir())
    weight_seed = weight_file.read_bytes()

    def weights(data: bytes) -> None:
        weight_file.write_bytes(data)
        mil.load(model)

    ckpt, trainer = small_checkpoint(work / "run")
    state_file = ckpt / "state.json"
    state_seed = state_file.read_text()
    tensor_file = ckpt / "model.safetensors"
    tensor_seed = tensor_file.read_bytes()

    def state(text: str) -> None:
        state_file.write_text(text)
        try:
            load_model(ckpt)
        finally:
            trainer.restore(ckpt)

    def safetensors(data: bytes) -> None:
        import hashlib

        tensor_file.write_bytes(data)
        doc = json.loads(state_seed)
        doc["files"]["model.safetensors"] = hashlib.sha256(data).hexdigest()  # past the digest
        state_file.write_text(json.dumps(doc))
        load_model(ckpt)

    from anekit.llm.config import read_config
    from anekit.llm.llama2c import Llama2cCheckpoint
    from anekit.train.data import Llama2cTokenizer

    config_dir = work / "hf"
    config_dir.mkdir()

    def config(text: str) -> None:
        (config_dir / "config.json").write_text(text)
        c = read_config(config_dir)
        c.rope.inv_freq(c.head_dim)
        c.n_params()

    def tokenizer(data: bytes) -> None:
        tok = Llama2cTokenizer.from_bytes(data, "fuzz tokenizer.bin")
        tok.decode(tok.encode("Once upon a time, ünïcode"))

    gguf_file = work / "fuzz.gguf"

    def gguf_model(data: bytes) -> None:
        from anekit.llm import gguf

        gguf_file.write_bytes(data)
        config, source, tok = gguf.read(gguf_file)
        shape = (config.vocab_size, config.dim)
        if source.shape("model.embed_tokens.weight") == shape:
            source.read_into(
                "model.embed_tokens.weight", shape, np.empty(shape, np.float16).ravel()
            )
        if tok is not None:
            tok.decode(tok.encode("Once upon a time"))

    checkpoint = work / "stories.bin"

    def llama2c(data: bytes) -> None:
        checkpoint.write_bytes(data)
        source = Llama2cCheckpoint(checkpoint)
        c = source.config
        shape = (c.vocab_size, c.dim)
        source.read_into("model.embed_tokens.weight", shape, np.empty(shape, np.float16).ravel())

    pt2_file, pt2_marker, pt2_seeds = pt2_seeds_in(work / "pt2")

    def pt2(data: bytes) -> None:
        from anekit.frontends.torch.archive import load_exported

        pt2_file.write_bytes(data)
        try:
            load_exported(pt2_file)
        finally:
            if pt2_marker.exists():  # a payload ran: the worst outcome, never an AnekitError
                pt2_marker.rmdir()
                raise RuntimeError("PAYLOAD RAN: the archive executed code")

    return {
        "config.json": (state_mutations(LLAMA_CONFIG), config),
        "tokenizer.bin": (byte_mutations(tokenizer_seed()), tokenizer),
        "llama2c": (header_mutations(llama2c_seed(), 28), llama2c),
        "gguf": (byte_mutations(gguf_seed(work)), gguf_model),
        "pt2": (pt2_mutations(pt2_seeds), pt2),
        "hwx": (byte_mutations(hwx_seed()), hwx),
        "flatbuffer": (byte_mutations(flatbuffer_seed()), flatbuffer),
        "weights": (byte_mutations(weight_seed), weights),
        "state.json": (state_mutations(json.loads(state_seed)), state),
        "safetensors": (byte_mutations(tensor_seed), safetensors),
    }


# ---- the loop -------------------------------------------------------------------------------


def fuzz(strategy: st.SearchStrategy, action: Callable[[object], None], seconds: float) -> dict:
    counts = {"inputs": 0, "non_anekit": 0, "hangs": 0, "memory": 0, "kinds": {}, "examples": []}
    stop = time.monotonic() + seconds

    def note(kind: str, detail: str) -> None:
        counts[kind] += 1
        name = detail.split(":")[0] if kind == "non_anekit" else kind
        counts["kinds"][name] = counts["kinds"].get(name, 0) + 1
        if len(counts["examples"]) < 5:
            counts["examples"].append(f"{kind}: {detail}")

    @settings(max_examples=10**9, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(strategy)
    def one(value) -> None:
        if time.monotonic() > stop and counts["inputs"] >= MIN_INPUTS:
            raise TimeUp
        counts["inputs"] += 1
        signal.setitimer(signal.ITIMER_REAL, PER_INPUT_SECONDS)
        try:
            action(value)
        except AnekitError:
            pass
        except Hang:
            note("hangs", repr(value)[:120])
        except MemoryError as e:
            where = traceback.extract_tb(e.__traceback__)[-1]
            note("memory", f"{repr(value)[:80]} at {where.filename}:{where.lineno}")
        except Exception as e:  # what the readers must never raise
            where = traceback.extract_tb(e.__traceback__)[-1]
            note(
                "non_anekit",
                f"{type(e).__name__}: {str(e)[:100]} at {where.filename}:{where.lineno}",
            )
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    try:
        one()
    except TimeUp:
        pass
    return counts


def main(argv: list[str]) -> int:
    seconds = float(argv[0])
    signal.signal(signal.SIGALRM, _alarm)
    work = Path(tempfile.mkdtemp(prefix="anekit-fuzz-"))
    try:
        table = targets(work)
        chosen = argv[1:] or list(table)
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        used = _address_space()
        resource.setrlimit(resource.RLIMIT_AS, (used + MEMORY_HEADROOM, hard))
        results = {name: fuzz(*table[name], seconds) for name in chosen}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results))
    return 0


def _address_space() -> int:
    """Bytes of virtual memory this process holds now (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
