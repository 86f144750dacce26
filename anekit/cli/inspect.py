"""``anekit inspect``: describe a compiled ANE binary, E5 descriptor, weight.bin or MIL file,
or list the compiler's E5 bundle cache."""

from __future__ import annotations

import argparse
import json
import sys

from anekit.errors import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        nargs="?",
        help="an .hwx program, an E5 descriptor or other FlatBuffer, a weight.bin, or MIL text",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--cache",
        nargs="?",
        const="",
        metavar="DIR",
        help="list the E5 bundles in DIR (default: the macOS compile cache under ~/Library/Caches)",
    )


def run(args: argparse.Namespace) -> int:
    if args.cache is not None:
        return _run_cache(args.cache, as_json=args.json)
    if not args.file:
        raise UsageError("give a FILE to describe, or --cache [DIR]")
    from anekit.inspect.report import describe_file

    info, lines = describe_file(args.file)
    print(json.dumps(info, indent=2) if args.json else "\n".join(lines))
    return 0


def _run_cache(directory: str, *, as_json: bool) -> int:
    from anekit.inspect.cache import default_cache_dirs, list_bundles, no_cache_message

    roots = [directory] if directory else default_cache_dirs()
    if not roots:
        print(f"anekit inspect: error: {no_cache_message()}", file=sys.stderr)
        return 1  # nothing to list here: not a usage error
    bundles = [b for root in roots for b in list_bundles(root)]
    if as_json:
        rows = [
            {
                "path": str(b.path),
                "hash": b.hash,
                "build": b.build,
                "generation": b.generation,
                "size": b.size,
                "files": b.files,
                "age_seconds": round(b.age, 1),
            }
            for b in bundles
        ]
        print(
            json.dumps(
                {"format": "cache", "roots": [str(r) for r in roots], "bundles": rows}, indent=2
            )
        )
        return 0
    print(f"{len(bundles)} bundles in {', '.join(str(r) for r in roots)}")
    for b in bundles:
        print(
            f"  {b.hash or '-':<20} {b.generation or '?':<4} {b.size:>10} bytes "
            f"{b.files:>3} files  {_age(b.age):>8} old  {b.path}"
        )
    return 0


def _age(seconds: float) -> str:
    """A compact age: 42s, 7m, 3h, 12d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
