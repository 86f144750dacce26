"""docs/torch.md: the worked example runs as written, the op table matches the lowering table."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "torch.md"
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_op_table_is_generated_from_the_lowering_table() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_torch_ops
    finally:
        sys.path.remove(str(ROOT / "tools"))
    doc = DOC.read_text(encoding="utf-8")
    assert gen_torch_ops.render(doc) == doc, "run python tools/gen_torch_ops.py"
    from anekit.frontends.torch import LOWERINGS

    for op in LOWERINGS:  # every overload appears in the doc
        assert f"`{op}`" in doc


def test_worked_example_runs(tmp_path, monkeypatch, capsys) -> None:
    code = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S).group(1)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, str(DOC), "exec"), scope)
    assert scope["errors"] == []
    assert [v.name for v in scope["prog"].outputs] == ["last_hidden_state", "pooler_output"]
    assert (tmp_path / "bert_tiny" / "model.mil").is_file()
    printed = capsys.readouterr().out
    assert "('input_ids', 'int32', (1, 16))" in printed
    assert "fidelity vs PyTorch fp32" in printed and "ms on an M4" in printed
