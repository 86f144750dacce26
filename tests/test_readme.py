"""The README's quick start runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parent.parent / "README.md"


def test_quick_start_runs(tmp_path, monkeypatch, capsys) -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S).group(1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANEKIT_BACKEND", "reference")
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)
    assert scope["out"]["y"].shape == (1, 128, 1, 32) and scope["out"]["y"].dtype == np.float16
    assert (scope["out"]["y"] >= 0).all()  # relu
    assert (tmp_path / "model" / "model.mil").is_file()
    assert (tmp_path / "model" / "weights" / "w.bin").is_file()
    printed = capsys.readouterr().out
    assert printed.startswith("program(1.3)")
    assert "legacy-dialect" in printed  # the m1 check found the dialect warning
