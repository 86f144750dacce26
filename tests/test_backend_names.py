"""Values, not names: no code outside ``backends/`` and ``cli/`` tests which backend it runs on.

A backend declares what callers need to know (``anekit.backends.capabilities``: the compile
budget, whether fp16 host arrays are free, the options shared buffers need), so a caller
asks for a capability; a comparison with a backend's name is a second place for a fact
the backend owns.
"""

from __future__ import annotations

import re
from pathlib import Path

from anekit import backends

ROOT = Path(__file__).resolve().parent.parent / "anekit"
ALLOWED = ("backends", "cli")  # where a backend is chosen by name
NAMES = "|".join(sorted({*backends.BACKENDS, "coreml"}))
# x == "name", "name" != x, x in ("name", ...), {"name": ...} (a table keyed by backend)
COMPARISON = re.compile(
    rf"""(==|!=|\bin\b)\s*[\(\[{{]?\s*["']({NAMES})["']"""
    rf"""|["']({NAMES})["']\s*(==|!=)"""
    rf"""|\{{\s*["']({NAMES})["']\s*:"""  # a table keyed by a backend's name
)


def name_tests(root: Path = ROOT) -> list[str]:
    """Every line outside the allowed packages that compares with a backend's name."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] in ALLOWED:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if COMPARISON.search(line.split("#")[0]):
                found.append(f"{path.relative_to(root.parent)}:{number}: {line.strip()}")
    return found


def test_no_backend_name_comparisons_outside_backends_and_cli() -> None:
    found = name_tests()
    assert not found, "compare a capability, not a name:\n" + "\n".join(found)


def test_the_grep_sees_each_spelling(tmp_path) -> None:
    pkg = tmp_path / "anekit"
    (pkg / "llm").mkdir(parents=True)
    (pkg / "cli").mkdir()
    lines = [
        'hold = "fp32" if self.backend == "reference" else "fp16"',
        'if backend != "ane":',
        'if "ane" == kernel.backend:',
        'if name in ("reference", "coreml"):',
        'options = {"ane": {"pack_inputs": False}}.get(self.backend, {})',
        'COMPILE_OPTIONS: dict[str, dict] = {"ane": {"pack_inputs": False}}',
        'backend = "reference"  # a default is not a comparison',
    ]
    (pkg / "llm" / "m.py").write_text("\n".join(lines) + "\n")
    (pkg / "cli" / "c.py").write_text('if backend == "ane":\n')  # choosing by name: allowed
    found = name_tests(pkg)
    assert [line.split(":")[1] for line in found] == ["1", "2", "3", "4", "5", "6"]


def test_capabilities_are_declared_beside_the_compile_budget() -> None:
    ane, reference = backends.capabilities("ane"), backends.capabilities("reference")
    assert ane.compile_budget == backends.compile_budget("ane") and ane.compile_budget > 0
    assert reference.compile_budget is None
    assert ane.host_fp16 and not reference.host_fp16
    assert ane.shared_buffer_options == {"pack_inputs": False}
    assert reference.shared_buffer_options == {}
