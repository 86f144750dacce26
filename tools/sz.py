"""Print the size of the code base (lines per package, registered ops); fail on a file over the cap."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# One concept per file: a module longer than this is split, not grown (STYLE.md, rule 11).
MAX_FILE_LINES = 600


def code_lines(path: Path) -> int:
    """Lines that are neither blank nor comments."""
    return sum(
        1
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.strip().startswith("#")
    )


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from anekit.mil.ops import registry

    per_package: Counter[str] = Counter()
    largest = []
    too_long = []
    for path in sorted((ROOT / "anekit").rglob("*.py")):
        n = code_lines(path)
        package = path.relative_to(ROOT / "anekit").parts[0]
        per_package[package.removesuffix(".py")] += n
        largest.append((n, path.relative_to(ROOT)))
        physical = len(path.read_text(encoding="utf-8").splitlines())
        if physical > MAX_FILE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {physical} lines (cap {MAX_FILE_LINES})")
    for package, n in sorted(per_package.items(), key=lambda kv: -kv[1]):
        print(f"{n:7d}  anekit/{package}")
    print(f"{sum(per_package.values()):7d}  total lines of code")
    print(f"{len(registry.names()):7d}  registered MIL ops")
    n, path = max(largest)
    print(f"largest file: {path} ({n} lines of code)")
    for line in too_long:
        print(f"error: {line}", file=sys.stderr)
    return 1 if too_long else 0


if __name__ == "__main__":
    sys.exit(main())
