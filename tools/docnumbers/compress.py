"""The predicted decode speed of each compression scheme in docs/compression.md: the cost
model (``anekit.llm.cost.estimate_llm``) on the ~100M-parameter Llama of benchmarks/llm.py,
as ``benchmarks/compress.py`` prints it (decode after a 128-token prompt)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from tools.docnumbers import generates

ROOT = Path(__file__).resolve().parents[2]
CHIPS = ("m1", "m4", "m5")
ROWS = (("fp16 (dynamic weights)", None), ("fp16 segments (constants)", "fp16"),
        ("int8", "int8"), ("w8a8", "w8a8"), ("lut6", "lut6"), ("lut4", "lut4"))  # fmt: skip


def _config() -> Any:
    """benchmarks/llm.py's CONFIG as the LlmConfig its saved config.json reads back as."""
    from anekit.llm.config import config_from_hf

    name = "_docnumbers_benchmarks_llm"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "llm.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    raw = dict(sys.modules[name].CONFIG, architectures=["LlamaForCausalLM"], model_type="llama")
    return config_from_hf(raw)


@generates("compress-llm-decode")
def compress_llm_decode() -> str:
    """Predicted decode tok/s per scheme and chip, (x) against the dynamic-weight fp16 model."""
    from anekit.llm.cost import estimate_llm

    config = _config()
    speed = {(chip, c): estimate_llm(config, chip, prompt_tokens=128, compress=c)
             for chip in CHIPS for _, c in ROWS}  # fmt: skip
    lines = ["| scheme | weight MB | " + " | ".join(f"{c.upper()} tok/s" for c in CHIPS) + " |",
             "|---|---|" + "---|" * len(CHIPS)]  # fmt: skip
    for label, c in ROWS:
        cells = []
        for chip in CHIPS:
            v, base = speed[chip, c].decode_tokens_per_s, speed[chip, None].decode_tokens_per_s
            cells.append(f"{v:.1f}" + ("" if c is None else f" ({v / base:.2f}x)"))
        lines.append(f"| {label} | {speed['m4', c].weight_bytes / 1e6:.1f} | {' | '.join(cells)} |")

    def gain(scheme: str, chip: str) -> str:
        s = speed[chip, scheme].decode_tokens_per_s / speed[chip, "fp16"].decode_tokens_per_s
        return f"{s:.2f}x"

    lines += ["", "Against the fp16 segments, the cost model gives int8 "
              + ", ".join(f"{gain('int8', c)} on {c.upper()}" for c in CHIPS) + " and lut4 "
              + ", ".join(f"{gain('lut4', c)} on {c.upper()}" for c in CHIPS) + "."]  # fmt: skip
    return "\n".join(lines)
