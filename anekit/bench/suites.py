"""The benchmark suites: the experiments of the ANE reverse-engineering series, as data.

A suite is a list of cases; a case is a dict of parameters that fully determines
the program measured (so tests can run any suite at a tiny size by passing their
own cases). ``program(params)`` turns a case into a program description that
``programs.build`` builds and that is compared, field for field, with the
descriptions in ``anekit/bench/data/published.json``. The ``full`` sweeps are the sizes
the experiments used on the ANE; the ``quick`` sweeps are small enough for the
NumPy reference backend on two cores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from anekit.bench.programs import PROJECTION_FORMS
from anekit.hw.chips import Chip

# One case: the parameters that fully determine the program a benchmark row measures.
Case = dict[str, Any]
# A program description: what programs.build builds, in published.json's fields where it can.
Description = dict[str, Any]

_MIB = 2**20


@dataclass(frozen=True)
class Suite:
    """One experiment: its cases, how a case becomes a program, and how rows are plotted.

    Attributes:
        name: the ``--suite`` name.
        title: a one-line title for tables and plots.
        question: what the experiment measures, in a sentence.
        program: case parameters -> program description (see ``programs.build``).
        full: the cases of a full run (sized for the ANE).
        quick: the cases of ``--quick`` (sized for the reference backend).
        x: case parameters -> the x coordinate of the row in plots.
        x_label: the x axis label.
        series: case parameters -> the name of the plotted series the row belongs to.
        mode: "run" times one evaluation after another through the kernel's buffers;
            "queue" times ``params["in_flight"]`` evaluations submitted at once.
        compare: (parameter, baseline value): the summary gives, for every other value, its
            speed-up over the baseline with all other parameters equal.
        find_cliff: the summary reports where the marginal throughput first halves.
        rating: the suite answers what the chip's TOPS rating means (``rating.rated_finding``).
        marks: chip -> (x, label) pairs the plots mark on the chip's panels (where the
            published sources put a threshold, in the suite's x units).
        note: what to keep in mind when reading the rows.
    """

    name: str
    title: str
    question: str
    program: Callable[[Case], Description]
    full: tuple[Case, ...]
    quick: tuple[Case, ...]
    x: Callable[[Case], float]
    x_label: str
    series: Callable[[Case], str] = field(default=lambda p: "")
    mode: str = "run"
    compare: tuple[str, Any] | None = None
    find_cliff: bool = False
    rating: bool = False
    marks: Callable[[Chip], list[tuple[float, str]]] = field(default=lambda chip: [])
    note: str = ""

    def cases(self, quick: bool) -> tuple[Case, ...]:
        """The cases of a quick or a full run."""
        return self.quick if quick else self.full


def conv_chain(
    channels: int, height: int, width: int, depth: int, io_dtype: str, w8a8: bool = False
) -> Description:
    """The description of a 1x1-conv chain, in ``anekit/bench/data/published.json``'s fields."""
    return {
        "kind": "conv_chain",
        "channels": channels,
        "height": height,
        "width": width,
        "depth": depth,
        "io_dtype": io_dtype,
        "w8a8": w8a8,
    }


def _grid(**axes: Any) -> tuple[Case, ...]:
    """Every combination of the given values, in order (the last axis varies fastest)."""
    cases: list[Case] = [{}]
    for key, values in axes.items():
        values = values if isinstance(values, (list, tuple)) else [values]
        cases = [{**c, key: v} for c in cases for v in values]
    return tuple(cases)


def _chain(p: Case) -> Description:
    return conv_chain(
        p["channels"], p["height"], p["width"], p["depth"], p["io_dtype"], p.get("w8a8", False)
    )


def _single_conv(io_dtype: str) -> Callable[[Case], Description]:
    def describe(p: Case) -> Description:
        return conv_chain(p["channels"], 1, p["seq"], 1, io_dtype)

    return describe


def _weight_mib(p: Case) -> float:
    return p["channels"] ** 2 * 2 / _MIB


