"""The IOKit view of the ANE: its IORegistry entry, and power from ``powermetrics`` as root.

``ioreg -a -r -c H11ANEIn`` prints the registry entries of the ANE driver class
(``H11ANEIn``, ANE_NOTES 2) and everything under them as a plist; it is parsed with
:mod:`plistlib` (no extra dependency). Every entry keeps its properties (data as hex,
cut short), and three summaries are pulled out wherever they sit: the power state
(``IOPowerManagement``), properties that look like DVFS or clock settings, and
triggers (``*TRIG*``, such as ``ANE_ADCLK_TRIG`` and ``ANE_PPT_TRIG`` where the driver
exposes them). Which properties a given macOS exposes is exactly what this records.

``powermetrics`` needs root: run as root (``sudo anekit doctor``) it takes one short
sample and keeps the values whose keys mention the ANE; otherwise the report says so.
"""

from __future__ import annotations

import datetime
import os
import plistlib
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any
from xml.parsers.expat import ExpatError

IOREG = ("ioreg", "-a", "-r", "-c", "H11ANEIn")
POWERMETRICS = tuple(
    "powermetrics --samplers cpu_power,gpu_power,ane_power -i 200 -n 1 -f plist".split()
)
TIMEOUT_S = 20.0
MAX_OUTPUT_BYTES = 32 << 20  # of either command's output parsed
MAX_ENTRIES = 256  # registry entries kept (the ANE has a handful)
MAX_DEPTH = 16  # of the registry tree and of nested properties
MAX_DATA_BYTES = 64  # of a data property kept, as hex
DVFS = re.compile(r"dvfs|freq|clock|perf.?state|voltage", re.IGNORECASE)
TRIGGER = re.compile(r"trig", re.IGNORECASE)
ANE_KEY = re.compile(r"(^|[^a-z])ane([^a-z]|$)", re.IGNORECASE)

Run = Callable[..., subprocess.CompletedProcess]
# what plistlib raises on bytes that are not a plist (XML or binary)
PLIST_ERRORS = (
    plistlib.InvalidFileException,
    ExpatError,
    ValueError,
    OverflowError,
    IndexError,
    LookupError,
    TypeError,
)


def plain(value: Any, depth: int = 0) -> Any:
    """A JSON-ready copy of a plist value: data as hex (cut short), dates as ISO text."""
    if isinstance(value, (bytes, bytearray)):
        head = bytes(value[:MAX_DATA_BYTES]).hex()
        return head if len(value) <= MAX_DATA_BYTES else f"{head}... ({len(value)} bytes)"
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if depth >= MAX_DEPTH:
        return str(value)
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v, depth + 1) for v in value]
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def parse_ioreg(data: bytes) -> dict[str, Any]:
    """Entries (depth-first, children flattened with their path) and the three summaries."""
    try:
        root = plistlib.loads(data)
    except PLIST_ERRORS as e:
        return {"available": False, "reason": f"ioreg printed no readable plist ({e})"}
    tops = root if isinstance(root, list) else [root]
    entries: list[dict[str, Any]] = []
    stack = [
        (entry, str(entry.get("IORegistryEntryName", "?")), 0)
        for entry in reversed(tops)
        if isinstance(entry, dict)
    ]
    while stack and len(entries) < MAX_ENTRIES:
        entry, path, depth = stack.pop()
        children = entry.get("IORegistryEntryChildren", [])
        properties = {str(k): plain(v) for k, v in entry.items() if k != "IORegistryEntryChildren"}
        entries.append(
            {
                "path": path,
                "class": plain(entry.get("IOObjectClass")),
                "name": plain(entry.get("IORegistryEntryName")),
                "properties": properties,
                "power": plain(entry.get("IOPowerManagement")),
                "dvfs": _matching(
                    {k: v for k, v in properties.items() if k != "IOPowerManagement"}, DVFS, TRIGGER
                ),
                "triggers": _matching(properties, TRIGGER),
            }
        )
        if depth + 1 < MAX_DEPTH and isinstance(children, list):
            for child in reversed(children):
                if isinstance(child, dict):
                    name = str(child.get("IORegistryEntryName", "?"))
                    stack.append((child, f"{path}/{name}", depth + 1))
    return {
        "available": bool(entries),
        "reason": None if entries else "no H11ANEIn entry",
        "entries": entries,
        "truncated": bool(stack),
    }


def _matching(
    properties: dict[str, Any], pattern: re.Pattern[str], exclude: re.Pattern[str] | None = None
) -> dict[str, Any]:
    """Every property (nested ones as ``a.b``) whose key matches ``pattern`` (not ``exclude``)."""
    found: dict[str, Any] = {}
    stack = [("", properties, 0)]
    while stack:
        prefix, mapping, depth = stack.pop()
        for key, value in mapping.items():
            name = f"{prefix}{key}"
            if pattern.search(key) and not (exclude and exclude.search(key)):
                found[name] = value
            elif isinstance(value, dict) and depth + 1 < MAX_DEPTH:
                stack.append((name + ".", value, depth + 1))
    return dict(sorted(found.items()))


def ioreg_profile(run: Run = subprocess.run, platform: str = sys.platform) -> dict[str, Any]:
    """The ANE's IORegistry entries on macOS; elsewhere, why there are none."""
    if platform != "darwin":
        return {"available": False, "reason": f"IOKit exists only on macOS; this is {platform}"}
    out = _output(run, IOREG)
    if isinstance(out, str):
        return {"available": False, "reason": out}
    return {"command": " ".join(IOREG), **parse_ioreg(out)}


def power_profile(
    run: Run = subprocess.run, platform: str = sys.platform, euid: Callable[[], int] = os.geteuid
) -> dict[str, Any]:
    """ANE values from one ``powermetrics`` sample when root; otherwise why not."""
    if platform != "darwin":
        return {
            "available": False,
            "reason": f"powermetrics exists only on macOS; this is {platform}",
        }
    if euid() != 0:
        return {
            "available": False,
            "reason": "powermetrics needs root: run `sudo anekit doctor` to sample it",
        }
    out = _output(run, POWERMETRICS)
    if isinstance(out, str):
        return {"available": False, "reason": out}
    return {"command": " ".join(POWERMETRICS), **parse_powermetrics(out)}


def parse_powermetrics(data: bytes) -> dict[str, Any]:
    """The values whose keys mention the ANE in the first plist sample (NUL separates them)."""
    first = data.split(b"\0", 1)[0].strip()
    try:
        sample = plistlib.loads(first)
    except PLIST_ERRORS as e:
        return {"available": False, "reason": f"powermetrics printed no readable plist ({e})"}
    if not isinstance(sample, dict):
        return {"available": False, "reason": "powermetrics' sample is not a dictionary"}
    values = _matching(plain(sample), ANE_KEY)
    return {
        "available": bool(values),
        "ane": values,
        "reason": None if values else "no key in the sample mentions the ANE",
    }


def _output(run: Run, command: tuple[str, ...]) -> bytes | str:
    """The command's stdout, or why there is none."""
    try:
        done = run(list(command), capture_output=True, timeout=TIMEOUT_S, check=False)
    except FileNotFoundError:
        return f"{command[0]} is not on PATH"
    except (OSError, subprocess.SubprocessError) as e:
        return f"{command[0]} failed: {type(e).__name__}: {e}"
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()[:1] if done.stderr else []
        return f"{command[0]} exited with {done.returncode}" + (f": {err[0]}" if err else "")
    if len(done.stdout) > MAX_OUTPUT_BYTES:
        return f"{command[0]} printed {len(done.stdout)} bytes, over the {MAX_OUTPUT_BYTES} read"
    return done.stdout
