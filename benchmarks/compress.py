"""Weight compression: what each scheme stores, what it costs in accuracy, what it buys per chip.

1. The ~100M-parameter Llama of ``benchmarks/llm.py`` (random init, saved in fp16), loaded
   with ``llm.load(..., compress=SCHEME)`` on the reference backend, for each scheme:
   weight bytes as stored, the relative L2 error of the logits against the fp16 model on a
   fixed 64-token prompt (and how often the top token agrees), perplexity on a fixed
   256-token text against the fp16 model's, and the cost model's predicted decode tokens/s
   on M1, M4 and M5 against fp16 (both the dynamic-weight kernels the uncompressed model
   runs and the same segments with fp16 weights compiled in).
2. Whole programs through ``anekit.compress`` (what ``anekit compress`` does): a BERT
   (4 layers, hidden 256, 128 tokens, random init) converted with ``anekit.from_torch``,
   the decoder stack of ``anekit.bench.programs`` and a chain of 1x1 convs; each scheme
   and ``auto`` within a 2% output-error budget, with the measured output error and the
   predicted time per chip.

The model is random-init: its next-token distributions are close to uniform, so its
perplexity is near the vocabulary size and says little about language; the change
compression makes to it, and the logits error, are what this measures.

Run: ``python benchmarks/compress.py [--threads N]``. BLAS and torch are pinned to N
threads (default 1); times are the wall clock of one run on a shared machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import pinned
from llm import CONFIG, save_model

SCHEMES = ("int8", "w8a8", "lut6", "lut4")
CHIPS = ("m1", "m4", "m5")
PROMPT, TEXT = 64, 256


def perplexity(logits: np.ndarray, ids: list[int]) -> float:
    """exp of the mean negative log-likelihood of each next token of ``ids``."""
    x = logits[:-1].astype(np.float64)
    x -= x.max(axis=1, keepdims=True)
    log_p = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    return float(np.exp(-log_p[np.arange(len(ids) - 1), ids[1:]].mean()))


def llm_table(directory: Path, ids: list[int], text: list[int]) -> None:
    from anekit import llm
    from anekit.llm.cost import estimate_llm

    with llm.load(directory, backend="reference", max_seq=TEXT + 1) as base:
        config = base.config
        ref_logits, ref_ppl = base.logits(ids), perplexity(base.logits(text), text)
    dense = estimate_llm(config, "m4", prompt_tokens=128).weight_bytes
    speed = {
        (chip, c): estimate_llm(config, chip, prompt_tokens=128, compress=c).decode_tokens_per_s
        for chip in CHIPS
        for c in (None, "fp16", *SCHEMES)
    }
    print(f"model: {config.n_params() / 1e6:.1f}M parameters, {config.n_layers} layers")
    print(f"fp16 perplexity on the fixed text: {ref_ppl:.1f} (vocabulary {config.vocab_size})")
    head = "  ".join(f"{c} tok/s (x fp16)" for c in CHIPS)
    print(f"{'scheme':7} {'weight MB':>10} {'ratio':>6} {'logits err':>10} {'top-1':>6} "
          f"{'ppl':>9} {'d ppl':>7} {'load s':>7}  {head}")  # fmt: skip
    print(f"{'fp16':7} {dense / 1e6:10.1f} {1.0:6.3f} {0.0:10.2e} {1.0:6.3f} {ref_ppl:9.1f} "
          f"{0.0:+7.2%} {'-':>7}  " + _speeds(speed, None))  # fmt: skip
    print(f"{'(consts)':7} {dense / 1e6:10.1f} {1.0:6.3f} {'-':>10} {'-':>6} {'-':>9} {'-':>7} "
          f"{'-':>7}  " + _speeds(speed, "fp16"))  # fmt: skip
    for scheme in SCHEMES:
        start = time.perf_counter()
        with llm.load(directory, backend="reference", max_seq=TEXT + 1, compress=scheme,
                      calibration=text) as m:  # fmt: skip
            logits = m.logits(ids)
            seconds = time.perf_counter() - start
            ppl = perplexity(m.logits(text), text)
            stored = sum(r.weight_bytes_after for r in m.compression.values())
        err = np.linalg.norm(logits - ref_logits) / np.linalg.norm(ref_logits)
        top = float((logits.argmax(1) == ref_logits.argmax(1)).mean())
        print(f"{scheme:7} {stored / 1e6:10.1f} {stored / dense:6.3f} {err:10.2e} {top:6.3f} "
              f"{ppl:9.1f} {ppl / ref_ppl - 1:+7.2%} {seconds:7.1f}  " + _speeds(speed, scheme))  # fmt: skip
    print("  tok/s: predicted decode after a 128-token prompt; (x fp16) against the dynamic-weight")
    print(
        "  kernels the uncompressed model runs; (consts): the segments with fp16 weights compiled in"
    )
    print(
        "  load s: compressing (k-means), compiling and the 64-token prompt on the reference backend"
    )


def _speeds(speed: dict, scheme: str | None) -> str:
    return "  ".join(
        f"{speed[chip, scheme]:7.1f} ({speed[chip, scheme] / speed[chip, None]:4.2f}x)"
        for chip in CHIPS
    )


def program_table(name: str, program, samples: list[dict]) -> None:
    """Each scheme (the same program on every chip) and auto (chosen per chip), measured."""
    import anekit
    from anekit.compression import compress_with_report

    fp16 = {chip: anekit.estimate(program, chip=chip).seconds for chip in CHIPS}
    print(f"{name}: {len(program.main.ops)} ops, fp16 predicted "
          + ", ".join(f"{c} {fp16[c] * 1e3:.3f} ms" for c in CHIPS))  # fmt: skip
    print(f"  {'scheme':9} {'ratio':>6} {'output err':>10}  "
          + "  ".join(f"{c + ' ms':>8} {'x fp16':>6}" for c in CHIPS) + "  layers")  # fmt: skip
    rows = [(scheme, "m4") for scheme in SCHEMES] + [("auto", chip) for chip in CHIPS]
    for scheme, chip in rows:
        start = time.perf_counter()
        result = compress_with_report(program, scheme, chip=chip, calibration=samples)
        seconds = time.perf_counter() - start
        r = result.report
        targets = CHIPS if scheme != "auto" else (chip,)
        cells = []
        for c in CHIPS:
            if c not in targets:
                cells.append(f"{'-':>8} {'-':>6}")
                continue
            t = anekit.estimate(result.program, chip=c).seconds
            cells.append(f"{t * 1e3:8.3f} {fp16[c] / t:5.2f}x")
        picks: dict[str, int] = {}
        for layer in r.layers:
            picks[layer.scheme] = picks.get(layer.scheme, 0) + 1
        kinds = ", ".join(f"{k} x{v}" for k, v in sorted(picks.items()))
        label = scheme if scheme != "auto" else f"auto/{chip}"
        print(f"  {label:9} {r.ratio:6.3f} {r.error:10.2e}  {'  '.join(cells)}  {kinds} "
              f"({seconds:.0f} s)")  # fmt: skip


def converted_bert():  # noqa: ANN201 (a Program and its calibration inputs)
    """A random-init BERT converted through torch.export, and the token ids it is measured on."""
    import torch
    from transformers import BertConfig, BertModel

    import anekit

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=1024,
        vocab_size=8192,
        max_position_embeddings=128,
    )
    model = BertModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, 128))
    return anekit.from_torch(model, (ids,)), {"input_ids": ids.numpy().astype(np.int32)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-llm", action="store_true", help="only the program tables")
    args = parser.parse_args()
    from anekit.bench.programs import TransformerShape, chained_convs, transformer

    rng = np.random.default_rng(0)
    ids = [int(t) for t in rng.integers(0, CONFIG["vocab_size"], PROMPT)]
    text = [int(t) for t in rng.integers(0, CONFIG["vocab_size"], TEXT)]
    with pinned(args.threads):
        print(f"threads: {args.threads} (BLAS and torch)")
        if not args.skip_llm:
            with tempfile.TemporaryDirectory() as tmp:
                save_model(Path(tmp))
                llm_table(Path(tmp), ids, text)
        bert, ids = converted_bert()
        program_table("BERT, converted (4 layers, hidden 256, 128 tokens)", bert, [ids])
        stack = transformer(TransformerShape(n_layers=4))
        x = [{"x": rng.standard_normal((1, 1, 256, 64)).astype(np.float16)} for _ in range(2)]
        program_table("decoder stack (4 layers, dim 256, 64 tokens)", stack, x)
        convs = chained_convs(8, channels=256, spatial=(1, 64))
        x = [{"x": rng.standard_normal((1, 256, 1, 64)).astype(np.float16)} for _ in range(2)]
        program_table("1x1 conv chain (8 x 256 ch, 64 positions)", convs, x)


if __name__ == "__main__":
    main()
