"""``anekit estimate FILE``: how long one evaluation takes on a chip, op by op.

``anekit estimate --model DIR``: the prefill and decode tokens/s a language model would
reach on a chip, from the kernels it would run (:mod:`anekit.llm.cost`); with ``--draft``,
the speed-up speculative decoding would bring (:func:`anekit.llm.cost.estimate_speculative`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING, Any

from anekit.cli._common import (
    SHAPES_HELP,
    add_chip,
    llm_compression,
    load_program,
    non_negative,
    positive_int,
    resolve_chip,
)

if TYPE_CHECKING:
    from anekit.hw.cost import Estimate


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", help=SHAPES_HELP)
    parser.add_argument(
        "--model",
        help="instead of a program, a language model (Hugging Face directory, .gguf, llama2.c .bin or "
        "training checkpoint): predict its prefill and decode tokens/s",
    )
    parser.add_argument(
        "--prompt-tokens",
        type=non_negative(int),
        default=128,
        help="with --model: the prompt length to predict for (default: 128)",
    )
    parser.add_argument(
        "--compress",
        type=llm_compression,
        help="with --model: predict the model loaded with this weight compression ("
        "int8, w8a8, lut6, lut4, fp16)",
    )
    parser.add_argument(
        "--draft",
        help="with --model: a draft model for speculative decoding; predict the speed-up",
    )
    parser.add_argument(
        "--draft-tokens", type=positive_int, default=4,
        help="with --draft: tokens proposed per check (default: 4)",
    )  # fmt: skip
    parser.add_argument(
        "--acceptance", type=non_negative(float), default=0.7,
        help="with --draft: the assumed chance that the target accepts a proposal (default: 0.7)",
    )  # fmt: skip
    add_chip(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--all-chips", action="store_true", help="one line per chip profile")


def run(args: argparse.Namespace) -> int:
    from anekit.errors import UsageError
    from anekit.hw.chips import chips, get_chip
    from anekit.hw.cost import analyze, estimate_work

    if (args.path is None) == (args.model is None):
        raise UsageError("give a program (FILE or DIR) or --model DIR, and not both")
    if args.model is not None:
        return _run_model(args)
    program = load_program(args.path, shapes_only=True)  # shapes and dtypes, not weights
    work = analyze(program)
    if args.all_chips:
        estimates = [estimate_work(work, get_chip(name)) for name in chips()]
        rejected = [_rejections(program, e.chip) for e in estimates]
        if args.json:
            rows = [{**_summary(e), "checker_errors": r} for e, r in zip(estimates, rejected)]
            print(json.dumps(rows, indent=1))
            return 0
        print(f"{'chip':10} {'ms':>10} {'likely ms':>19} {'TFLOPS':>8}  bound by")
        for e, r in zip(estimates, rejected):
            s = _summary(e)
            flag = f"  (the checker rejects it: {len(r)} errors)" if r else ""
            likely = f"{e.low_s * 1e3:.4f}-{e.high_s * 1e3:.4f}"
            print(f"{e.chip:10} {e.seconds * 1e3:10.4f} {likely:>19} {e.tflops:8.2f}  "
                  f"{s['bound']}{flag}")  # fmt: skip
        return 0
    est = estimate_work(work, resolve_chip(args.chip))
    rejected = _rejections(program, est.chip)
    if args.json:
        print(json.dumps({**dataclasses.asdict(est), "checker_errors": rejected}, indent=1))
        return 0
    print(estimate_table(est))
    if rejected:
        rules = ", ".join(sorted({r["rule"] for r in rejected}))
        print(
            f"note: the checker rejects this program on {est.chip} ({len(rejected)} errors: "
            f"{rules}; see anekit check): it would not compile, so the total above is for a "
            "program that cannot run"
        )
    return 0


def _rejections(program, chip: str) -> list[dict]:
    """The checker's errors for the program on ``chip`` (an estimate is only as good as these)."""
    from anekit.hw.compat import check
    from anekit.hw.kinds import Severity

    return [
        {"rule": d.rule, "line": d.line, "message": d.message}
        for d in check(program, chip)
        if d.severity is Severity.ERROR
    ]


