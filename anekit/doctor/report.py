"""What this machine offers for the ANE: the report behind ``anekit doctor`` and ``anekit classes``.

The report names the OS, machine, chip, ANE generation, framework and PyObjC,
and on a machine with an ANE runs a smoke test: compile, load and evaluate a
small program, with timings, and compare its output with the reference backend.
Everything here works on any machine; what is missing is reported, not raised.
"""

from __future__ import annotations

import fnmatch
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

import anekit
from anekit.backends import available_backends, budget, reference
from anekit.backends.ane import framework
from anekit.doctor import iokit
from anekit.hw.chips import default_chip, host_brand_string

# fp16 outputs of the smoke test agree with the reference within this (absolute) margin;
# the ANE's accumulation width is undocumented (ANE_NOTES section 1), so leave room.
SMOKE_TOLERANCE = 5e-2
SMOKE_EVALUATIONS = 20


def report(*, smoke: bool = True) -> dict[str, Any]:
    """Everything ``anekit doctor`` prints, as a JSON-ready dictionary."""
    ok, reason = anekit.backends.ane.available()
    fw = framework.load() if ok else None
    return {
        "anekit": anekit.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "os": platform.platform(),
        "macos": platform.mac_ver()[0] or None,
        "machine": platform.machine(),
        "chip": host_brand_string(),
        "chip_profile": dict(zip(("chip", "how"), default_chip(), strict=True)),
        "framework": {
            "path": framework.FRAMEWORK_PATH,
            "present": Path(framework.FRAMEWORK_PATH).is_dir(),
        },
        "pyobjc": _distribution_version("pyobjc-core"),
        "ane": {
            "available": ok,
            "reason": reason,
            "generation": ane_generation(fw) if fw is not None else None,
        },
        "backends": available_backends(),
        "iokit": iokit.ioreg_profile(),
        "power": iokit.power_profile(),
        "compiles_this_process": budget.compiles_used(),
        "smoke_test": smoke_test(fw) if fw is not None and smoke else None,
    }


def ane_generation(fw: Any) -> str | None:
    """The ANE sub-type from ``+[_ANEDeviceInfo aneSubType]`` ("h16" on M4), upper-cased."""
    try:
        sub_type = fw.cls("_ANEDeviceInfo").aneSubType()
    except Exception:  # objc.error, a missing class or selector: the generation is unknown
        return None
    return str(sub_type).upper() if sub_type else None


def smoke_program() -> anekit.mil.Program:
    """A 1x1 conv plus a residual add on [1, 64, 1, 64] fp16: ops known to run on the ANE."""
    rng = np.random.default_rng(0)
    b = anekit.mil.Builder()
    x = b.input("x", (1, 64, 1, 64), "fp16")
    w = b.weight("w", (rng.standard_normal((64, 64, 1, 1)) / 8).astype(np.float16))
    b.output(b.add(x=b.conv(x=x, weight=w), y=x), "y")
    return b.build()


def smoke_test(fw: Any) -> dict[str, Any]:
    """Compile, load and evaluate :func:`smoke_program` on the ANE; times and the reference check."""
    from anekit.backends import ane

    program = smoke_program()
    x = np.random.default_rng(1).standard_normal((1, 64, 1, 64)).astype(np.float16)
    result: dict[str, Any] = {"program": "conv 1x1 64->64 + add, [1, 64, 1, 64] fp16"}
    try:
        start = time.perf_counter()
        kernel = ane.compile(program, framework=fw)
        result["compile_and_load_s"] = time.perf_counter() - start
        with kernel:
            start = time.perf_counter()
            got = kernel(x=x)["y"]
            result["first_evaluation_s"] = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(SMOKE_EVALUATIONS):
                kernel(x=x)
            result["mean_evaluation_s"] = (time.perf_counter() - start) / SMOKE_EVALUATIONS
    except Exception as e:  # any failure (objc.error included) is the smoke test's answer
        result["error"] = f"{type(e).__name__}: {e}"
        return result
    want = reference.compile(program)(x=x)["y"]
    diff = float(np.max(np.abs(got.astype(np.float32) - want.astype(np.float32))))
    result["max_abs_diff_vs_reference"] = diff
    result["matches_reference"] = diff <= SMOKE_TOLERANCE
    return result


