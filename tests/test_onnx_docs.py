"""docs/onnx.md: its op table is the op table's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parent.parent


def test_op_table_up_to_date() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_onnx_ops
    finally:
        sys.path.pop(0)
    doc = (ROOT / "docs" / "onnx.md").read_text(encoding="utf-8")
    assert gen_onnx_ops.render(doc) == doc, "run python tools/gen_onnx_ops.py"
