"""``anekit generate``: settings are checked before a checkpoint is read."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from anekit.cli import build_parser, main


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--tokens", "-1"), ("--top-k", "-3"), ("--temperature", "-0.5"), ("--temperature", "nan")],
)
def test_generate_rejects_negative_or_nan_settings(flag: str, value: str, capsys) -> None:
    assert main(["generate", "--ckpt", "x", flag, value]) == 2
    err = capsys.readouterr().err
    name = "--max-tokens/--tokens" if flag == "--tokens" else flag  # --tokens: --max-tokens' alias
    assert f"argument {name}: expected a finite number >= 0, found '{value}'" in err


def test_generate_settings_keep_their_values() -> None:
    args = build_parser().parse_args(
        ["generate", "--ckpt", "x", "--tokens", "0", "--temperature", "0.25", "--top-k", "7"]
    )
    assert (args.max_tokens, args.temperature, args.top_k) == (0, 0.25, 7)
    assert isinstance(args.max_tokens, int) and math.isclose(args.temperature, 0.25)


def test_a_missing_checkpoint_is_one_line_naming_it(tmp_path: Path, capsys) -> None:
    ckpt = tmp_path / "nothing"
    assert main(["generate", "--ckpt", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"anekit generate: error: {ckpt}: ") and err.count("\n") == 1
