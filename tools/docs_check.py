"""Check (or rewrite) every generated block of README.md and docs/*.md against its data.

    python tools/docs_check.py            # exit 1 naming each block that drifted
    python tools/docs_check.py --write    # regenerate every block in place
    python tools/docs_check.py --list     # the registered blocks and where they are used

Blocks and their generators: ``tools/docnumbers`` (how to add one: its module docstring).
Nothing here reads the network; every generator computes from files in the checkout.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tools.docnumbers as docnumbers  # noqa: E402

# a block: its markers on lines of their own around generated lines, or, inline (no newline
# after the opening marker), around one generated phrase: `after <!-- docs-check: x -->100 ms<!-- /docs-check -->`
BLOCK = re.compile(r"(<!-- docs-check: ([\w.-]+) -->\n?)(.*?)(<!-- /docs-check -->)", re.S)


def documents() -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def load_generators() -> dict[str, docnumbers.Generator]:
    """Every generator the modules of tools/docnumbers register."""
    for module in pkgutil.iter_modules(docnumbers.__path__):
        importlib.import_module(f"tools.docnumbers.{module.name}")
    return docnumbers.GENERATORS


def check(write: bool) -> list[str]:
    """Problems found (drifted or unknown blocks); with ``write``, drifted blocks are fixed."""
    generators = load_generators()
    cache: dict[str, str] = {}
    problems = []
    for doc in documents():
        text = doc.read_text("utf-8")

        def render(m: re.Match[str], doc: Path = doc) -> str:
            name = m.group(2)
            if name not in generators:
                problems.append(f"{doc.relative_to(ROOT)}: block {name!r} has no generator")
                return m.group(0)
            if name not in cache:
                cache[name] = generators[name]().rstrip("\n")
            inline = not m.group(1).endswith("\n")
            if inline and "\n" in cache[name]:
                problems.append(f"{doc.relative_to(ROOT)}: inline block {name!r} needs one line")
                return m.group(0)
            want = cache[name] if inline else cache[name] + "\n"
            if m.group(3) != want:
                problems.append(f"{doc.relative_to(ROOT)}: block {name!r} differs from its data"
                                + (" (rewritten)" if write else ""))  # fmt: skip
            return m.group(1) + want + m.group(4)

        new = BLOCK.sub(render, text)
        if write and new != text:
            doc.write_text(new, "utf-8")
    unused = set(generators) - {m.group(2) for d in documents()
                                for m in BLOCK.finditer(d.read_text("utf-8"))}  # fmt: skip
    problems += [f"generator {name!r} is used by no document" for name in sorted(unused)]
    return problems


# a measured-looking number: a value with a unit of time, rate, size, or a ratio
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(\.\d+)?\s?(ms|us|µs|s|tok/s|tokens/s|TFLOPS|TOPS|GB/s|"
                    r"Gb/s|GB|MB|MiB|GiB|x|%)(?![\w/])")  # fmt: skip
# a paragraph that says where its numbers come from (a table: the paragraph before it; a
# "default" or a code constant in backticks: the code that sets it; tests/: a test asserts it)
SOURCED = re.compile(r"https?://|benchmarks/|results/|tests/|ANE_NOTES|published|measured|"
                     r"maderix|ANEForge|anemll|tinygrad|arXiv|\(source|profile|default|`[\w/.-]+\.json`|(?-i:`[A-Z][A-Z0-9_]{2,}`)", re.I)  # fmt: skip
# inline code (`y = 2x + 1`, `[1, 64, 1, 64]`) is code, not a figure with a unit: not searched
# for numbers (the sources above may be in it)
CODE_SPAN = re.compile(r"`[^`\n]*`")
BASELINE = "tools/docs_numbers_baseline.txt"


def unsourced_lines() -> list[str]:
    """``path: line`` of every hand-written number (outside generated blocks and code) whose
    paragraph names no source (a link, a benchmark or results file, a data file, a source)."""
    found = []
    for doc in documents():
        text = BLOCK.sub("", doc.read_text("utf-8"))
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        sourced = False  # a table belongs to the paragraph that introduces it
        for paragraph in re.split(r"\n\s*\n", text):
            table = paragraph.lstrip().startswith("|")
            sourced = bool(SOURCED.search(paragraph)) or (table and sourced)
            if not NUMBER.search(CODE_SPAN.sub("", paragraph)) or sourced:
                continue
            for line in paragraph.splitlines():
                if NUMBER.search(CODE_SPAN.sub("", line)):
                    found.append(f"{doc.relative_to(ROOT)}: {line.strip()}")
    return found


def check_numbers(write_baseline: bool = False) -> list[str]:
    """Hand-written numbers without a source that the baseline does not list yet.

    The baseline (``tools/docs_numbers_baseline.txt``) holds the unsourced numbers the docs
    had when this check was added; it may only shrink: give a new number a generated block
    or a source in its paragraph.
    """
    lines = unsourced_lines()
    path = ROOT / BASELINE
    if write_baseline:
        path.write_text("".join(f"{line}\n" for line in sorted(set(lines))), "utf-8")
        return []
    known = set(path.read_text("utf-8").splitlines()) if path.exists() else set()
    return [f"hand-written number without a source (generate it or name its source in the "
            f"paragraph): {line}" for line in lines if line not in known]  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="regenerate every block in place")
    parser.add_argument("--list", action="store_true", help="list the blocks and their documents")
    parser.add_argument(
        "--numbers",
        action="store_true",
        help="list every hand-written number whose paragraph names no source",
    )
    parser.add_argument(
        "--write-baseline",
        action="store_true",
        help=f"record today's unsourced numbers in {BASELINE} (shrink it only)",
    )
    args = parser.parse_args(argv)
    if args.numbers:
        print("\n".join(unsourced_lines()))
        return 0
    if args.write_baseline:
        check_numbers(write_baseline=True)
        return 0
    if args.list:
        for name in sorted(load_generators()):
            where = [str(d.relative_to(ROOT)) for d in documents()
                     if f"<!-- docs-check: {name} -->" in d.read_text("utf-8")]  # fmt: skip
            print(f"{name:28} {', '.join(where) or '(unused)'}")
        return 0
    problems = check(args.write) + check_numbers()
    for problem in problems:
        print(f"docs-check: {problem}", file=sys.stderr)
    drifted = [p for p in problems if not p.endswith("(rewritten)")]
    if drifted:
        print("docs-check: run `python tools/docs_check.py --write` after checking the data",
              file=sys.stderr)  # fmt: skip
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
