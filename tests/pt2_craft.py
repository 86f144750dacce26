"""Hostile ``.pt2`` archives for the tests and the fuzz harness: a real archive with members
rewritten so that ``torch.export.load`` would run a payload (a ``mkdir`` of a marker path)."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import torch


class Payload:
    """Unpickling this makes the directory ``marker``: proof that code from the file ran."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def payload_pickle(marker: Path) -> bytes:
    return pickle.dumps(Payload(str(marker)))


def payload_torch_save(marker: Path) -> bytes:
    """A torch.save file whose unpickling runs the payload (weights_only=True refuses it)."""
    buffer = io.BytesIO()
    torch.save(((torch.zeros(1), Payload(str(marker))), {}), buffer)
    return buffer.getvalue()


def small_archive(path: Path) -> tuple[torch.nn.Module, torch.Tensor]:
    """A two-layer MLP with a constant buffer, saved with torch.export.save."""

    class Small(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            self.register_buffer("offset", torch.ones(4), persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.fc(x)) + self.offset

    torch.manual_seed(0)
    model, x = Small().eval(), torch.randn(2, 4)
    torch.export.save(torch.export.export(model, (x,), strict=False), str(path))
    return model, x


def members_of(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def zip_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def root_of(files: dict[str, bytes]) -> str:
    return next(iter(files)).split("/", 1)[0]


def edit_config(files: dict[str, bytes], member: str, edit) -> None:
    config = json.loads(files[member])
    edit(config["config"])
    files[member] = json.dumps(config).encode()


def hostile(kind: str, source: Path, dest: Path, marker: Path) -> Path:
    """``source`` rewritten so that loading it with torch would run the payload (``kind``)."""
    files = members_of(source.read_bytes())
    root = root_of(files)
    weights = f"{root}/data/weights/model_weights_config.json"
    constants = f"{root}/data/constants/model_constants_config.json"
    if kind == "use_pickle":
        files[f"{root}/data/weights/weight_0"] = payload_torch_save(marker)

        def edit(config):
            first = next(iter(config.values()))
            first["use_pickle"] = True

        edit_config(files, weights, edit)
    elif kind == "opaque_obj":
        files[f"{root}/data/constants/opaque_obj_0"] = payload_pickle(marker)

        def edit(config):
            first = next(iter(config.values()))
            first["path_name"] = "opaque_obj_0"

        edit_config(files, constants, edit)
    elif kind == "sample_inputs":
        files[f"{root}/data/sample_inputs/model.pt"] = payload_torch_save(marker)
    elif kind == "legacy_constants":
        files[f"{root}/data/constants/model.pt"] = payload_torch_save(marker)
    elif kind == "aotinductor":
        files[f"{root}/data/aotinductor/model/model.so"] = b"\x7fELF"
    elif kind == "dynamic_expr":
        model = json.loads(files[f"{root}/models/model.json"])
        model["range_constraints"] = {f"__import__('os').mkdir('{marker}')": {"min_val": 1}}
        files[f"{root}/models/model.json"] = json.dumps(model).encode()
    else:
        raise ValueError(kind)
    dest.write_bytes(zip_of(files))
    return dest


KINDS = ("use_pickle", "opaque_obj", "sample_inputs", "legacy_constants", "aotinductor",
         "dynamic_expr")  # fmt: skip
