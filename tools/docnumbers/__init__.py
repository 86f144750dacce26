"""Generators of the numbers the docs quote: one function per marked block, registered by name.

A block in README.md or docs/*.md::

    <!-- docs-check: NAME -->
    (whatever GENERATORS[NAME]() returns, written by tools/docs_check.py --write)
    <!-- /docs-check -->

or, inside a sentence, a list item or a table cell, inline (no newline after the opening
marker; the generator returns one line)::

    retried once after <!-- docs-check: ane-load-retry -->100 ms<!-- /docs-check -->;

A fact of the code (a limit, a delay, a shape) is generated from the constant that sets it
(``code_facts.py``), so changing the constant without the doc fails ``make docs-check``.

Each module of this package registers its generators with :func:`generates`; every
generator computes its text from a measurement file or the package's published data, so
``make docs-check`` fails when a doc drifts from the data it quotes.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
Generator = Callable[[], str]
GENERATORS: dict[str, Generator] = {}


def generates(name: str) -> Callable[[Generator], Generator]:
    """Register the decorated function as the generator of block ``name`` (once per name)."""

    def register(fn: Generator) -> Generator:
        if name in GENERATORS:
            raise ValueError(f"docs-check block {name!r} is generated twice")
        GENERATORS[name] = fn
        return fn

    return register


def binary_size(n: int) -> str:
    """``n`` bytes in the largest binary unit that divides it: "256 MiB", "4 KiB", "10 bytes"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def benchmark(stem: str) -> ModuleType:
    """``benchmarks/STEM.py`` as a module (benchmarks/ is not a package), loaded once."""
    name = f"{stem}_benchmark"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
