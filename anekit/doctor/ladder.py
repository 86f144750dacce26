"""``anekit doctor --ladder``: the first thing to run on a Mac; pinpoints any failure in one run.

A ladder of rungs, from "what is this machine" up to evaluation with unaligned
shapes, binding rules, threads, memory and the compile budget. Each rung runs in
its own process with a timeout (:mod:`anekit.ladder.runner`); the JSON report is
rewritten after every rung, so a segfault or a hang costs one rung, not the
report. A rung whose prerequisite failed is skipped with the reason. The summary
names the first failing rung and the settings the evidence supports (layout
source, binding rule, dialect). Off macOS every rung but ``environment`` and the
reference-backend smoke test is skipped, with its reason, and the command exits 0.
"""

from __future__ import annotations

import platform
import sys
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from anekit.backends.ane import host
from anekit.doctor import ane_rungs, dist_rungs, numerics_rung
from anekit.errors import EvaluationError
from anekit.files import write_atomic
from anekit.ladder import cases
from anekit.ladder.runner import Context, Rung, run_ladder

PACKAGES = ("numpy", "pyobjc-core", "pyobjc-framework-Cocoa", "pyobjc-framework-IOSurface")
FAILED = ("fail", "crash", "timeout")


def environment(ctx: Context) -> None:
    """Python, architecture, Rosetta, virtual machine, macOS, chip and package versions."""
    import anekit

    facts = host.facts()
    ctx.observe("python", sys.version.split()[0])
    # the interpreter's name and whether it runs in a virtual environment, not its path: the
    # report is shared, and docs/probe.md promises nothing about the user (a path names
    # directories and volumes, inside the home directory or not)
    ctx.observe("executable", Path(sys.executable).name)
    ctx.observe("virtualenv", sys.prefix != sys.base_prefix)
    ctx.observe("os", platform.platform())
    for key, value in vars(facts).items():
        ctx.observe(key, value)
    ctx.observe("anekit", anekit.__version__)
    ctx.observe("packages", {name: _version(name) for name in PACKAGES})
    ctx.observe("ane_problem", host.problem(facts))


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def reference(ctx: Context) -> None:
    """The ladder's cases on the reference backend, against NumPy: the smoke test that runs anywhere."""
    import anekit

    wrong = []
    for case in [*cases.aligned_cases(), *cases.unaligned_cases(), cases.binding_case()]:
        with anekit.compile(case.program, backend="reference") as k:
            record = ctx.observe(case.name, cases.compare(case, k(**case.inputs)))
        if not record["match"]:
            wrong.append(case.name)
    if wrong:
        raise EvaluationError(f"the reference backend gave wrong numbers for {', '.join(wrong)}")


def _mac(options: dict[str, Any]) -> str | None:
    return host.problem(host.facts())


def _with_budget(options: dict[str, Any]) -> str | None:
    if not options.get("budget"):
        return "runs only with --budget (it compiles until the framework fails)"
    return _mac(options)


def _rung(name: str, question: str, run: Any, needs: tuple[str, ...], **kw: Any) -> Rung:
    return Rung(name, question, run, needs, skip=kw.pop("skip", _mac), **kw)


RUNGS: tuple[Rung, ...] = (
    Rung(
        "environment",
        "What is this machine: Python, architecture, Rosetta, virtual machine, "
        "macOS, chip, package versions?",
        environment,
    ),
    _rung(
        "imports",
        "Do PyObjC's objc, Foundation and IOSurface import?",
        ane_rungs.imports,
        ("environment",),
    ),
    _rung(
        "bundle",
        "Does AppleNeuralEngine.framework load, with the classes anekit needs?",
        ane_rungs.bundle,
        ("imports",),
    ),
    _rung(
        "device_info",
        "What does _ANEDeviceInfo report (ANE, virtual machine, sub-type, "
        "architecture, cores, ANE count)?",
        ane_rungs.device_info,
        ("bundle",),
    ),
    _rung(
        "selectors",
        "Does every class and selector anekit sends exist, with which type encoding?",
        ane_rungs.selectors,
        ("bundle",),
    ),
    _rung(
        "metadata",
        "Is the NSError** of every error selector an out-parameter for PyObjC?",
        ane_rungs.metadata,
        ("bundle",),
    ),
    _rung(
        "iosurface",
        "Can an IOSurface be created, locked, written through its base address and read back?",
        ane_rungs.iosurface,
        ("imports",),
    ),
    _rung(
        "descriptor",
        "Do descriptor and model build, and does the hex identifier change when "
        "only the weight bytes change?",
        ane_rungs.descriptor,
        ("bundle",),
    ),
    _rung(
        "compile",
        "Does a small program compile, and which files are in its temporary directory afterwards?",
        ane_rungs.compile_rung,
        ("descriptor", "metadata"),
    ),
    _rung(
        "load",
        "Does it load, what does modelAttributes hold, and does it name an output "
        "by its variable or by its op's name?",
        ane_rungs.load,
        ("compile",),
    ),
    _rung(
        "eval_aligned",
        "Do programs with 64-byte-multiple rows give the right numbers?",
        ane_rungs.eval_aligned,
        ("load", "iosurface"),
    ),
    _rung(
        "eval_unaligned",
        "With unaligned rows, which layout (the model's, dense, 64-byte, "
        "128-byte rows) gives the right numbers?",
        ane_rungs.eval_unaligned,
        ("load", "iosurface"),
        timeout_s=180.0,
    ),
    _rung(
        "binding",
        "Which rule binds 3 inputs and 3 outputs: the symbol arrays, signature, "
        "alphabetical or size order?",
        ane_rungs.binding,
        ("load", "iosurface"),
        timeout_s=120.0,
    ),
    _rung(
        "shared_buffers",
        "Does one IOSurface serve two kernels' requests (an output bound "
        "as the next kernel's input), and one request 14 separate inputs (an LLM block)?",
        ane_rungs.shared_buffers,
        ("eval_aligned",),
    ),
    Rung(
        "reference", "Do the same cases give the right numbers on the reference backend?", reference
    ),
    _rung(
        "dialect",
        "Which MIL dialect compiles and runs here: ios18 or legacy?",
        ane_rungs.dialect_rung,
        ("load",),
    ),
    _rung(
        "threads",
        "Do 2 and 8 threads evaluating one model get the right numbers?",
        ane_rungs.threads,
        ("eval_aligned",),
    ),
    _rung(
        "stats",
        "Does the framework report hardware time, without and with the counter "
        "mask, and where: the request's perfStatsArray, its perfStats, or the object passed "
        "in?",
        ane_rungs.stats,
        ("eval_aligned",),
    ),
    _rung(
        "memory",
        "Does memory grow over 2,000 evaluations, with and without autorelease pools?",
        ane_rungs.memory,
        ("eval_aligned",),
        timeout_s=300.0,
    ),
    _rung(
        "unload",
        "Does close unload and clean up, and can the program compile again?",
        ane_rungs.unload,
        ("eval_aligned",),
    ),
    _rung(
        "worker",
        "Does an isolated kernel (worker process) run on the ANE?",
        ane_rungs.worker,
        ("eval_aligned",),
        timeout_s=180.0,
    ),
    _rung(
        "two_processes",
        "Do two processes evaluating at once get twice one process's ANE "
        "throughput (two dies of an Ultra, for two training ranks)?",
        dist_rungs.two_processes,
        ("worker",),
        timeout_s=300.0,
    ),
    _rung(
        "numerics",
        "How does the engine store fp16 results: matmul saturation, tie rule, "
        "accumulator, subnormal flush, non-finite outputs, slice clamp, exp cliff? Writes a "
        "numerics profile file (numerics=PATH)",
        numerics_rung.numerics,
        ("eval_aligned",),
        timeout_s=300.0,
    ),
    _rung(
        "budget",
        "How many compiles does one process get before the framework fails?",
        ane_rungs.compile_budget,
        ("eval_aligned",),
        timeout_s=1800.0,
        skip=_with_budget,
    ),
)


