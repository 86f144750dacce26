"""Generate the op-coverage table of ``docs/onnx.md`` from the ONNX op table.

``anekit/frontends/onnx/ops/__init__.py`` declares every ONNX op the front end lowers;
the table between the ``ops:begin``/``ops:end`` markers of ``docs/onnx.md`` lists them.
tests/test_onnx_docs.py checks it is up to date; regenerate with
``python tools/gen_onnx_ops.py``.
"""

from __future__ import annotations

import inspect
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "onnx.md"
BEGIN, END = "<!-- ops:begin (tools/gen_onnx_ops.py) -->", "<!-- ops:end -->"


def table() -> str:
    """One row per lowering, with every ONNX op type it handles and what it emits."""
    from anekit.frontends.onnx.ops import OPS

    by_doc: dict[str, list[str]] = defaultdict(list)
    for op, fn in OPS.items():
        summary = " ".join((inspect.getdoc(fn) or "").split("\n\n")[0].split())
        by_doc[summary.replace("``", "`").replace("|", "\\|")].append(f"`{op}`")
    rows = ["| ONNX ops | what they become |", "|---|---|"]
    rows += [f"| {', '.join(ops)} | {summary} |" for summary, ops in by_doc.items()]
    return "\n".join(rows) + f"\n\n{len(OPS)} op types (default domain, opsets 13-21).\n"


def render(doc: str) -> str:
    """``doc`` with the generated table between the markers."""
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}{END}{tail}"


if __name__ == "__main__":
    DOC.write_text(render(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    sys.exit(0)
