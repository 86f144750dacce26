"""What a compression did: per layer, the scheme, bytes and predicted time before and after."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class LayerReport:
    """One layer (weight) of a compressed program.

    Attributes:
        name: the weight's name.
        ops: the names of the ops reading it.
        scheme: what it became ("fp16": left as it was).
        granularity: what one scale or table covers (None for fp16).
        dense_bytes: its bytes uncompressed.
        stored_bytes: its bytes as stored now (tables and scales included).
        seconds_before: predicted time of its ops on the chip, uncompressed.
        seconds_after: the same ops in the compressed program.
        error: the program's output error with only this layer compressed as it is now
            (None where not measured; 0 for fp16).
    """

    name: str
    ops: tuple[str, ...]
    scheme: str
    granularity: str | None
    dense_bytes: int
    stored_bytes: int
    seconds_before: float
    seconds_after: float
    error: float | None


@dataclass(frozen=True)
class CompressReport:
    """A compression's outcome on one chip.

    Attributes:
        chip: the chip profile the predictions and choices are for.
        scheme: what was asked for ("int8", ..., "auto").
        layers: one row per compressible layer.
        weight_bytes_before, weight_bytes_after: every weight of the program, as stored.
        seconds_before, seconds_after: predicted time of one evaluation on the chip.
        error: the program's output error against the uncompressed one (None: not measured).
        max_error: the budget, if one was given.
        within: the error holds the budget (None without a budget).
        samples: what the error and the W8A8 steps were measured on ("calibration", "random").
        fallbacks: (layer, from, to) moves of the accuracy gate, in order.
    """

    chip: str
    scheme: str
    layers: tuple[LayerReport, ...]
    weight_bytes_before: int
    weight_bytes_after: int
    seconds_before: float
    seconds_after: float
    error: float | None
    max_error: float | None
    within: bool | None
    samples: str | None
    fallbacks: tuple[tuple[str, str, str], ...]

    @property
    def ratio(self) -> float:
        """Weight bytes after over before."""
        return (
            self.weight_bytes_after / self.weight_bytes_before if self.weight_bytes_before else 1.0
        )

    def record(self) -> dict[str, Any]:
        """A JSON-ready form."""
        data = asdict(self)
        data["ratio"] = round(self.ratio, 4)
        return data

    def lines(self) -> list[str]:
        """A table for people: one line per layer, then the totals."""
        rows = [
            f"{'layer':<24} {'scheme':<6} {'granularity':<20} {'bytes':>21} "
            f"{'predicted ms':>19} {'error':>9}"
        ]
        for r in self.layers:
            err = "-" if r.error is None else f"{r.error:.2e}"
            rows.append(
                f"{r.name[:24]:<24} {r.scheme:<6} {(r.granularity or '-'):<20} "
                f"{r.dense_bytes:>10} -> {r.stored_bytes:<8} "
                f"{r.seconds_before * 1e3:>8.4f} -> {r.seconds_after * 1e3:<8.4f} {err:>9}"
            )
        error = "not measured" if self.error is None else f"{self.error:.3e}"
        budget = "" if self.max_error is None else f" (budget {self.max_error:g}: "
        if budget:
            budget += "held)" if self.within else "NOT held)"
        rows.append(
            f"weights {self.weight_bytes_before} -> {self.weight_bytes_after} bytes "
            f"({self.ratio:.3f}x); predicted on {self.chip} "
            f"{self.seconds_before * 1e3:.4f} -> {self.seconds_after * 1e3:.4f} ms; "
            f"output error {error}{budget}" + (f" on {self.samples} inputs" if self.samples else "")
        )
        rows += [f"  fell back: {name} {old} -> {new}" for name, old, new in self.fallbacks]
        return rows
