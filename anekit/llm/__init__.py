"""Language models on the ANE: Hugging Face and llama2.c loaders, chunked prefill and KV-cached decode.

    from anekit import llm
    with llm.load("path/to/hf_model_dir") as m:      # config.json + safetensors
        ids = m.tokenizer.encode("Once upon a time")
        new = m.generate(ids, 32, temperature=0.8, top_p=0.95)
        print(m.tokenizer.decode(ids + new))

Only NumPy is needed to import this package; ``tokenizers`` is imported when a
``tokenizer.json`` is read (the ``llm`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from anekit.errors import ModelError, UsageError
from anekit.llm.config import ARCHITECTURES, LlmConfig, read_config
from anekit.llm.model import GenerationStats, Model
from anekit.llm.sampling import Sampling

__all__ = [
    "ARCHITECTURES",
    "GenerationStats",
    "LlmConfig",
    "Model",
    "Sampling",
    "load",
    "read_model_config",
]


def read_model_config(path: str | Path) -> LlmConfig:
    """The config of anything :func:`load` takes, without staging its weights."""
    p = Path(path)
    if p.is_file() and p.suffix == ".bin":
        from anekit.llm.llama2c import Llama2cCheckpoint

        return Llama2cCheckpoint(p).config
    if p.is_file() and p.suffix == ".gguf":
        from anekit.llm.gguf import GgufCheckpoint

        checkpoint = GgufCheckpoint(p)
        checkpoint.close()
        return checkpoint.config
    if p.is_dir() and ((p / "state.json").is_file() or (p / "LATEST").is_file()):
        from anekit.llm.training import read_training_checkpoint

        return read_training_checkpoint(p)[0]
    return read_config(p)


def load(
    path: str | Path,
    *,
    backend: str | None = None,
    chip: str | None = None,
    max_seq: int | None = None,
    chunk: int | None = None,
    tokenizer: str | Path | None = None,
    hold: str | None = None,
    compress: str | None = None,
    calibration: Sequence[int] | None = None,
    numerics: str | None = None,
    residual_scale: float | str = "auto",
    residual: str = "auto",
    strict: bool = False,
) -> Model:
    """Load a model: a Hugging Face directory, a GGUF file, or a llama2.c ``.bin`` checkpoint.

    Args:
        path: a directory with ``config.json`` and ``model.safetensors`` (or a sharded
            ``model.safetensors.index.json``), a llama.cpp ``.gguf`` file (its tokenizer
            from its metadata; ``Model.load_report`` says what each tensor became), a
            llama2.c ``.bin`` file, or an ``anekit train`` checkpoint (or output) directory.
        backend: "ane", "reference", or None for the best available.
        chip: chip profile for the head's dimension limit and predictions (default: this Mac's,
            else m4).
        max_seq: cache positions (prompt plus generated tokens); default the model's
            context, at most 1024.
        chunk: prompt tokens per prefill call (default 64).
        tokenizer: a llama2.c ``tokenizer.bin`` (default: ``tokenizer.bin`` beside the
            checkpoint); for a directory its ``tokenizer.json`` is used.
        hold: "fp16" or "fp32" host form of weights and cache (see :class:`Model`).
        compress: store the weights compressed, "int8", "w8a8", "lut6" or "lut4" (or
            "fp16": compiled in, uncompressed): the layers run as segment programs with
            their weights compiled in (``anekit.llm.compressed``). Default: None, the
            dynamic-weight kernels.
        calibration: token ids whose activations calibrate W8A8's int8 steps and the
            residual scale (default: seeded random tokens).
        numerics: the reference backend's numerics profile ("ideal", a chip, a profile
            file; default: the default chip's, ``anekit.hw.numerics``).
        residual_scale: alpha, the power of two the residual stream is held at
            (``anekit.llm.residual``); "auto" (default) measures the stream on
            ``calibration`` tokens first and picks the largest alpha that keeps it inside
            fp16 and the matmul range (1.0 for most models). ``m.config.residual_scale``
            says what was chosen, ``m.residual_calibration`` what was measured. A directory
            written by ``anekit convert --llm`` uses the alpha stored in it (chosen when
            it was saved; a number given here overrides it).
        residual: where the residual stream lives between programs
            (``anekit.llm.host_residual``): "auto" (default) keeps it in the
            programs' fp16 until a step's stream overflows there, then carries it in float32
            on the host (``m.residual_mode``, ``m.runner.host_reason``); "fp16" never,
            "host" always.
        strict: values the golden model saturated or replaced (its cliff events) raise
            GarbageValues naming the step, layer and op; default False: they warn once
            (``anekit.llm.guard``). Non-finite or saturated streams and garbage logits
            always raise.
    """
    from anekit.llm.host_residual import check_residual
    from anekit.llm.model import DEFAULT_CHUNK

    check_residual(residual)  # before the calibration and the weights are read
    p = Path(path)
    options = {
        "backend": backend,
        "chip": chip,
        "max_seq": max_seq,
        "chunk": DEFAULT_CHUNK if chunk is None else chunk,
        "hold": hold,
        "compress": compress,
        "calibration": calibration,
        "numerics": numerics,
        "residual": residual,
        "strict": strict,
    }
    if p.is_file() and p.suffix == ".bin":
        from anekit.llm import llama2c

        return _scaled_model(lambda: llama2c.read(p, tokenizer), residual_scale, options)
    if p.is_file() and p.suffix == ".gguf":
        return _load_gguf(p, residual_scale, options)
    if p.is_dir() and ((p / "state.json").is_file() or (p / "LATEST").is_file()):
        from anekit.llm.training import read_training_checkpoint

        return _scaled_model(lambda: read_training_checkpoint(p), residual_scale, options)
    if not p.is_dir():
        raise ModelError(
            "expected a Hugging Face model directory, a .gguf file or a llama2.c .bin file",
            path=str(p),
        )
    from anekit.llm.saved import is_saved
    from anekit.llm.tokenizer import load_tokenizer
    from anekit.llm.weights import WeightStore

    config = read_config(p)
    if is_saved(p):  # written by `anekit convert --llm`: its compression and alpha are stored
        from anekit.llm.saved import stored_alpha

        alpha = stored_alpha(p) if residual_scale == "auto" else _alpha(residual_scale)
        return _load_saved(p, replace(config, residual_scale=alpha), options)
    opened = lambda: (read_config(p), WeightStore(p), load_tokenizer(p))  # noqa: E731
    return _scaled_model(opened, residual_scale, options)


def _alpha(residual_scale: Any) -> float:
    if isinstance(residual_scale, bool) or not isinstance(residual_scale, (int, float)):
        raise UsageError(f"residual_scale: expected 'auto' or a number, found {residual_scale!r}")
    return float(residual_scale)


def _scaled_config(
    open_model: Callable[[], tuple[LlmConfig, Any, Any]], residual_scale: Any, options: dict
) -> tuple[tuple[LlmConfig, Any, Any], Any]:
    """The opened model with its residual scale: given, or calibrated ("auto", ``llm.residual``).

    A calibration reads the tensors once itself, so the model is opened afresh after it
    (a source may release what it has read). Returns ``(config, source, tokenizer)`` and
    what the calibration measured (None when alpha was given).
    """
    from anekit.llm.residual import calibrate

    measured = None
    if residual_scale == "auto":
        config, source, _ = open_model()
        try:
            measured = calibrate(config, source, options["calibration"], chip=options["chip"])
        finally:
            getattr(source, "close", lambda: None)()
        residual_scale = measured.alpha
    alpha = _alpha(residual_scale)
    config, source, tokenizer = open_model()
    return (replace(config, residual_scale=alpha), source, tokenizer), measured


def _scaled_model(
    open_model: Callable[[], tuple[LlmConfig, Any, Any]], residual_scale: Any, options: dict
) -> Model:
    (config, source, tokenizer), measured = _scaled_config(open_model, residual_scale, options)
    model = Model(config, source, tokenizer=tokenizer, **options)
    model.residual_calibration = measured
    return model


def _load_saved(path: Path, config: LlmConfig, options: dict) -> Model:
    """A directory ``anekit convert --llm`` wrote: its weights encoded once, for its chip."""
    from anekit.hw.chips import default_chip, get_chip
    from anekit.llm.saved import read_compressed
    from anekit.llm.tokenizer import load_tokenizer
    from anekit.llm.weights import WeightStore

    chip = get_chip(options["chip"] or default_chip()[0]).name
    scheme, states = read_compressed(path, chip)
    if options["compress"] not in (None, scheme):
        raise UsageError(
            f"saved compressed with {scheme}; load it without compress= (or with "
            f"{scheme!r}), or convert the original with --compress {options['compress']}",
            path=str(path),
        )
    options = {**options, "compress": scheme, "chip": chip}
    tok = load_tokenizer(path)
    return Model(config, WeightStore(path), tokenizer=tok, compression_states=states, **options)


def _load_gguf(path: Path, residual_scale: Any, options: dict) -> Model:
    """A GGUF file's model; its load report adds what ``compress=`` did to the weights."""
    from anekit.llm import gguf

    (config, source, tok), measured = _scaled_config(
        lambda: gguf.read(path), residual_scale, options
    )
    try:
        model = Model(config, source, tokenizer=tok, **options)
    finally:
        source.close()
    model.residual_calibration = measured
    model.load_report = source.report_lines()
    if options["compress"] not in (None, "fp16"):
        model.load_report.append(
            f"then the block and head matrices compressed per output channel with "
            f"{options['compress']} (Model.compression has each program's report)"
        )
    return model