def _run_model(args: argparse.Namespace) -> int:
    """``--model``: predicted prefill and decode speed on one chip, or on every chip."""
    from anekit.hw.chips import chips
    from anekit.llm import read_model_config
    from anekit.llm.cost import estimate_llm
    from anekit.llm.run import estimate_report

    config = read_model_config(args.model)
    if args.draft is not None:
        return _run_speculative(args, config)
    options = {"prompt_tokens": args.prompt_tokens, "compress": args.compress}
    if args.all_chips:
        rows = [estimate_llm(config, name, **options) for name in chips()]
        if args.json:
            print(json.dumps([r.record() for r in rows], indent=1))
            return 0
        print(f"{'chip':10} {'prefill tok/s':>14} {'decode tok/s':>13}")
        for r in rows:
            print(f"{r.chip:10} {r.prefill_tokens_per_s:14.1f} {r.decode_tokens_per_s:13.1f}")
        return 0
    est, lines = estimate_report(config, resolve_chip(args.chip).name, **options)
    print(json.dumps(est.record(), indent=1) if args.json else "\n".join(lines))
    return 0


def _run_speculative(args: argparse.Namespace, config: Any) -> int:
    """``--model M --draft D``: the predicted speed-up of speculative decoding, per chip."""
    from anekit.hw.chips import chips
    from anekit.llm import read_model_config
    from anekit.llm.cost import estimate_speculative

    draft = read_model_config(args.draft)
    names = list(chips()) if args.all_chips else [resolve_chip(args.chip).name]
    rows = [
        estimate_speculative(config, draft, name, draft_tokens=args.draft_tokens,
                             acceptance=args.acceptance, prompt_tokens=args.prompt_tokens)
        for name in names
    ]  # fmt: skip
    if args.json:
        records = [r.record() for r in rows]
        print(json.dumps(records if args.all_chips else records[0], indent=1))
        return 0
    print(f"speculative decoding: {args.draft_tokens} draft tokens per check, acceptance "
          f"{args.acceptance:.0%} (assumed), cost model")  # fmt: skip
    print(f"{'chip':10} {'target ms':>10} {'draft ms':>9} {'check ms':>9} {'tok/round':>10} "
          f"{'speed-up':>9}")  # fmt: skip
    for r in rows:
        print(f"{r.chip:10} {r.target_step_s * 1e3:10.3f} {r.draft_step_s * 1e3:9.3f} "
              f"{r.verify_s * 1e3:9.3f} {r.tokens_per_round:10.2f} {r.speedup:8.2f}x")  # fmt: skip
    return 0


def estimate_table(est: Estimate) -> str:
    """The per-op breakdown of an estimate, followed by the totals."""
    lines = [
        f"{'op':28} {'name':24} {'line':>5} {'GFLOP':>9} {'MB':>9} {'ms':>9} {'share':>6}  bound"
    ]
    for r in est.rows:
        share = r.seconds / est.seconds if est.seconds else 0.0
        lines.append(
            f"{r.op:28.28} {r.name:24.24} {r.line if r.line is not None else '':>5} "
            f"{r.flops / 1e9:9.3f} {r.bytes / 1e6:9.3f} {r.seconds * 1e3:9.4f} {share:6.1%}  {r.bound}"
        )
    lines.append(
        f"total on {est.chip}: {est.seconds * 1e3:.4f} ms (likely {est.low_s * 1e3:.4f}-"
        f"{est.high_s * 1e3:.4f} ms), {est.flops / 1e9:.3f} GFLOP, {est.bytes / 1e6:.3f} MB moved, "
        f"{est.tflops:.2f} TFLOPS"
    )
    return "\n".join(lines)


def _summary(e: Estimate) -> dict:
    """Seconds, TFLOPS and the bound (compute / memory / overhead) taking most of the time."""
    by_bound: dict[str, float] = {}
    for r in e.rows:
        by_bound[r.bound] = by_bound.get(r.bound, 0.0) + r.seconds
    return {
        "chip": e.chip,
        "seconds": e.seconds,
        "likely_seconds": [e.low_s, e.high_s],
        "tflops": e.tflops,
        "bound": max(by_bound, key=by_bound.get),
    }
