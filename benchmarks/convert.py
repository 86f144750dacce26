"""PyTorch front end: converting a 12-layer BERT-base with an attention mask, and its
reference forward vs PyTorch.

The model is transformers' BertModel with BERT-base's default config (12 layers, hidden
768, 12 heads, vocabulary 30522), random weights (seed 0, nothing downloaded), on one
sequence of 128 token ids whose last quarter is padding (``attention_mask`` 0 there, a
keyword input of the program). The load average is printed beside the figures: the
machine may be shared.

- Conversion: ``anekit.from_torch(verify=False)`` split into capture (torch.export and
  decompositions), lowering and each rewrite pass; MIL statements per second over the
  whole conversion. Target (issue 15): under 10 s.
- Forward: the converted program on the reference backend vs the PyTorch module in fp32,
  with BLAS threads (threadpoolctl) and torch threads pinned to the same count, the two
  interleaved, min and median of several runs. Target (issue 15): within 2x of PyTorch.

Usage: python benchmarks/convert.py [--threads N] [--repeat N] [--seq N]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np


def _bert(seq: int):
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig()).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.long)
    mask[:, seq - seq // 4 :] = 0
    return torch, model, ids, {"attention_mask": mask}


def convert_once(model, ids, kwargs) -> tuple[dict[str, float], object]:
    """One conversion, timed by phase."""
    from anekit.frontends.torch import capture, convert_exported
    from anekit.hw import get_chip
    from anekit.passes import CONVERT_PASSES

    chip = get_chip("m4")
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    exported = capture(model, (ids,), kwargs)
    times["capture (export + decompositions)"] = time.perf_counter() - t0
    t = time.perf_counter()
    program = convert_exported(exported)
    times["lowering"] = time.perf_counter() - t
    for p in CONVERT_PASSES:
        t = time.perf_counter()
        program = p(program, chip)
        times[f"pass {p.name}"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - t0
    return times, program


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=5, help="forward runs of each side")
    parser.add_argument("--conversions", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)

    from threadpoolctl import threadpool_info, threadpool_limits

    import anekit
    from anekit.frontends.torch import compare

    torch, model, ids, kwargs = _bert(args.seq)
    print(f"load average before: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    runs = [convert_once(model, ids, kwargs) for _ in range(args.conversions)]
    program = runs[-1][1]
    statements = len(program.main.ops)
    print(
        f"BERT-base (12 layers, hidden 768, vocab 30522), seq {args.seq} "
        f"({args.seq // 4} padded, attention_mask input), random init"
    )
    print(f"conversion, {len(runs)} runs (min / median, seconds):")
    for phase in runs[0][0]:
        values = [r[0][phase] for r in runs]
        print(f"  {phase:<36} {min(values):7.2f} / {float(np.median(values)):7.2f}")
    best = min(r[0]["total"] for r in runs)
    print(
        f"  {statements} MIL statements, {statements / best:,.0f} statements/s; "
        f"target < 10 s: {'met' if best < 10 else 'NOT met'}"
    )

    report = compare(model, (ids,), program, kwargs=kwargs)
    print(f"fidelity: worst relative error {report.worst.rel_error:.2e} ({report.worst.name})")

    mask = kwargs["attention_mask"]
    inputs = {"input_ids": ids.numpy().astype(np.int32), "attention_mask": mask.numpy()}
    inputs["attention_mask"] = inputs["attention_mask"].astype(np.int32)
    with threadpool_limits(limits=args.threads):
        torch.set_num_threads(args.threads)
        blas = [f"{i['internal_api']}={i['num_threads']}" for i in threadpool_info()]
        print(
            f"forward, {args.repeat} interleaved runs each; threads: torch {args.threads}, {blas}"
        )
        ours, theirs = [], []
        with anekit.compile(program, backend="reference") as kernel, torch.no_grad():
            kernel(**inputs), model(ids, **kwargs)  # warm up both
            for _ in range(args.repeat):
                t = time.perf_counter()
                kernel(**inputs)
                ours.append(time.perf_counter() - t)
                t = time.perf_counter()
                model(ids, **kwargs)
                theirs.append(time.perf_counter() - t)
    o_min, o_med = min(ours), float(np.median(ours))
    t_min, t_med = min(theirs), float(np.median(theirs))
    print(f"  anekit reference backend: min {o_min * 1e3:8.1f} ms, median {o_med * 1e3:8.1f} ms")
    print(f"  PyTorch CPU fp32:         min {t_min * 1e3:8.1f} ms, median {t_med * 1e3:8.1f} ms")
    ratio = o_med / t_med
    print(f"  ratio (median) {ratio:.2f}x; target <= 2x: {'met' if ratio <= 2 else 'NOT met'}")
    print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