# -- the summary ----------------------------------------------------------------------------------
def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The first failing rung and the settings the evidence supports."""
    rungs = {r["name"]: r for r in report["rungs"]}
    first = next((r["name"] for r in report["rungs"] if r["status"] in FAILED), None)
    return {
        "first_failure": first,
        "counts": dict(Counter(r["status"] for r in report["rungs"])),
        "settings": {
            "layout": _evidence(rungs, "eval_unaligned", _layout),
            "binding": _evidence(rungs, "binding", _binding),
            "dialect": _evidence(rungs, "dialect", _dialect),
        },
    }


def _evidence(rungs: dict[str, Any], name: str, read: Any) -> str:
    rung = rungs.get(name)
    if rung is None:
        return "not measured"
    if rung["status"] == "skip":
        return f"not measured ({name} skipped: {rung['reason']})"
    try:
        return read(rung["observed"])
    except (KeyError, TypeError):
        return f"not measured ({name} {rung['status']} before recording it)"


def _layout(seen: dict[str, Any]) -> str:
    held = seen["layouts_that_hold"]
    sources = ", ".join(seen.get("auto_sources", []))
    if "auto" in held:
        return f"layout='auto' works (strides from: {sources}); rules that also hold: {held}"
    return f"layout='auto' FAILS; rules that hold: {held or 'none'}"


def _binding(seen: dict[str, Any]) -> str:
    held = seen["rules_that_hold"]
    canonical = "works" if seen["canonical"]["match"] else "FAILS"
    return f"canonical I/O names {canonical}; raw binding rules that hold: {held or 'none'}"


def _dialect(seen: dict[str, Any]) -> str:
    return f"works: {seen['dialects_that_work'] or 'none'} (default here: {seen['host_default']})"


# -- the command ------------------------------------------------------------------------------------
def _line(result: dict[str, Any]) -> str:
    note = result["reason"] or ""
    if result["error"]:
        note = f"{result['error']['type'].rsplit('.', 1)[-1]}: {result['error']['message']}"
    return f"  {result['status']:<8}{result['name']:<16}{result['seconds']:7.2f} s  {note}"[:200]


def main(
    json_path: str | None = None,
    budget: bool = False,
    out: TextIO | None = None,
    numerics_out: str | None = None,
) -> int:
    """Run the ladder, print a line per rung and the summary; 1 if a rung failed, else 0."""
    stream = out if out is not None else sys.stdout
    path = Path(json_path) if json_path else None
    print(f"anekit doctor --ladder: {len(RUNGS)} rungs, each in its own process", file=stream)

    def progress(result: dict[str, Any]) -> None:
        print(_line(result), file=stream, flush=True)

    extra = {"numpy": np.__version__, "python": sys.version.split()[0]}
    report = run_ladder(
        __name__,
        RUNGS,
        options={"budget": budget, "numerics_out": numerics_out},
        report_path=path,
        on_result=progress,
        extra=extra,
    )
    report["summary"] = summary = summarize(report)
    if path is not None:
        import json

        write_atomic(path, (json.dumps(report, indent=1, default=str) + "\n").encode())
    first = summary["first_failure"]
    print(f"first failing rung: {first or 'none'}", file=stream)
    for key, value in summary["settings"].items():
        print(f"  {key}: {value}", file=stream)
    if path is not None:
        print(f"report written to {path}", file=stream)
    return 1 if first else 0
