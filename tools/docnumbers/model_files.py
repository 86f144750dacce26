"""The limits docs/llm.md quotes for untrusted model files, from the readers' constants."""

from __future__ import annotations

from tools.docnumbers import generates


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


@generates("model-file-limits")
def model_file_limits() -> str:
    """Each reader's size limit and the JSON nesting limit, as the code sets them."""
    from anekit.files import MAX_JSON_DEPTH
    from anekit.llm.config import MAX_CONFIG_BYTES
    from anekit.llm.tokenizer import MAX_TOKENIZER_BYTES
    from anekit.llm.weights import MAX_HEADER_BYTES

    rows = [
        ("`config.json`", _size(MAX_CONFIG_BYTES)),
        ("`tokenizer.json`", _size(MAX_TOKENIZER_BYTES)),
        ("shard index, safetensors header", _size(MAX_HEADER_BYTES)),
        ("JSON nesting (every untrusted JSON)", f"{MAX_JSON_DEPTH} levels"),
    ]
    return "\n".join(["| what | at most |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])