# maderix/ANE inmem_bench: one 1x1 conv, C = 256..4096 channels, 64 tokens, fp32 I/O
# (https://github.com/maderix/ANE/issues/3); 64 and 128 channels show the floor.
DISPATCH = Suite(
    name="dispatch",
    title="Per-call latency vs size (one 1x1 conv, fp32 I/O)",
    question="How long one evaluation takes as the program grows from the dispatch floor up.",
    program=_single_conv("fp32"),
    full=_grid(channels=[64, 128, 256, 512, 1024, 2048, 3072, 4096], seq=64),
    quick=_grid(channels=[64, 256, 1024], seq=64),
    x=lambda p: p["channels"],
    x_label="channels (C -> C, 64 tokens)",
)

MATMUL_SCALING = Suite(
    name="matmul_scaling",
    title="Square matmuls, two runtime inputs",
    question="What throughput one large matmul reaches as it grows (N^3 work, N^2 I/O).",
    program=lambda p: {
        "kind": "matmul",
        "m": p["n"],
        "k": p["n"],
        "n": p["n"],
        "io_dtype": p["io_dtype"],
    },
    full=_grid(io_dtype=["fp16", "fp32"], n=[256, 512, 1024, 2048, 4096]),
    quick=_grid(io_dtype=["fp16", "fp32"], n=[128, 256, 512]),
    x=lambda p: p["n"],
    x_label="N (N x N x N matmul)",
    series=lambda p: f"{p['io_dtype']} I/O",
    compare=("io_dtype", "fp32"),
)

CONV_VS_MATMUL = Suite(
    name="conv_vs_matmul",
    title="1x1 conv vs matmul at equal FLOPs (2 C^2 S)",
    question="Whether the same projection is faster as a 1x1 conv or as a matmul.",
    program=lambda p: {"kind": "projection", **p},
    full=_grid(form=list(PROJECTION_FORMS), channels=[256, 512, 1024, 2048, 4096], seq=256),
    quick=_grid(form=list(PROJECTION_FORMS), channels=[128, 512], seq=64),
    x=lambda p: p["channels"],
    x_label="channels (C -> C)",
    series=lambda p: {
        "conv": "1x1 conv",
        "matmul": "matmul, const weight",
        "matmul_input": "matmul, weight as input",
    }[p["form"]],
    compare=("form", "conv"),
)

# ANE_NOTES section 7 / maderix/ANE README: 512 ch, 64x64, fp16 I/O; and maderix's
# inmem_peak sweep (512 ch, 64 tokens, fp32 I/O; maderix/ANE issue 3 and the report).
PEAK = Suite(
    name="peak",
    title="Peak throughput: chained 1x1 convs, depth sweep",
    question="How throughput approaches peak as a graph gets deeper (I/O amortised over depth).",
    program=_chain,
    full=_grid(
        channels=512, height=64, width=64, io_dtype="fp16", depth=[1, 2, 4, 8, 16, 32, 64, 128]
    )
    + _grid(channels=512, height=1, width=64, io_dtype="fp32", depth=[32, 48, 64, 96, 128]),
    quick=_grid(channels=128, height=16, width=16, io_dtype="fp16", depth=[1, 4, 16, 64])
    + _grid(channels=512, height=1, width=64, io_dtype="fp32", depth=32),
    x=lambda p: p["depth"],
    x_label="depth (chained convs)",
    series=lambda p: f"{p['channels']} ch, {p['height']}x{p['width']}, {p['io_dtype']} I/O",
    rating=True,
)

