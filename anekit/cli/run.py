"""``anekit run``: run a MIL program on a backend and summarise its outputs."""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from anekit.cli._common import MODEL_HELP, add_backend, add_threads, load_program, non_negative
from anekit.errors import UsageError, os_reason

if TYPE_CHECKING:
    import numpy as np

    from anekit.mil.program import Program


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=MODEL_HELP)
    parser.add_argument(
        "--weights", help="directory holding the weight files (default: beside the model)"
    )
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input array (repeatable)",
    )
    parser.add_argument(
        "--random", action="store_true", help="fill inputs not given with random values"
    )
    parser.add_argument(
        "--seed", type=non_negative(int), default=0, help="seed for --random (default 0)"
    )
    add_backend(parser)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="evaluations to time (default 1); above 1, one untimed warm-up comes first",
    )
    add_threads(parser)
    parser.add_argument("--out", help="write the outputs to this .npz file")
    parser.add_argument(
        "--json", action="store_true", help="print a JSON summary instead of a table"
    )


def gather_inputs(
    program: Program, specs: list[str], random: bool, seed: int
) -> dict[str, np.ndarray]:
    """Inputs from NAME=FILE.npy arguments, and random values for the rest when asked."""
    import numpy as np

    from anekit.backends.base import TensorSpec

    arrays: dict[str, np.ndarray] = {}
    names = [v.name for v in program.inputs]
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep:
            raise UsageError(f"--input expects NAME=FILE.npy, found {spec!r}")
        if name in arrays:
            raise UsageError(f"--input {spec!r}: {name!r} is given twice")
        if name not in names:
            raise UsageError(f"--input {spec!r}: the program's inputs are {names}")
        arrays[name] = read_npy(file, spec)
    rng = np.random.default_rng(seed)
    for v in program.inputs:
        if v.name in arrays:
            continue
        if not random:
            raise UsageError(f"no value for input {v.name!r} {v.type}; give --input or --random")
        shape = TensorSpec.of(v).shape
        if v.dtype.is_float:
            arrays[v.name] = rng.standard_normal(shape).astype(v.dtype.numpy)
        elif v.dtype.is_int:
            arrays[v.name] = rng.integers(0, 8, shape).astype(v.dtype.numpy)
        else:
            arrays[v.name] = rng.random(shape) < 0.5
    return arrays


def read_npy(file: str, spec: str) -> np.ndarray:
    """The array in ``file`` (the value of ``--input spec``); a typed error names the file."""
    import numpy as np

    try:
        return np.load(file, allow_pickle=False)
    except OSError as e:
        raise UsageError(f"--input {spec!r}: cannot read {file}: {os_reason(e)}") from None
    except ValueError as e:  # not .npy, or object (pickled) data
        raise UsageError(f"--input {spec!r}: cannot read {file} as .npy: {e}") from None


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write arrays as an .npz file at exactly ``path``, atomically."""
    import numpy as np

    from anekit.files import write_atomic

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomic(path, buffer.getvalue())


def summarise(name: str, a: np.ndarray) -> dict[str, object]:
    """Shape, dtype and finite-value statistics of one output."""
    import numpy as np

    finite = a[np.isfinite(a)] if a.dtype.kind == "f" else a
    stats = (
        {
            "min": float(finite.min()),
            "max": float(finite.max()),
            "mean": float(finite.astype(np.float64).mean()),
        }
        if finite.size
        else {"min": None, "max": None, "mean": None}
    )
    nonfinite = int(a.size - finite.size) if a.dtype.kind == "f" else 0
    return {
        "name": name,
        "shape": list(a.shape),
        "dtype": str(a.dtype),
        **stats,
        "nonfinite": nonfinite,
    }


def run(args: argparse.Namespace) -> int:

    from anekit.backends import compile, resolve_backend
    from anekit.backends.base import TensorSpec, convert_input
    from anekit.bench.measure import Timing
    from anekit.bench.threads import describe, pinned

    if args.repeat < 1:
        raise UsageError(f"--repeat must be >= 1, found {args.repeat}")
    program = load_program(args.model, args.weights)
    inputs = gather_inputs(program, args.input, args.random, args.seed)
    try:  # before compiling: a wrong --input file should not cost a compile
        inputs = {v.name: convert_input(TensorSpec.of(v), inputs[v.name]) for v in program.inputs}
    except ValueError as e:  # wrong shape, or a dtype that would lose data
        raise UsageError(str(e)) from e
    backend = resolve_backend(args.backend)
    start = time.perf_counter()
    with compile(program, backend=backend) as kernel:
        compile_s = time.perf_counter() - start
        times = []
        with pinned(args.threads) as pinning:  # unpinned BLAS threads contend: 100x slower
            if args.repeat > 1:
                kernel(**inputs)  # first-call costs (allocation, caches) are not the steady time
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                outputs = kernel(**inputs)
                times.append(time.perf_counter() - t0)
    measured = Timing(tuple(times), 1)
    if args.out:
        write_npz(Path(args.out), outputs)
    rows = [summarise(name, a) for name, a in outputs.items()]
    timing = {
        "compile_ms": compile_s * 1e3,
        "run_ms": measured.median * 1e3,
        "run_min_ms": measured.min * 1e3,
        "spread": measured.spread,
        "noisy": measured.noisy,
        "repeat": len(times),
        "threads": pinning,
    }
    if args.json:
        json.dump({"backend": backend, "outputs": rows, **timing}, sys.stdout, indent=2)
        print()
        return 0
    print(
        f"backend {backend}: compile {timing['compile_ms']:.2f} ms, run {timing['run_ms']:.3f} ms "
        f"(median of {len(times)}; min {timing['run_min_ms']:.3f} ms, spread "
        f"{measured.spread:.2f}x); {describe(pinning)}"
    )
    if measured.noisy:
        print(
            f"  NOISY: the slow runs took {measured.spread:.1f}x the fastest: the machine "
            "changed while timing, so the median means little (the min is steadier)"
        )
    for r in rows:
        stats = (
            "no finite values"
            if r["min"] is None
            else f"min {r['min']:.6g}  max {r['max']:.6g}  mean {r['mean']:.6g}"
        )
        extra = f"  ({r['nonfinite']} non-finite)" if r["nonfinite"] else ""
        print(f"  {r['name']}: {r['dtype']}{r['shape']}  {stats}{extra}")
    if args.out:
        print(f"outputs written to {args.out}")
    return 0
