"""``anekit run``: run a MIL program on a backend and summarise its outputs."""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from anekit.cli._common import (
    MODEL_HELP,
    add_backend,
    add_threads,
    load_program,
    non_negative,
    output_file,
)
from anekit.errors import UsageError

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
    parser.add_argument(
        "--saturate",
        action="store_true",
        help="clip float inputs beyond the input dtype's range (70000 into fp16) instead of failing",
    )
    add_backend(parser)
    parser.add_argument(
        "--numerics",
        help="the reference backend's numerics profile: ideal, a chip (m1, m4, ...), a family "
        "or a profile file (default: $ANEKIT_NUMERICS, else the default chip's)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="evaluations to time (default 1); above 1, one untimed warm-up comes first",
    )
    add_threads(parser)
    parser.add_argument("--out", type=output_file, help="write the outputs to this .npz file")
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
        arrays[v.name] = random_array(rng, TensorSpec.of(v).shape, v.dtype.numpy, v.name)
    return arrays


# --random draws this many values at a time into the input, so no float64 (or float32, for
# an fp16 input) copy of the whole input is ever made
_CHUNK = 2**20


def random_array(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, name: str
) -> np.ndarray:
    """Random values for input ``name``, drawn in its own dtype: normal floats, ints in [0, 8)."""
    import numpy as np

    from anekit.config import read_limit

    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > read_limit():
        raise UsageError(
            f"--random: input {name!r} {dtype}{list(shape)} is {nbytes} bytes, more than half "
            f"of this machine's memory ({2 * read_limit()} bytes)"
        )
    if dtype.kind == "b":
        return rng.integers(0, 2, shape, dtype=np.bool_)
    if dtype.kind in "iu":
        return rng.integers(0, 8, shape, dtype=dtype)
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)
    for start in range(0, flat.size, _CHUNK):  # float32 is the narrowest a Generator draws
        part = flat[start : start + _CHUNK]
        part[...] = rng.standard_normal(part.size, dtype=np.float32)
    return out


def read_npy(file: str, spec: str) -> np.ndarray:
    """The array in ``file`` (the value of ``--input spec``); a typed error names the file.

    The file must be a regular ``.npy`` file; it is memory-mapped, so a header claiming more
    data than the file holds is an error, not an allocation.
    """
    import numpy as np
    from numpy.lib.format import open_memmap

    from anekit.config import read_limit
    from anekit.files import open_regular

    def error(message: str, path: str) -> UsageError:
        return UsageError(f"--input {spec!r}: {path}: {message}")

    with open_regular(file, limit=read_limit(), what="a .npy file", error=error) as f:
        if f.read(6) != b"\x93NUMPY":
            raise error("not a .npy file (it does not start with \\x93NUMPY)", file)
    try:
        return np.array(open_memmap(file, mode="r"))
    except (OSError, ValueError, EOFError) as e:  # a bad header, object data, too short
        raise error(f"cannot read as .npy: {e}", file) from None


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

    from anekit.backends import compile
    from anekit.backends.base import TensorSpec, convert_input
    from anekit.bench.measure import Timing
    from anekit.bench.threads import describe, pinned

    if args.repeat < 1:
        raise UsageError(f"--repeat must be >= 1, found {args.repeat}")
    program = load_program(args.model, args.weights)
    inputs = gather_inputs(program, args.input, args.random, args.seed)
    try:  # before compiling: a wrong --input file should not cost a compile
        inputs = {
            v.name: convert_input(TensorSpec.of(v), inputs[v.name], saturate=args.saturate)
            for v in program.inputs
        }
    except ValueError as e:  # wrong shape, or a dtype that would lose data
        raise UsageError(str(e)) from e
    start = time.perf_counter()
    options = {} if args.numerics is None else {"numerics": args.numerics}
    with compile(program, backend=args.backend, **options) as kernel:
        compile_s = time.perf_counter() - start
        backend, placement = kernel.backend, kernel.placement
        times = []
        with pinned(args.threads) as pinning:  # unpinned BLAS threads contend: 100x slower
            start = time.perf_counter()
            kernel(**inputs)  # first-call costs (lazy imports, allocation, caches): apart
            first_s = time.perf_counter() - start
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                outputs = kernel(**inputs)
                times.append(time.perf_counter() - t0)
        cliffs = kernel.events  # what the golden model saturated, flushed, replaced
    measured = Timing(tuple(times), 1)
    if args.out:
        write_npz(Path(args.out), outputs)
    rows = [summarise(name, a) for name, a in outputs.items()]
    timing = {
        "compile_ms": compile_s * 1e3,  # the backend's first imports included
        "first_call_ms": first_s * 1e3,
        "run_ms": measured.median * 1e3,
        "run_min_ms": measured.min * 1e3,
        "spread": measured.spread,
        "noisy": measured.noisy,
        "repeat": len(times),
        "threads": pinning,
    }
    if args.json:
        record = {"backend": backend, "placement": placement.as_dict(), "outputs": rows, **timing}
        record["cliff_events"] = None if cliffs is None else cliffs.as_dict()
        json.dump(record, sys.stdout, indent=2)
        print()
        return 0
    print(
        f"backend {backend}: run {timing['run_ms']:.3f} ms (median of {len(times)} after the "
        f"first call; min {timing['run_min_ms']:.3f} ms, spread {measured.spread:.2f}x); once: "
        f"compile {timing['compile_ms']:.2f} ms (with the backend's imports), first call "
        f"{timing['first_call_ms']:.3f} ms; {describe(pinning)}"
    )
    print("\n".join(placement.lines()))
    if cliffs:
        print(f"  cliff events: {cliffs.summary()}")
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
