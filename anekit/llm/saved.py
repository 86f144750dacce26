"""Save once, load fast: a model directory with its weight compression stored (``convert --llm``).

Compressing a model's weights (k-means for the 4- and 6-bit palettes, calibration for
W8A8) takes seconds to minutes and gives the same result every time, so
:func:`save_compressed` stores it: the model's own files (config, tokenizer, chat template,
safetensors weights) copied, plus ``compression.safetensors`` with every encoded weight
(indices, palettes, scales) and ``anekit_llm.json``, a small description: the scheme, the
chip whose layout the programs were made for (the M1 pads matmul contractions to 32, the
head is split at the chip's dimension limit: another layout encodes other weights), each
encoding's key, the residual scale alpha chosen when it was loaded (``anekit.llm.residual``:
its calibration ran once, at saving, and what it measured is recorded too), and the
SHA-256 of every file. The directory is written under a private
temporary name beside ``out`` and renamed into place at the end, so a reader never sees
half of it.

:func:`read_compressed` checks the description, every file's checksum and the chip's
layout before anything is used, and returns the compression states that
``llm.load`` hands to the model: its programs then find each weight already encoded.
The source weights are kept because each program is built from them before its weights
are replaced by their stored encoding (whose key includes a digest of the values, so an
encoding can never be applied to other weights).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import ModelError, UsageError
from anekit.files import open_regular, read_json

__all__ = ["MANIFEST", "read_compressed", "save_compressed", "stored_alpha"]

FORMAT = "anekit-llm/1"
MANIFEST = "anekit_llm.json"
STATES = "compression.safetensors"
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja")  # fmt: skip
WEIGHTS_INDEX = "model.safetensors.index.json"
MAX_MANIFEST_BYTES = 64 << 20
HASH_BLOCK = 1 << 20


def layout(chip: str) -> dict[str, Any]:
    """What of a chip shapes the programs (and so the encoded weights): its layout."""
    from anekit.hw.chips import get_chip

    profile = get_chip(chip)
    return {"matmul_k_multiple": profile.matmul_k_multiple, "max_dim": profile.max_dim_channel}


def sha256(path: Path) -> str:
    """The SHA-256 of a file, read in blocks (regular files only)."""
    digest = hashlib.sha256()
    with open_regular(path, limit=1 << 44, what="a model file", error=ModelError) as f:
        while block := f.read(HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _weight_files(source: Path) -> list[str]:
    """The safetensors files of a model directory: the index and its shards, or the one file."""
    index = source / WEIGHTS_INDEX
    if not index.is_file():
        return ["model.safetensors"]
    from anekit.llm.chat import read_json_file

    shards = sorted(
        set(read_json_file(index, "a safetensors index").get("weight_map", {}).values())
    )
    for name in shards:
        if not isinstance(name, str) or Path(name).name != name:
            raise ModelError(
                f"a shard name must be a plain file name, found {name!r}", path=str(index)
            )
    return [WEIGHTS_INDEX, *shards]


def _encoding_records(states: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Each program's compression state as JSON records, and their arrays by tensor name."""
    from dataclasses import asdict

    records: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for program, state in states.items():
        encodings = []
        for key, encoded in state.encodings.items():
            name, scheme, granularity, shape, digest, options = key
            operands = {}
            for param, (array, dtype) in encoded.operands.items():
                tensor = f"{len(arrays)}"
                arrays[tensor] = np.array(array, order="C")  # 0-d stays 0-d (an axis)
                operands[param] = {"tensor": tensor, "dtype": dtype.value}
            encodings.append({
                "weight": name, "scheme": scheme, "granularity": granularity,
                "shape": list(shape), "digest": digest.hex(), "options": asdict(options),
                "op_type": encoded.op_type, "encoded_granularity": encoded.granularity,
                "opset": encoded.opset, "detail": encoded.detail, "operands": operands,
            })  # fmt: skip
        records[program] = {"encodings": encodings, "steps": dict(state.steps)}
    return records, arrays


