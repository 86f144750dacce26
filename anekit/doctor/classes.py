"""The framework's class listing as data, and the difference between two listings.

``anekit classes --json FILE`` writes every ``_ANE*`` class with each method's kind
(``+`` class, ``-`` instance), selector and runtime type encoding, plus the macOS
version and build it came from; ``anekit classes --diff A.json B.json`` says which
classes and methods were added or removed and which type encodings changed between
two such files (two macOS versions: what broke, what is new). Reading a listing is
bounded and checked: a file that is not one says what was expected and where.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import anekit
from anekit.errors import UsageError
from anekit.files import read_json

FORMAT = "anekit-classes/1"
MAX_LISTING_BYTES = 64 << 20  # a listing of every framework class is a few MB at most


def listing(fw: Any, names: list[str], *, macos: str | None, build: str | None) -> dict[str, Any]:
    """The listing of ``names`` (classes of the framework) as JSON-ready data."""
    classes = {}
    for name in names:
        classes[name] = {kind + sel: enc for kind, sel, enc in fw.methods(name)}
    return {
        "format": FORMAT,
        "macos": macos,
        "build": build,
        "machine": platform.machine(),
        "anekit": anekit.__version__,
        "classes": classes,
    }


def read_listing(path: str | Path) -> dict[str, Any]:
    """A listing written by ``anekit classes --json``; UsageError naming the file if it is not."""
    p = Path(path)
    data = read_json(p, limit=MAX_LISTING_BYTES, what="a listing (anekit classes --json)")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise UsageError(
            f"expected an {FORMAT} listing (anekit classes --json), found format {found!r}",
            path=str(p),
        )
    classes = data.get("classes")
    if not isinstance(classes, dict):
        raise UsageError("'classes' must map class names to methods", path=str(p))
    for name, methods in classes.items():
        if not isinstance(methods, dict) or not all(
            isinstance(k, str) and k[:1] in "+-" and isinstance(v, str) for k, v in methods.items()
        ):
            raise UsageError(
                f"class {name!r}: expected {{'+selector' or '-selector': type encoding}}}}",
                path=str(p),
            )
    return data


def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What changed from listing ``a`` to listing ``b``."""
    ca, cb = a["classes"], b["classes"]
    changed = {}
    for name in sorted(set(ca) & set(cb)):
        ma, mb = ca[name], cb[name]
        entry = {
            "added": sorted(set(mb) - set(ma)),
            "removed": sorted(set(ma) - set(mb)),
            "changed": {m: [ma[m], mb[m]] for m in sorted(set(ma) & set(mb)) if ma[m] != mb[m]},
        }
        if any(entry.values()):
            changed[name] = entry
    return {
        "from": {k: a.get(k) for k in ("macos", "build")},
        "to": {k: b.get(k) for k in ("macos", "build")},
        "classes_added": {n: sorted(cb[n]) for n in sorted(set(cb) - set(ca))},
        "classes_removed": sorted(set(ca) - set(cb)),
        "classes_changed": changed,
    }


def is_empty(d: dict[str, Any]) -> bool:
    """Whether the two listings were the same."""
    return not (d["classes_added"] or d["classes_removed"] or d["classes_changed"])


def format_diff(d: dict[str, Any]) -> str:
    """The difference as readable lines: ``+`` added, ``-`` removed, ``~`` encoding changed."""

    def version(side: dict[str, Any]) -> str:
        return f"macOS {side['macos'] or '?'} ({side['build'] or '?'})"

    lines = [f"{version(d['from'])} -> {version(d['to'])}"]
    for name, methods in d["classes_added"].items():
        lines.append(f"+ {name} ({len(methods)} methods)")
    lines.extend(f"- {name}" for name in d["classes_removed"])
    for name, entry in d["classes_changed"].items():
        lines.append(f"  {name}")
        lines.extend(f"    + {m}" for m in entry["added"])
        lines.extend(f"    - {m}" for m in entry["removed"])
        lines.extend(
            f"    ~ {m} was {old}, now {new}" for m, (old, new) in entry["changed"].items()
        )
    if is_empty(d):
        lines.append("no differences")
    else:
        lines.append(
            f"{len(d['classes_added'])} classes added, {len(d['classes_removed'])} "
            f"removed, {len(d['classes_changed'])} changed"
        )
    return "\n".join(lines)
