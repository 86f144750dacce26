"""Which MIL dialect to compile in, and the compatibility check that runs before compiling.

The dialect comes from the chip profile (``hw/data/chips.json``: legacy program(1.0)
on M1/M2, ios18 on M3 and later) unless ``dialect=`` names one; the macOS version
must be new enough for it (``ios18`` needs macOS 15, macOS 14 tops out at ios17:
ANE_NOTES 2.5, ``data/facts.json``). The checker of ``anekit.hw`` runs for the same
chip first, so a program the chip cannot run fails with the checker's diagnostics
instead of an opaque compiler error.
"""

from __future__ import annotations

import functools

from anekit.backends.ane import facts, host
from anekit.errors import CompileError
from anekit.hw.chips import Chip, resolve
from anekit.hw.compat import check
from anekit.hw.kinds import Severity
from anekit.mil.program import Program
from anekit.mil.text import DIALECTS


@functools.cache
def host_chip() -> Chip:
    """The chip profile of this machine (the default chip where it has none, e.g. off macOS)."""
    return resolve()


def resolve_chip(chip: str | Chip | None) -> Chip:
    """A chip profile from a name, a profile, or None for the host's; CompileError if unknown."""
    if chip is None:
        return host_chip()  # looked up once per process
    try:
        return resolve(chip)
    except ValueError as e:
        raise CompileError(str(e)) from None


def macos_problem(dialect: str, macos: str | None) -> str | None:
    """Why ``dialect`` cannot compile on macOS ``macos`` (None if it can, or if unknown)."""
    needed = facts.value("dialect_min_macos")[dialect]
    if macos is None or host.version_tuple(macos) >= host.version_tuple(needed):
        return None
    return (
        f"the {dialect} MIL dialect needs macOS {needed} or later; this is macOS {macos} "
        f"(source: {facts.source('dialect_min_macos')})"
    )


def choose(dialect: str | None, chip: Chip, macos: str | None) -> str:
    """The dialect to print: ``dialect`` if given, else the chip's; CompileError if unusable."""
    chosen = dialect if dialect is not None else chip.dialect
    if chosen not in DIALECTS:
        raise CompileError(f"unknown MIL dialect {chosen!r}; expected one of {sorted(DIALECTS)}")
    reason = macos_problem(chosen, macos)
    if reason is not None:
        raise CompileError(reason)
    return chosen


def refuse_incompatible(program: Program, chip: Chip) -> None:
    """Raise CompileError listing the checker's errors for ``chip``; warnings pass."""
    errors = [d for d in check(program, chip=chip) if d.severity is Severity.ERROR]
    if errors:
        listing = "; ".join(d.format() for d in errors)
        raise CompileError(
            f"the compatibility checker for {chip.name} found {len(errors)} error(s), so the "
            f"program was not sent to the compiler (check=False skips this): {listing}"
        )