def save_compressed(model: Any, source: str | Path, out: str | Path) -> dict[str, Any]:
    """Write ``model`` (loaded from ``source`` with ``compress=``) to the new directory ``out``.

    Returns the manifest written. Raises UsageError if ``out`` exists or the model was not
    loaded with a compression scheme.
    """
    from safetensors.numpy import save_file

    source, out = Path(source), Path(out)
    if model.compress is None:
        raise UsageError("--llm saving needs --compress (a scheme whose encoding is worth keeping)")
    if out.exists():
        raise UsageError(
            "exists; a saved model is never overwritten: choose a new --out", path=str(out)
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))  # private (0700)
    try:
        names = [n for n in MODEL_FILES if (source / n).is_file()] + _weight_files(source)
        for name in names:
            shutil.copyfile(source / name, work / name)
        records, arrays = _encoding_records(model.runner.packed.states)
        save_file(arrays, str(work / STATES))
        manifest = {
            "format": FORMAT, "scheme": model.compress, "chip": model.chip,
            "layout": layout(model.chip), "programs": records,
            "residual_scale": model.config.residual_scale,
            "residual_calibration": _calibration(model.residual_calibration),
            "checksums": {n: sha256(work / n) for n in [*names, STATES]},
        }  # fmt: skip
        (work / MANIFEST).write_text(json.dumps(manifest, indent=1))
        for path in work.iterdir():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        os.chmod(work, 0o755)
        os.rename(work, out)  # atomic: the whole directory appears at once
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest


def _calibration(measured: Any) -> dict[str, Any] | None:
    """What the residual calibration measured (None when alpha was given)."""
    if measured is None:
        return None
    return {"peak": measured.peak, "rms": measured.rms, "tokens": measured.tokens}


def stored_alpha(directory: str | Path) -> float:
    """The residual scale alpha a saved directory was written with (1.0 for directories
    saved before alpha was stored). Raises ModelError for a value that is not a number."""
    d = Path(directory)
    alpha = _manifest(d).get("residual_scale", 1.0)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise ModelError(f"{MANIFEST}: residual_scale must be a number, found {alpha!r}",
                         path=str(d))  # fmt: skip
    return float(alpha)  # LlmConfig checks it is a power of two in (0, 1]


def is_saved(directory: Path) -> bool:
    """Whether ``directory`` was written by :func:`save_compressed`."""
    return (directory / MANIFEST).is_file()


def read_compressed(directory: str | Path, chip: str) -> tuple[str, dict[str, Any]]:
    """The scheme and compression states of a saved directory, checked for ``chip``.

    Raises ModelError for a wrong format, a file whose checksum differs, or a directory
    written for another chip's layout.
    """
    from safetensors.numpy import load_file

    from anekit.compression.api import CompressState
    from anekit.compression.encode import Encoded
    from anekit.compression.schemes import Options
    from anekit.mil.types import DType

    d = Path(directory)
    manifest = _manifest(d)
    if manifest["layout"] != layout(chip):
        raise ModelError(
            f"written for {manifest['chip']}'s layout ({manifest['layout']}); {chip} lays "
            f"programs out as {layout(chip)}: convert again with --chip {chip}, or load it "
            f"with chip={manifest['chip']!r}",
            path=str(d),
        )
    for name, expected in manifest["checksums"].items():
        if Path(name).name != name or sha256(d / name) != expected:
            raise ModelError(f"{name}: its SHA-256 differs from the one recorded at saving; "
                             "the directory was changed or damaged", path=str(d))  # fmt: skip
    arrays = load_file(str(d / STATES))
    states = {}
    try:
        for program, record in manifest["programs"].items():
            state = CompressState(steps={k: float(v) for k, v in record["steps"].items()})
            for e in record["encodings"]:
                key = (e["weight"], e["scheme"], e["granularity"], tuple(e["shape"]),
                       bytes.fromhex(e["digest"]), Options(**e["options"]))  # fmt: skip
                operands = {
                    p: (arrays[o["tensor"]], DType(o["dtype"])) for p, o in e["operands"].items()
                }
                state.encodings[key] = Encoded(e["op_type"], operands, e["encoded_granularity"],
                                               e["opset"], e["detail"])  # fmt: skip
            states[program] = state
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"{MANIFEST}: a malformed encoding record ({type(e).__name__}: {e})",
                         path=str(d)) from None  # fmt: skip
    return manifest["scheme"], states


def _manifest(d: Path) -> dict[str, Any]:
    manifest = read_json(d / MANIFEST, limit=MAX_MANIFEST_BYTES, what=MANIFEST, error=ModelError)
    fields = ("format", "scheme", "chip", "layout", "programs", "checksums")
    if not isinstance(manifest, dict) or any(f not in manifest for f in fields):
        raise ModelError(f"{MANIFEST}: expected an object with {', '.join(fields)}", path=str(d))
    if manifest["format"] != FORMAT:
        raise ModelError(f"{MANIFEST}: format {manifest['format']!r}; this anekit reads {FORMAT!r}",
                         path=str(d))  # fmt: skip
    return manifest