# maderix/ANE sram_bench: one 1x1 conv of growing weight, looking for the on-chip memory
# cliff (benchmarks/submissions/m3-ultra-*/raw/sram_bench.log). Only the channel count
# changes: 64 tokens at every point, so the working set grows and nothing else does.
SRAM = Suite(
    name="sram",
    title="On-chip memory: weight-size sweep (one 1x1 conv, 64 tokens, fp16 I/O)",
    question="Where throughput falls as one op's weights outgrow on-chip memory.",
    program=_single_conv("fp16"),
    full=_grid(channels=[256, 512, 1024, 2048, 3072, 4096, 5120, 6144, 8192], seq=64),
    quick=_grid(channels=[256, 1024, 2048, 4096], seq=64),
    x=_weight_mib,
    x_label="weight size (MiB, fp16)",
    find_cliff=True,
    marks=lambda chip: [
        (chip.cost.operand_tile_bytes / _MIB, "per-operand tile (2 MiB)"),
        (chip.cost.working_set_bytes / _MIB, f"working set (~{chip.working_set_mb:g} MB)"),
    ],
    note=(
        "The cliff is where the marginal throughput (extra FLOPs over extra time between "
        "neighbouring sizes) falls below half its best: a fixed floor spread over more work "
        "cannot hide it. The sources place the SRAM cliff differently (ANE_NOTES 1): an op's "
        "whole working set over ~32 MB (inferred on M4), or any one operand over a 2 MiB "
        "tiling threshold; the cost model's sram_cliff switch costs either, and both "
        "predictions are given. At 64 tokens one conv is bound by streaming its weights, "
        "which leave on-chip memory past the 2 MiB on-chip tensor budget in both readings."
    ),
)

# ANE_NOTES section 7 / maderix/ANE README, INT8 W8A8 table: 512 ch, 64x64, fp16 I/O.
INT8 = Suite(
    name="int8",
    title="W8A8 int8 vs fp16 chains of 1x1 convs",
    question="How much faster int8 activations between layers (W8A8) make a conv chain.",
    program=_chain,
    full=_grid(
        w8a8=[False, True],
        channels=512,
        height=64,
        width=64,
        io_dtype="fp16",
        depth=[8, 16, 32, 64, 128],
    ),
    quick=_grid(
        w8a8=[False, True], channels=128, height=16, width=16, io_dtype="fp16", depth=[4, 16]
    ),
    x=lambda p: p["depth"],
    x_label="depth (chained convs)",
    series=lambda p: "W8A8 int8" if p["w8a8"] else "fp16",
    compare=("w8a8", False),
)

IO_DTYPE = Suite(
    name="io_dtype",
    title="fp16 vs fp32 program I/O (one 1x1 conv)",
    question="What fp32 inputs and outputs (cast at the program's edges) cost over fp16 ones.",
    program=lambda p: conv_chain(p["channels"], 1, p["seq"], 1, p["io_dtype"]),
    full=_grid(io_dtype=["fp16", "fp32"], channels=768, seq=[64, 256, 1024, 4096]),
    quick=_grid(io_dtype=["fp16", "fp32"], channels=256, seq=[64, 512]),
    x=lambda p: p["seq"],
    x_label="tokens (C = channels, [1, C, 1, S])",
    series=lambda p: f"{p['io_dtype']} I/O",
    compare=("io_dtype", "fp32"),
)

QUEUE = Suite(
    name="queue",
    title="Evaluations in flight via submit()",
    question="How per-evaluation time falls as more evaluations are queued at once (up to 127).",
    program=lambda p: conv_chain(p["channels"], 1, p["seq"], p["depth"], "fp16"),
    full=_grid(in_flight=[1, 2, 4, 8, 16, 32, 64, 127], channels=512, seq=64, depth=8),
    quick=_grid(in_flight=[1, 4, 16, 127], channels=128, seq=64, depth=4),
    x=lambda p: p["in_flight"],
    x_label="evaluations in flight",
    mode="queue",
    compare=("in_flight", 1),
    note=(
        "Times are per evaluation (a batch's wall time over its size). The prediction is the "
        "cost model's time for one evaluation on its own: it does not model queued "
        "evaluations overlapping. The reference backend runs at most max_in_flight() "
        "evaluations at once; the rest wait in its queue."
    ),
)

SUITES: dict[str, Suite] = {
    s.name: s for s in (DISPATCH, MATMUL_SCALING, CONV_VS_MATMUL, PEAK, SRAM, INT8, IO_DTYPE, QUEUE)
}
