"""``anekit convert MODEL.pt2|MODEL.onnx --out DIR``: a PyTorch ExportedProgram or an ONNX
model to an ANE-ready MIL model."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from pathlib import Path
from typing import Any

from anekit.cli._common import add_chip, non_negative, one_of, progress_bar, resolve_chip
from anekit.errors import UsageError


def _schemes() -> list[str]:
    from anekit.compression import CHOICES

    return list(CHOICES)


# conversions with more graph nodes than this get a progress bar (or progress lines)
PROGRESS_FROM = 300


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        help="an ExportedProgram saved with torch.export.save (.pt2) or an ONNX model (.onnx); "
        "with --llm a Hugging Face language-model directory",
    )
    parser.add_argument(
        "--llm",
        action="store_true",
        help="save a language model with its weights compressed once (--compress) into a new "
        "directory that load, generate, chat and serve open without compressing again",
    )
    parser.add_argument(
        "--out", required=True, help="output model directory (model.mil + weights/)"
    )
    add_chip(parser, "the chip whose limits the passes respect and that --check/--estimate use")
    parser.add_argument(
        "--check", action="store_true", help="print the chip's compatibility diagnostics"
    )
    parser.add_argument("--estimate", action="store_true", help="print the chip's cost estimate")
    parser.add_argument(
        "--numerics",
        help="the numerics profile the fidelity gate runs on: 'ideal', a chip, a family or a "
        "profile file (default: the --chip's profile; docs/numerics.md)",
    )
    parser.add_argument(
        "--passes",
        help="comma-separated rewrite passes to run (default: all; 'none' keeps the fp32 program)",
    )
    parser.add_argument(
        "--compress",
        type=one_of("scheme", _schemes),
        help="compress the weights for the chip: int8, w8a8, lut6, lut4 or auto (anekit compress)",
    )
    parser.add_argument(
        "--max-error",
        type=non_negative(float),
        help="with --compress: budget on the relative output error against the uncompressed "
        "program (layers fall back until it holds; auto: default 0.02)",
    )
    parser.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=D,D,..",
        help="ONNX: the static shape of an input declared with dynamic dimensions (repeatable)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="let torch's log and warnings through while loading"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _input_shapes(items: list[str]) -> dict[str, list[int]]:
    """``--input-shape NAME=1,3,224,224`` (repeated) as a dict."""
    shapes = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise UsageError(
                f"--input-shape {item!r}: expected NAME=D,D,.. with integers"
            ) from None
        if not name or not shapes[name]:
            raise UsageError(f"--input-shape {item!r}: expected NAME=D,D,..")
    return shapes


def _converter(path: str, input_shapes: dict[str, list[int]], verbose: bool) -> Any:
    """The front end's ``convert_file`` for the file's kind (by suffix: .onnx, else .pt2),
    with the options only that front end takes (ONNX: input shapes; torch: verbose)."""
    try:
        if path.lower().endswith(".onnx"):
            from anekit.frontends.onnx import convert_file

            return functools.partial(convert_file, input_shapes=input_shapes)
        if input_shapes:
            raise UsageError("--input-shape applies to ONNX models (.onnx)")
        from anekit.frontends.torch import convert_file
    except ImportError as e:  # torch and onnx are optional extras; the message says how
        raise UsageError(str(e)) from None
    return functools.partial(convert_file, verbose=verbose)


def run(args: argparse.Namespace) -> int:
    if args.llm:
        return _save_llm(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError("is a file; expected a directory for --out", path=str(out))
    convert_file = _converter(args.path, _input_shapes(args.input_shape), args.verbose)
    if args.max_error is not None and args.compress is None:
        raise UsageError("--max-error applies to --compress")
    chip = resolve_chip(args.chip)
    passes = _passes(args.passes)
    with _Progress() as progress:
        result = convert_file(
            args.path, out, chip=chip, check=args.check, estimate=args.estimate,
            passes=passes, progress=progress, compress=args.compress, max_error=args.max_error,
            numerics=args.numerics,
        )  # fmt: skip
    from anekit.frontends.fidelity import TOLERANCE
    from anekit.hw.kinds import Severity

    errors = [d for d in result.diagnostics if d.severity is Severity.ERROR]
    fidelity_ok = result.fidelity is None or result.fidelity.worst.rel_error <= TOLERANCE
    if args.json:
        print(json.dumps(_as_json(result, chip.name), indent=1))
    else:
        _print_text(args, result, chip.name)
    return 0 if fidelity_ok and not errors else 1


def _save_llm(args: argparse.Namespace) -> int:
    """``--llm``: load the model with ``--compress`` for the chip, save it with its encodings."""
    import time

    from anekit import llm
    from anekit.llm.compressed import CHOICES
    from anekit.llm.saved import save_compressed

    if args.compress not in CHOICES:
        raise UsageError(f"--llm needs --compress, one of {', '.join(CHOICES)}")
    flags = (args.check, args.estimate, args.passes, args.input_shape, args.numerics)
    if any(flags) or args.max_error is not None:
        raise UsageError("--llm takes --out, --compress and --chip only")
    chip = resolve_chip(args.chip)
    begin = time.perf_counter()
    with llm.load(args.path, chip=chip.name, compress=args.compress) as model:
        manifest = save_compressed(model, args.path, args.out)
    seconds = time.perf_counter() - begin
    encodings = sum(len(p["encodings"]) for p in manifest["programs"].values())
    record = {"out": args.out, "scheme": manifest["scheme"], "chip": manifest["chip"],
              "layout": manifest["layout"], "encodings": encodings, "seconds": round(seconds, 2),
              "residual_scale": manifest["residual_scale"],
              "files": sorted(manifest["checksums"])}  # fmt: skip
    if args.json:
        print(json.dumps(record, indent=1))
    else:
        print(f"wrote {args.out}: {encodings} weights encoded with {manifest['scheme']} for "
              f"{manifest['chip']}'s layout in {seconds:.1f} s, residual scale alpha "
              f"{manifest['residual_scale']:g}; load, generate, chat and serve open it without "
              "compressing or calibrating again")  # fmt: skip
    return 0


def _passes(text: str | None) -> Any:
    """``--passes`` as convert_file takes it: None (all), () or a list of known names."""
    from anekit.passes import PASSES

    if text is None:
        return None
    if text == "none":
        return ()
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PASSES]
    if unknown:
        raise UsageError(f"--passes: unknown pass {unknown[0]!r}; known: {', '.join(PASSES)}")
    return names


class _Progress:
    """``progress(done, total)`` for convert_file: a bar (or lines) past PROGRESS_FROM nodes."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.lines = False
        self.step = 1

    def __call__(self, done: int, total: int) -> None:
        if total <= PROGRESS_FROM:
            return
        if self.bar is None and not self.lines:
            self.bar = progress_bar(total, unit="node")
            self.lines = self.bar is None
            self.step = max(1, total // 10)
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
        elif done % self.step == 0 or done == total:
            print(f"[{done}/{total}] nodes lowered", file=sys.stderr)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


def _as_json(result: Any, chip: str) -> dict:
    est = result.estimate
    return {
        "out": str(result.out_dir),
        "chip": chip,
        "nodes": result.nodes,
        "statements": len(result.program.main.ops),
        "fidelity": None if result.fidelity is None else result.fidelity.to_dict(),
        "diagnostics": [dataclasses.asdict(d) for d in result.diagnostics],
        "converter_notes": [
            {**dataclasses.asdict(f.diagnostic), "reason": f.reason} for f in result.converter_notes
        ],
        "estimate": None
        if est is None
        else {"seconds": est.seconds, "flops": est.flops, "bytes": est.bytes},
        "compression": None if result.compression is None else result.compression.record(),
        "renamed": result.renamed,
    }


def _print_text(args: argparse.Namespace, result: Any, chip: str) -> None:
    from anekit.cli.estimate import estimate_table
    from anekit.hw.kinds import Severity

    print(
        f"wrote {result.out_dir / 'model.mil'} and {result.out_dir / 'weights'}/ "
        f"({result.nodes} graph nodes, {len(result.program.main.ops)} MIL statements)"
    )
    for old, new in result.renamed.items():
        print(f"renamed {old!r} -> {new!r} (not a valid MIL name)")
    if result.fidelity is None:
        print("no example inputs saved with the ExportedProgram: fidelity not measured")
    else:
        print(result.fidelity)
    if result.compression is not None:
        print("\n".join(result.compression.lines()))
    if args.check:
        model = str(result.out_dir / "model.mil")
        for d in result.diagnostics:
            print(d.format(model))
        counts = {s: sum(d.severity == s for d in result.diagnostics) for s in Severity}
        print(
            f"{chip}: {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"
        )
        if result.converter_notes:
            print(
                f"({len(result.converter_notes)} finding(s) about what the converter chose, "
                "recorded in the model and not advice: `anekit check --facts` shows them, "
                "--json lists them as converter_notes)"
            )
    if args.estimate:
        print(estimate_table(result.estimate))
