"""The fidelity gate on the chip's numerics: a converted program that would overflow on the
engine is rewritten to fit (residual scaling) or refused, naming the op, line and bound.

``from_torch``'s gate runs the program on the reference backend under the chip's numerics
profile (:mod:`anekit.hw.numerics`), where fp16 overflows and the engine's saturation
(N1) happen as on the engine. :func:`within_envelope` then decides:

1. the outputs are within tolerance and no value was saturated or replaced (the run's
   cliff events): the program is kept as it is;
2. else, if the program is transformer-like and its residual stream can be scaled
   soundly (:func:`anekit.passes.residual.find_stream`: every read of the stream is a
   norm), alpha is chosen from the stream's peak on the example inputs (computed in
   float32 storage) with :func:`~anekit.passes.residual.choose_alpha` and the program is
   rewritten (:func:`~anekit.passes.residual.scale_residual`); if the rewritten program
   passes (1) it replaces the converted one, its ``build_info`` records alpha
   (``anekit-residual-scale``) and a warning says so;
3. else :class:`~anekit.errors.NumericsOverflow` (it carries the gate's ``fidelity``) names the first op whose observed range
   leaves the profile's envelope (the checker's ``fp16-saturation``/``fp16-overflow`` rules
   on the ranges the golden model observed in float32 storage), its MIL line, the user's
   source line and the bound; a gate failure with nothing out of range is the ordinary
   ConversionError (the conversion itself is wrong). Within tolerance with nothing out of
   range, saturated values are still refused (named by the events' first op); values only
   replaced (N8's table) warn.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from anekit.errors import ConversionError, NumericsOverflow
from anekit.frontends.fidelity import Fidelity, compare_arrays, verify
from anekit.mil import Program

__all__ = ["ResidualScaled", "within_envelope"]

OVERFLOW_RULES = ("fp16-saturation", "fp16-overflow")


class ResidualScaled(UserWarning):
    """The converted program's residual stream was scaled by alpha to fit the engine."""


def overflowed(fidelity: Fidelity) -> bool:
    """Whether the gate's run saturated or replaced any value (its cliff events)."""
    events = fidelity.events
    return bool(events) and (events.saturated + events.replaced) > 0


def _passes(fidelity: Fidelity, tolerance: float) -> bool:
    return all(o.rel_error <= tolerance for o in fidelity.outputs) and not overflowed(fidelity)


def within_envelope(
    program: Program,
    inputs: dict[str, np.ndarray],
    want: list[np.ndarray],
    *,
    tolerance: float,
    numerics: Any,
    chip: Any,
    source: Callable[[str], str] = lambda name: "",
    reference: str = "PyTorch fp32",
) -> tuple[Program, Fidelity]:
    """The program that passes the gate (``program`` or its residual-scaled form) and its
    fidelity; raises NumericsOverflow or ConversionError (the module docstring).

    ``source(op_name)`` says where an op came from in the user's model (for the error).
    """
    from anekit.passes.residual import choose_alpha, find_stream, scale_residual

    fidelity = compare_arrays(program, inputs, want, "reference", reference, numerics)
    if _passes(fidelity, tolerance):
        return program, fidelity
    stream = find_stream(program.main)
    if stream.unsound is None:
        peak = _stream_peak(program, inputs, set(stream.names))
        alpha = choose_alpha(peak)
        scaled = scale_residual(program, alpha, stream)
        again = compare_arrays(scaled, inputs, want, "reference", reference, numerics)
        if _passes(again, tolerance):
            warnings.warn(
                f"the residual stream peaks at {peak:g} on the example inputs: held at alpha = "
                f"{alpha:g} (its norms prescaled, eps * alpha^2) so it fits the engine's fp16 "
                f"under numerics {_name(again)!r}; build_info['anekit-residual-scale'] records it",
                ResidualScaled,
                stacklevel=3,
            )
            return scaled, again
    try:
        _refuse(program, inputs, chip, source, stream.unsound, fidelity)
        verify(fidelity, tolerance)  # nothing out of range: the conversion itself is wrong
    except ConversionError as e:
        e.fidelity = fidelity  # type: ignore[attr-defined]  (convert_file reports it)
        raise
    events = fidelity.events  # within tolerance, nothing out of range, yet events
    first = next(r for r in events.rows if r.saturated or r.replaced)
    if not events.saturated:  # non-finite values replaced (N8), the outputs still right
        warnings.warn(f"under numerics {events.numerics!r} the engine would replace non-finite "
                      f"values: {first.describe()}", RuntimeWarning, stacklevel=3)  # fmt: skip
        return program, fidelity
    raise NumericsOverflow(
        f"the converted program saturates values on the engine (numerics {events.numerics!r})",
        op=first.name, op_type=first.op_type, line=_mil_line(program, first.name),
        source=source(first.name), bound=events.summary(),
    )  # fmt: skip


def _name(fidelity: Fidelity) -> str:
    return fidelity.events.numerics if fidelity.events is not None else fidelity.backend


def _observed(program: Program, inputs: dict[str, np.ndarray]) -> Any:
    """The ranges the golden model observes in float32 storage (true magnitudes)."""
    import anekit
    from anekit.hw.ranges import observed

    kernel = anekit.compile(program, backend="reference", storage="fp32")

    def sample() -> Any:
        yield from inputs.items()
        for _, outs in kernel.taps(inputs):
            yield from outs.items()

    try:
        return observed([sample()])
    finally:
        kernel.close()


def _stream_peak(program: Program, inputs: dict[str, np.ndarray], names: set[str]) -> float:
    ranges = _observed(program, inputs).by_name
    peaks = [max(abs(lo), abs(hi)) for n, r in ranges.items() if n in names and r is not None
             for lo, hi in (r,)]  # fmt: skip
    return max(peaks, default=0.0)


def _refuse(
    program: Program,
    inputs: dict[str, np.ndarray],
    chip: Any,
    source: Callable[[str], str],
    unsound: str | None,
    fidelity: Fidelity,
) -> None:
    """Raise NumericsOverflow for the first op out of the envelope, if any."""
    from anekit.hw.compat import check

    found = [d for d in check(program, chip, observed=_observed(program, inputs))
             if d.rule in OVERFLOW_RULES]  # fmt: skip
    events = fidelity.events
    first = events.first if overflowed(fidelity) else None
    if not found and first is None:
        return
    why = "" if unsound is None else f" (residual scaling does not apply: {unsound})"
    if found:
        d = found[0]
        name, op_type, bound = d.name or "", d.op or "", d.message
    else:
        name, op_type, bound = first.name, first.op_type, first.describe()
    raise NumericsOverflow(
        f"the converted program would overflow on the engine (numerics {_name(fidelity)!r})"
        f"{why}; the first op out of range",
        op=name,
        op_type=op_type,
        line=_mil_line(program, name),
        source=source(name),
        bound=bound,
    )


def _mil_line(program: Program, name: str) -> int | None:
    """The line of ``name``'s op in the program's MIL text (as ``anekit save`` writes it)."""
    from anekit.mil.text import print_program

    pattern = re.compile(rf"\b{re.escape(name)} = ")
    for i, line in enumerate(print_program(program).splitlines(), 1):
        if pattern.search(line):
            return i
    return None
