"""Hostile command lines: every one is a one-line error and exit 2, checked before work starts."""

from __future__ import annotations

import io
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from anekit.cli.run import random_array
from tests.clitools import run, weighted_program

pytest.importorskip("safetensors")

FAST = ["--batch-size", "1", "--backend", "reference", "--warmup", "1", "--sample-tokens", "0",
        "--chip", "m4"]  # fmt: skip


def saved_model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    weighted_program().save(model)
    return model


def one_line_usage_error(result: tuple[int, str, str], pattern: str) -> None:
    code, _, err = result
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("anekit "), err
    assert pattern in err, err


def npy_header(shape: tuple[int, ...]) -> bytes:
    """A .npy v1 header for float32 ``shape`` and no data after it."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}".encode()
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not a .npy file"),  # np.load raised EOFError
        (npy_header((1, 4)), "cannot read as .npy"),  # header, no data
        (npy_header((2**40, 4)), "cannot read as .npy"),  # 16 TiB claimed by 128 bytes
    ],
)
def test_run_input_files_that_are_not_arrays(tmp_path: Path, capsys, content, message) -> None:
    bad = tmp_path / "x.npy"
    bad.write_bytes(content)
    result = run(
        capsys, "run", str(saved_model(tmp_path)), "--backend", "reference", "--input", f"x={bad}"
    )
    one_line_usage_error(result, message)


def test_run_input_from_a_fifo_does_not_block(tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "x.npy"
    os.mkfifo(fifo)
    start = time.monotonic()
    result = run(capsys, "run", str(saved_model(tmp_path)), "--input", f"x={fifo}")
    one_line_usage_error(result, "is a FIFO (named pipe); expected a .npy file")
    assert time.monotonic() - start < 10


def test_run_random_seed_must_not_be_negative(tmp_path: Path, capsys) -> None:
    result = run(capsys, "run", str(saved_model(tmp_path)), "--random", "--seed", "-1")
    one_line_usage_error(result, "argument --seed: expected a finite number >= 0")


def test_random_inputs_are_drawn_in_float32_and_stored_in_the_input_dtype() -> None:
    got = random_array(np.random.default_rng(5), (3, 5), np.float16, "x")
    expected = np.random.default_rng(5).standard_normal(15, dtype=np.float32).astype(np.float16)
    assert got.dtype == np.float16 and np.array_equal(got.reshape(-1), expected)
    ints = random_array(np.random.default_rng(5), (100,), np.int8, "i")
    assert ints.dtype == np.int8 and 0 <= ints.min() and ints.max() < 8
    flags = random_array(np.random.default_rng(5), (100,), np.bool_, "b")
    assert flags.dtype == np.bool_ and 0 < flags.sum() < 100


def test_random_input_larger_than_memory_is_refused_before_allocating() -> None:
    from anekit.errors import UsageError

    with pytest.raises(UsageError, match=r"--random: input 'x' float16\[1, 65536, 1, 2147483648\]"):
        random_array(np.random.default_rng(0), (1, 65536, 1, 2**31), np.float16, "x")


def test_train_prompt_that_is_not_utf8_fails_before_training(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    prompt = os.fsdecode(b"\xff")  # what Python makes of the argument $'\xff'
    result = run(capsys, "train", "--steps", "1", "--out", str(out), "--prompt", prompt, *FAST)
    one_line_usage_error(result, "argument --prompt: expected UTF-8 text, found byte 0xff")
    assert not out.exists()  # nothing trained, nothing saved


def test_generate_prompt_that_is_not_utf8(capsys) -> None:
    result = run(capsys, "generate", "--ckpt", "x", "--prompt", "a\udcfe")
    one_line_usage_error(result, "found byte 0xfe")


def test_train_batch_size_beyond_memory_is_a_usage_error(tmp_path: Path, capsys) -> None:
    start = time.monotonic()
    result = run(
        capsys, "train", "--batch-size", "1000000", "--chip", "m4", "--out", str(tmp_path / "o")
    )
    one_line_usage_error(
        result, "batch size 1000000: a training step of config tiny needs at least"
    )
    assert time.monotonic() - start < 30 and not (tmp_path / "o").exists()


def test_train_log_creates_its_directory(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the command in docs/training.md, in a fresh directory
    code, _, err = run(capsys, "train", "--steps", "1", "--log", "out/x.jsonl", "--out", "o", *FAST)
    assert code == 0, err
    assert len((tmp_path / "out" / "x.jsonl").read_text().splitlines()) == 1


def test_train_with_an_exploding_learning_rate_exits_2_unsaved(tmp_path: Path, capsys) -> None:
    out = tmp_path / "o"
    result = run(capsys, "train", "--steps", "2", "--lr", "1e300", "--out", str(out), *FAST)
    one_line_usage_error(result, "parameters became non-finite (first: embed[0, 0] = ")
    assert not (out / "LATEST").exists()


def test_train_data_fifo_and_tokenizer_fifo(tmp_path: Path, capsys) -> None:
    os.mkfifo(tmp_path / "data.txt")
    result = run(capsys, "train", "--data", str(tmp_path / "data.txt"), *FAST)
    one_line_usage_error(result, "is a FIFO (named pipe); expected training text")
    (tmp_path / "tokens.bin").write_bytes(bytes(600))
    os.mkfifo(tmp_path / "tokenizer.bin")
    result = run(capsys, "train", "--data", str(tmp_path / "tokens.bin"), *FAST)
    one_line_usage_error(result, "is a FIFO (named pipe); expected a llama2.c tokenizer.bin")


@pytest.mark.parametrize("command", ["fmt", "check", "estimate"])
def test_shape_commands_work_without_weight_files(tmp_path: Path, capsys, command) -> None:
    model = saved_model(tmp_path)
    code, before, _ = (
        run(capsys, command, str(model), "--chip", "m4")
        if command != "fmt"
        else run(capsys, command, str(model))
    )
    for f in (model / "weights").iterdir():
        f.unlink()
    code_after, after, err = (
        run(capsys, command, str(model), "--chip", "m4")
        if command != "fmt"
        else run(capsys, command, str(model))
    )
    assert (code, before) == (code_after, after) and code in (0, 1), err
    assert "BLOBFILE" in (model / "model.mil").read_text()


@pytest.mark.parametrize("command", ["fmt", "check", "estimate"])
def test_shape_commands_read_stdin(tmp_path: Path, capsys, monkeypatch, command) -> None:
    model = saved_model(tmp_path)
    extra = [] if command == "fmt" else ["--chip", "m4"]
    expected = run(capsys, command, str(model / "model.mil"), *extra)
    text = (model / "model.mil").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    code, out, err = run(capsys, command, "-", *extra)
    assert (code, out.replace("<stdin>", "X")) == (
        expected[0],
        expected[1].replace(str(model / "model.mil"), "X"),
    ), err


def test_fmt_check_on_stdin(capsys, monkeypatch, tmp_path: Path) -> None:
    text = (saved_model(tmp_path) / "model.mil").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    assert run(capsys, "fmt", "--check", "-")[0] == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.replace(b"    ", b"  "))))
    assert run(capsys, "fmt", "--check", "-")[0] == 1


def test_inspect_refuses_a_fifo_and_a_device(tmp_path: Path, capsys) -> None:
    os.mkfifo(tmp_path / "p.hwx")
    one_line_usage_error(run(capsys, "inspect", str(tmp_path / "p.hwx")), "is a FIFO")
    one_line_usage_error(run(capsys, "inspect", "/dev/zero"), "is a character device")
