"""The limits docs/llm.md quotes for untrusted model files, from the readers' constants."""

from __future__ import annotations

from tools.docnumbers import binary_size, generates


@generates("model-file-limits")
def model_file_limits() -> str:
    """Each reader's size limit and the JSON nesting limit, as the code sets them."""
    from anekit.files import MAX_JSON_DEPTH
    from anekit.llm.config import MAX_CONFIG_BYTES
    from anekit.llm.tokenizer import MAX_TOKENIZER_BYTES
    from anekit.llm.weights import MAX_HEADER_BYTES

    rows = [
        ("`config.json`", binary_size(MAX_CONFIG_BYTES)),
        ("`tokenizer.json`", binary_size(MAX_TOKENIZER_BYTES)),
        ("shard index, safetensors header", binary_size(MAX_HEADER_BYTES)),
        ("JSON nesting (every untrusted JSON)", f"{MAX_JSON_DEPTH} levels"),
    ]
    return "\n".join(["| what | at most |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])
