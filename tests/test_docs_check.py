"""tools/docs_check.py: generated blocks are compared with their data, drift fails, --write fixes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "docs_check.py"


@pytest.fixture
def tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    spec = importlib.util.spec_from_file_location("docs_check_under_test", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "docs").mkdir()
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "load_generators", lambda: {"answer": lambda: "42 tok/s"})
    return module


def test_a_drifted_block_fails_and_write_fixes_it(tool, tmp_path: Path) -> None:
    doc = tmp_path / "docs" / "a.md"
    doc.write_text("x\n<!-- docs-check: answer -->\n41 tok/s\n<!-- /docs-check -->\ny\n")
    (tmp_path / "README.md").write_text("no blocks\n")
    assert tool.main([]) == 1
    assert tool.check(write=True) == ["docs/a.md: block 'answer' differs from its data (rewritten)"]
    assert doc.read_text() == "x\n<!-- docs-check: answer -->\n42 tok/s\n<!-- /docs-check -->\ny\n"
    assert tool.main([]) == 0


def test_unknown_blocks_and_unused_generators_are_reported(tool, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("<!-- docs-check: other -->\n<!-- /docs-check -->\n")
    assert tool.check(write=False) == [
        "README.md: block 'other' has no generator",
        "generator 'answer' is used by no document",
    ]


def test_hand_written_numbers_need_a_source(tool, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("no numbers\n")
    (tmp_path / "tools").mkdir()
    doc = tmp_path / "docs" / "a.md"
    doc.write_text(
        "<!-- docs-check: answer -->\n42 tok/s\n<!-- /docs-check -->\n\nIt runs at 12 ms.\n"
    )
    problems = tool.check_numbers()
    assert len(problems) == 1 and "It runs at 12 ms." in problems[0]
    assert tool.main([]) == 1
    doc.write_text("<!-- docs-check: answer -->\n42 tok/s\n<!-- /docs-check -->\n\n"
                   "It runs at 12 ms (measured: `benchmarks/x.py`).\n")  # fmt: skip
    assert tool.check_numbers() == [] and tool.main([]) == 0
    doc.write_text(
        "<!-- docs-check: answer -->\n42 tok/s\n<!-- /docs-check -->\n\nIt runs at 12 ms.\n"
    )
    tool.check_numbers(write_baseline=True)  # a number the baseline lists passes
    assert tool.check_numbers() == []


def test_an_inline_block_holds_one_generated_phrase(tool, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("no blocks\n")
    doc = tmp_path / "docs" / "a.md"
    doc.write_text("It decodes at <!-- docs-check: answer -->40 tok/s<!-- /docs-check --> here.\n")
    assert tool.check(write=True) == ["docs/a.md: block 'answer' differs from its data (rewritten)"]
    assert doc.read_text() == (
        "It decodes at <!-- docs-check: answer -->42 tok/s<!-- /docs-check --> here.\n"
    )
    assert tool.check(write=False) == [] and tool.unsourced_lines() == []
    tool.load_generators = lambda: {"answer": lambda: "two\nlines"}
    assert tool.check(write=False) == ["docs/a.md: inline block 'answer' needs one line"]


def test_numbers_in_inline_code_are_code_not_figures(tool, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("Compiles `y = 2x + 1` on `[1, 64]`.\n\nIt takes 3 ms.\n")
    assert tool.unsourced_lines() == ["README.md: It takes 3 ms."]
