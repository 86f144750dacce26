"""Running ``anekit probe``: pick experiments, run them through the ladder runner, summarise.

The report is the runner's (``anekit.ladder.runner.run_ladder``): one entry per
experiment with its status (``pass``, ``fail``, ``skip``, ``crash``, ``timeout``),
seconds, observations, and on failure the error with its NSError fields; the JSON file
is rewritten after every experiment. Off macOS every experiment is skipped with the
reason. :func:`headline` gives each experiment's finding in one line.
"""

from __future__ import annotations

import json
import platform
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import anekit
from anekit.backends.ane import host
from anekit.errors import UsageError
from anekit.files import write_atomic
from anekit.ladder.runner import run_ladder
from anekit.probe.experiments import BY_NAME, EXPERIMENTS, Experiment

FAILED = ("fail", "crash", "timeout")
SEND_BACK = (
    "send the report back: attach it to an issue at the anekit repository, with your "
    "Mac model and macOS version (docs/probe.md)"
)


def select(names: Sequence[str]) -> list[Experiment]:
    """The experiments named (all of them, in table order, for none); UsageError for a typo."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise UsageError(
            f"unknown experiment {', '.join(map(repr, unknown))}; expected one "
            f"of: {', '.join(BY_NAME)} (anekit probe --list)"
        )
    wanted = set(names)
    return [e for e in EXPERIMENTS if not wanted or e.name in wanted]


def describe(experiments: Sequence[Experiment]) -> list[dict[str, Any]]:
    """What ``--list`` shows, and what ``--list --json`` writes."""
    return [
        {
            "name": e.name,
            "question": e.question,
            "needs": list(e.needs),
            "records": list(e.records),
            "settles": e.settles,
            "timeout_s": e.timeout_s,
            "skip": e.skip_reason({}),
        }
        for e in experiments
    ]


def format_list(rows: list[dict[str, Any]]) -> str:
    """One paragraph per experiment: name, question, needs, whether it can run here."""
    lines = []
    for r in rows:
        here = f"skipped here: {r['skip']}" if r["skip"] else "can run here"
        lines += [
            f"{r['name']}",
            f"  {r['question']}",
            f"  needs: {', '.join(r['needs'])}; {here}",
            f"  settles: {r['settles']}",
        ]
    lines.append(f"{len(rows)} experiments")
    return "\n".join(lines)


def run(
    experiments: Sequence[Experiment],
    json_path: Path | None,
    out: TextIO | None = None,
    options: dict[str, Any] | None = None,
    module: str = "anekit.probe.experiments",
) -> tuple[dict[str, Any], int]:
    """Run the experiments, printing a line as each finishes; the report and the exit code.

    ``module`` declares them as ``RUNGS`` (each experiment's process imports it by name).
    """
    stream = out if out is not None else sys.stdout
    print(f"anekit probe: {len(experiments)} experiments, each in its own process", file=stream)
    by_name = {e.name: e for e in experiments}

    def progress(result: dict[str, Any]) -> None:
        print(line(result, by_name[result["name"]]), file=stream, flush=True)

    facts = host.facts()
    extra = {
        "anekit": anekit.__version__,
        "python": platform.python_version(),
        "macos": facts.macos,
        "chip": facts.brand,
        "machine": facts.machine,
        "requires": {e.name: list(e.needs) for e in experiments},
    }
    report = run_ladder(
        module,
        [e.rung() for e in experiments],
        options=options,
        report_path=json_path,
        on_result=progress,
        extra=extra,
        key="experiments",
    )
    results = report["experiments"]
    report["summary"] = {
        "counts": dict(Counter(r["status"] for r in results)),
        "headlines": {r["name"]: headline(r, by_name.get(r["name"])) for r in results},
    }
    if json_path is not None:
        write_atomic(json_path, (json.dumps(report, indent=1, default=str) + "\n").encode())
        print(f"report written to {json_path}; {SEND_BACK}", file=stream)
    failed = [r["name"] for r in results if r["status"] in FAILED]
    print(
        f"{len(failed)} failed, crashed or timed out"
        + (f": {', '.join(failed)}" if failed else ""),
        file=stream,
    )
    return report, 1 if failed else 0


def line(result: dict[str, Any], experiment: Experiment | None = None) -> str:
    """``status name seconds note`` for one finished experiment."""
    note = result["reason"] or ""
    if result["error"]:
        note = f"{result['error']['type'].rsplit('.', 1)[-1]}: {result['error']['message']}"
    elif result["status"] == "pass":
        note = headline(result, experiment)
    return f"  {result['status']:<8}{result['name']:<16}{result['seconds']:8.2f} s  {note}"[:240]


def headline(result: dict[str, Any], experiment: Experiment | None = None) -> str:
    """The experiment's finding in one line, from what it observed."""
    if result["status"] == "skip":
        return f"skipped: {result['reason']}"
    experiment = experiment or BY_NAME.get(result["name"])
    if experiment is None or experiment.headline is None:
        return result["status"]
    try:
        return experiment.headline(result["observed"])
    except (KeyError, TypeError, IndexError):
        return f"{result['status']} before it recorded its finding"