def format_report(r: dict[str, Any]) -> str:
    """The report as the lines ``anekit doctor`` prints."""
    ane = r["ane"]
    rows = [
        ("anekit", f"{r['anekit']} (Python {r['python']}, NumPy {r['numpy']})"),
        ("OS", r["os"] + (f" (macOS {r['macos']})" if r["macos"] else "")),
        ("machine", r["machine"]),
        (
            "chip",
            f"{r['chip'] or 'unknown'}; profile {r['chip_profile']['chip']}: "
            f"{r['chip_profile']['how']}",
        ),
        (
            "framework",
            f"{r['framework']['path']}: {'present' if r['framework']['present'] else 'absent'}",
        ),
        ("PyObjC", r["pyobjc"] or "not installed"),
        (
            "ANE",
            f"available, generation {ane['generation'] or 'unknown'}"
            if ane["available"]
            else f"not available: {ane['reason']}",
        ),
    ]
    rows += [(f"backend {name}", why) for name, why in r["backends"].items()]
    rows.append(("IOKit", _iokit_line(r["iokit"])))
    rows.append(("power", _power_line(r["power"])))
    rows.append(("smoke test", _smoke_line(r["smoke_test"], ane["available"])))
    width = max(len(k) for k, _ in rows)
    lines = ["anekit doctor"] + [f"  {k.ljust(width)}  {v}" for k, v in rows]
    if ane["available"]:
        lines.append("Available here: the ANE backend, the reference backend and every tool.")
    else:
        lines.append(f"No ANE here: {ane['reason']}.")
        lines.append(
            "Available here: the reference backend (NumPy) and every tool that does not run the "
            "hardware (MIL, check, estimate, inspect); not available: the ANE backend."
        )
    return "\n".join(lines)


def _iokit_line(io: dict[str, Any]) -> str:
    if not io["available"]:
        return f"not read: {io['reason']}"
    parts = []
    for e in io["entries"]:
        state = (
            (e["power"] or {}).get("CurrentPowerState") if isinstance(e["power"], dict) else None
        )
        parts.append(
            f"{e['path']} ({e['class']}): {len(e['properties'])} properties, power state "
            f"{state if state is not None else '?'}, {len(e['dvfs'])} DVFS/clock, "
            f"{len(e['triggers'])} trigger"
        )
    return "; ".join(parts[:4]) + (f"; {len(parts) - 4} more entries" if len(parts) > 4 else "")


def _power_line(power: dict[str, Any]) -> str:
    if not power["available"]:
        return f"not sampled: {power['reason']}"
    return ", ".join(f"{k} = {v}" for k, v in list(power["ane"].items())[:6])


def _smoke_line(smoke: dict[str, Any] | None, available: bool) -> str:
    if smoke is None:
        return "not run (needs the ANE)" if not available else "not run"
    if "error" in smoke:
        return f"FAILED: {smoke['error']}"
    verdict = "matches" if smoke["matches_reference"] else "DIFFERS FROM"
    return (
        f"compile+load {smoke['compile_and_load_s'] * 1e3:.1f} ms, first evaluation "
        f"{smoke['first_evaluation_s'] * 1e3:.2f} ms, mean of {SMOKE_EVALUATIONS} "
        f"{smoke['mean_evaluation_s'] * 1e3:.3f} ms; {verdict} the reference backend "
        f"(max |diff| {smoke['max_abs_diff_vs_reference']:.3g}, tolerance {SMOKE_TOLERANCE})"
    )


def class_listing(
    fw: Any, pattern: str | None = None
) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """The framework's ``_ANE*`` classes matching ``pattern``, each with its methods.

    ``pattern`` is a case-insensitive glob; without wildcards it matches anywhere in the name.
    """
    glob = (pattern or "*").lower()
    if not any(c in glob for c in "*?["):
        glob = f"*{glob}*"
    names = [
        n for n in fw.class_names() if n.startswith("_ANE") and fnmatch.fnmatchcase(n.lower(), glob)
    ]
    return [(name, fw.methods(name)) for name in names]


def format_classes(listing: list[tuple[str, list[tuple[str, str, str]]]]) -> str:
    """Classes and their methods, one method a line: kind, selector, type encoding."""
    lines = []
    for name, methods in listing:
        lines.append(name)
        width = max((len(sel) for _, sel, _ in methods), default=0)
        lines.extend(f"  {kind} {sel.ljust(width)}  {enc}" for kind, sel, enc in methods)
    lines.append(f"{len(listing)} classes")
    return "\n".join(lines)


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
