"""What ``anekit convert`` made of a model file, whatever the front end: the saved program,
its fidelity, the chip's diagnostics and estimate, and what compressing did."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from anekit import hw
from anekit.frontends.fidelity import Fidelity
from anekit.mil import Program
from anekit.passes.dialect import save_dialect
from anekit.passes.provenance import Fact, split

if TYPE_CHECKING:
    from anekit.compression import CompressReport


@dataclass
class Conversion:
    """What ``convert_file`` made and found."""

    program: Program
    out_dir: Path
    nodes: int
    fidelity: Fidelity | None = None
    diagnostics: list[hw.Diagnostic] = field(default_factory=list)
    estimate: hw.Estimate | None = None
    compression: CompressReport | None = None  # what ``compress=`` did, if asked
    renamed: dict[str, str] = field(default_factory=dict)  # source I/O name -> MIL name
    # findings about what the converter chose (layouts inside the program, the comparisons
    # of its lookups and masks), each with the reason: facts, not advice to the user
    converter_notes: list[Fact] = field(default_factory=list)


def save_conversion(
    program: Program,
    out_dir: str | os.PathLike[str],
    *,
    nodes: int,
    chip: hw.Chip,
    check: bool,
    estimate: bool,
    fidelity: Fidelity | None,
    inputs: dict[str, np.ndarray] | None,
    compress: str | None,
    max_error: float | None,
) -> Conversion:
    """Compress when asked (measured on ``inputs``), save, check and estimate for ``chip``."""
    report = None
    if compress is not None:
        from anekit.compression import compress_with_report

        packed = compress_with_report(
            program, compress, chip=chip, calibration=inputs, max_error=max_error
        )
        program, report = packed.program, packed.report
    out = program.save(out_dir, dialect=save_dialect(program))
    shown, notes = split(program, hw.check(program, chip=chip) if check else [])
    return Conversion(
        program=program,
        out_dir=out,
        nodes=nodes,
        fidelity=fidelity,
        diagnostics=shown,
        converter_notes=notes,
        estimate=hw.estimate(program, chip=chip) if estimate else None,
        compression=report,
    )
