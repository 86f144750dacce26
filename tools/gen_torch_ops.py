"""Generate the op-coverage table of ``docs/torch.md`` from the lowering table.

``anekit/frontends/torch/lowerings/__init__.py`` declares every ATen overload the
converter lowers; the table between the ``ops:begin``/``ops:end`` markers of
``docs/torch.md`` lists them. tests/test_torch_docs.py checks it is up to date;
regenerate with ``python tools/gen_torch_ops.py``.
"""

from __future__ import annotations

import inspect
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "torch.md"
BEGIN, END = "<!-- ops:begin (tools/gen_torch_ops.py) -->", "<!-- ops:end -->"


def table() -> str:
    """The coverage table: one row per lowering function, with every overload it handles."""
    from anekit.frontends.torch.lowerings import LOWERINGS

    by_fn: dict[object, list[str]] = defaultdict(list)
    for op, fn in LOWERINGS.items():
        by_fn[fn].append(f"`{op}`")
    rows = ["| ATen overloads | lowering | what it emits |", "|---|---|---|"]
    for fn, ops in by_fn.items():
        module = fn.__module__.rsplit(".", 1)[-1]
        summary = (inspect.getdoc(fn) or f"MIL ``{fn.__name__}``").split("\n")[0]
        summary = summary.replace("``", "`").replace("|", "\\|")
        rows.append(f"| {', '.join(ops)} | `{module}.{fn.__qualname__}` | {summary} |")
    return "\n".join(rows) + f"\n\n{len(LOWERINGS)} overloads.\n"


def render(doc: str) -> str:
    """``doc`` with the generated table between the markers."""
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}{END}{tail}"


def main() -> int:
    doc = DOC.read_text(encoding="utf-8")
    new = render(doc)
    if "--check" in sys.argv[1:]:
        return 0 if new == doc else 1
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
