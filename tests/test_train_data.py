"""Training data: text, llama2.c .bin and tokenizer.bin, the default corpus, resumable batches."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from anekit.errors import UsageError
from anekit.train.data import (
    Batches,
    ByteTokenizer,
    Llama2cTokenizer,
    default_corpus,
    load_data,
    tokenizer_from,
)


def write_tokenizer(path: Path, pieces: list[tuple[bytes, float]]) -> None:
    """A llama2.c tokenizer.bin: i32 max length, then per token f32 score, i32 length, bytes."""
    data = struct.pack("<i", max(len(p) for p, _ in pieces))
    for piece, score in pieces:
        data += struct.pack("<fi", score, len(piece)) + piece
    path.write_bytes(data)


def small_vocab() -> list[tuple[bytes, float]]:
    specials = [(b"<unk>", 0.0), (b"<s>", 0.0), (b"</s>", 0.0)]
    raw = [(f"<0x{i:02X}>".encode(), 0.0) for i in range(256)]
    merges = [
        (b" ", -1.0),
        (b"a", -1.0),
        (b"b", -1.0),
        (b"ab", -2.0),
        (b" a", -3.0),
        (b" ab", -0.5),
    ]
    return specials + raw + merges


def test_llama2c_tokenizer_merges_by_score_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.bin"
    write_tokenizer(path, small_vocab())
    tok = Llama2cTokenizer(path)
    assert tok.vocab_size == 3 + 256 + 6
    ids = tok.encode("ab ab")
    pieces = [tok.pieces[i] for i in ids[1:]]
    # " a" + "b" would score -3 then -0.5; "a" + "b" scores -2 first, then " " + "ab" (-0.5)
    assert ids[0] == 1 and pieces == [b" ab", b" ab"]
    assert tok.decode(ids) == "ab ab"
    # "é" has no piece: it falls back to its UTF-8 bytes, token id 3 + byte
    ids = tok.encode("é")
    assert ids[2:] == [3 + b for b in "é".encode()]
    assert tok.decode(ids) == "é"
    assert tokenizer_from(tok.describe(), tok.stored_files()).pieces == tok.pieces


def test_truncated_tokenizer_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.bin"
    write_tokenizer(path, small_vocab())
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(UsageError, match="past the end of the file"):
        Llama2cTokenizer(path)


def test_llama2c_bin_needs_its_tokenizer_and_valid_ids(tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    np.array([1, 260, 5, 7], dtype="<u2").tofile(data)
    with pytest.raises(UsageError, match="tokenizer.bin not found"):
        load_data(data)
    write_tokenizer(tmp_path / "tokenizer.bin", small_vocab())
    tokens, tok = load_data(data)
    assert list(tokens) == [1, 260, 5, 7] and tok.vocab_size == 265
    np.array([1, 265], dtype="<u2").tofile(data)
    with pytest.raises(UsageError, match="token id 265 is outside the vocabulary"):
        load_data(data)
    data.write_bytes(b"\x01\x00\x02")
    with pytest.raises(UsageError, match="not a whole number of uint16 tokens"):
        load_data(data)


def test_text_and_default_corpus_are_bytes(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("héllo", encoding="utf-8")
    tokens, tok = load_data(text)
    assert list(tokens) == list("héllo".encode()) and isinstance(tok, ByteTokenizer)
    assert tok.decode(tok.encode("héllo")) == "héllo"
    corpus = default_corpus()
    assert corpus.dtype == np.uint8 and len(corpus) > 100_000
    assert b"assignment" in corpus[:400_000].tobytes()


def test_batches_visit_every_window_once_per_epoch_and_resume() -> None:
    tokens = np.arange(41, dtype=np.uint16)  # 5 windows of 8 (+1 target)
    b = Batches(tokens, seq=8, seed=3)
    rows = np.concatenate([b.next(2) for _ in range(5)])  # two epochs
    starts = rows[:, 0]
    assert sorted(starts[:5]) == [0, 8, 16, 24, 32] and sorted(starts[5:]) == [0, 8, 16, 24, 32]
    assert all(np.array_equal(r, np.arange(r[0], r[0] + 9)) for r in rows)
    assert list(starts[:5]) != list(starts[5:])  # a new order each epoch
    b = Batches(tokens, seq=8, seed=3)
    b.next(3)
    resumed = Batches(tokens, seq=8, **b.state())
    assert np.array_equal(resumed.next(4), b.next(4))
    with pytest.raises(ValueError, match="needs at least 9"):
        Batches(tokens[:8], seq=8, seed=0)
