"""Read a ``torch.export.save`` archive (``.pt2``) as data: refuse anything that would run code.

``torch.export.load`` trusts its file. It unpickles without restriction along several
paths (weights or constants marked ``use_pickle``, ``custom_obj_*``/``opaque_obj_*``
constants, legacy ``.pt`` members, sample inputs that a ``weights_only`` load cannot
read), loads AOTInductor shared libraries, evaluates shape expressions with
``sympy.sympify`` (an ``eval``) and executes guard code. :func:`check_archive` reads the
zip directory and the JSON configs first and refuses every one of those before torch sees
a byte; :func:`load_exported` then lets torch deserialise the same bytes, in memory, with
``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1`` as a backstop and torch's log silenced.

Pytree types in the archive's input and output specs (transformers' ``ModelOutput``
classes) must be registered before torch deserialises them. They are taken from an
allowlist: ``transformers.modeling_outputs`` and the ``modeling_<family>`` modules of the
installed transformers package. A name outside it is refused; a module is never imported
just because the archive names it.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import os
import re
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from anekit.errors import ConversionError
from anekit.files import read_regular

MAX_ARCHIVE_BYTES = 8 * 2**30  # a .pt2 is read into memory whole, checked, then deserialised
MAX_MEMBERS = 200_000
MAX_JSON_BYTES = 512 * 2**20  # one model.json or payload config
MAX_JSON_DEPTH = 200

# Every member a plain ExportedProgram archive holds, relative to the archive's root folder.
_MEMBERS = re.compile(
    r"archive_format|archive_version|byteorder|\.data/version|\.data/serialization_id"
    r"|models/(?P<model>\w+)\.json"
    r"|data/weights/(?:weight_\d+|\w+_weights_config\.json)"
    r"|data/constants/(?:tensor_\d+|\w+_constants_config\.json)"
    r"|data/sample_inputs/\w+\.pt"
    r"|extra/[\w.\-]+"
)
_PAYLOAD = {"weights": re.compile(r"weight_\d+"), "constants": re.compile(r"tensor_\d+")}
_TRANSFORMERS_TYPE = re.compile(
    r"transformers\.(?:modeling_outputs|models\.(?P<family>\w+)\.modeling_(?P=family))\.\w+"
)


def _refuse(path: str, message: str) -> ConversionError:
    return ConversionError(f"{path}: {message}; a .pt2 is read as data and this one is refused")


@dataclass
class Archive:
    """A checked ``.pt2``: its bytes, its root folder and the pytree types its specs name."""

    data: bytes
    root: str
    models: list[str]
    pytree_types: set[str]


def check_archive(data: bytes, where: str) -> Archive:
    """Refuse an archive that would make ``torch.export.load`` run code or unpickle anything.

    Raises:
        ConversionError: naming the member or config entry at fault.
    """
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise ConversionError(
            f"{where}: not an ExportedProgram saved with torch.export.save (not a zip: {e})"
        ) from None
    if not infos or len(infos) > MAX_MEMBERS:
        raise _refuse(where, f"{len(infos)} members (expected 1 to {MAX_MEMBERS})")
    root = infos[0].filename.split("/", 1)[0]
    names: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        _check_member(info, root, len(data), where)
        names[info.filename[len(root) + 1 :]] = info
    if "archive_format" not in names or "models/model.json" not in names:
        raise ConversionError(
            f"{where}: not an ExportedProgram saved with torch.export.save (no "
            f"{root}/archive_format or {root}/models/model.json; archives from before "
            "torch 2.7 are not read: save again with a current torch)"
        )
    models = [m.group("model") for n in names if (m := _MEMBERS.fullmatch(n)) and m["model"]]
    types: set[str] = set()
    for model in models:
        for kind in ("weights", "constants"):
            _check_payload(zf, names, f"data/{kind}/{model}_{kind}_config.json", kind, where)
        _check_sample_inputs(zf, names, f"data/sample_inputs/{model}.pt", where)
        types |= _check_model(zf, names, f"models/{model}.json", where)
    return Archive(data=data, root=root, models=models, pytree_types=types)


def _check_member(info: zipfile.ZipInfo, root: str, size: int, where: str) -> None:
    name = info.filename
    if not re.fullmatch(r"[\w.\-]+", root) or not name.startswith(root + "/"):
        raise _refuse(where, f"member {name!r} is outside the archive's folder {root!r}")
    if not _MEMBERS.fullmatch(name[len(root) + 1 :]):
        raise _refuse(
            where,
            f"member {name!r} is not part of a plain ExportedProgram (AOTInductor libraries, "
            "pickled objects and legacy .pt members are not read)",
        )
    if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
        raise _refuse(where, f"member {name!r} is compressed or larger than the archive")


def _read(zf: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> bytes:
    try:
        return zf.read(info)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise ConversionError(f"{where}: member {info.filename!r} cannot be read ({e})") from None


def _read_json(zf: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> Any:
    if info.file_size > MAX_JSON_BYTES:
        raise _refuse(where, f"{info.filename}: {info.file_size} bytes of JSON")
    try:
        value = json.loads(_read(zf, info, where))
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        raise _refuse(where, f"{info.filename} is not valid JSON ({type(e).__name__})") from None
    _check_depth(value, info.filename, where)
    return value


def _check_depth(value: Any, member: str, where: str) -> None:
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise _refuse(where, f"{member} nests deeper than {MAX_JSON_DEPTH}")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _check_payload(zf: zipfile.ZipFile, names: dict, member: str, kind: str, where: str) -> None:
    """Every weight or constant is raw tensor bytes, never a pickle or a custom object."""
    info = names.get(member)
    if info is None:
        raise _refuse(where, f"{member} is missing")
    config = _read_json(zf, info, where)
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise _refuse(where, f"{member}: expected an object with a 'config' object")
    for fqn, meta in entries.items():
        at = f"{member} entry {fqn!r}"
        if not isinstance(meta, dict):
            raise _refuse(where, f"{at}: expected an object")
        if meta.get("use_pickle") is not False:
            raise _refuse(where, f"{at} is stored as a pickle (use_pickle)")
        path_name = meta.get("path_name")
        if not isinstance(path_name, str) or not _PAYLOAD[kind].fullmatch(path_name):
            raise _refuse(
                where, f"{at} names {path_name!r}, not raw tensor bytes (custom or opaque object)"
            )
        if f"data/{kind}/{path_name}" not in names:
            raise _refuse(where, f"{at} names {path_name!r}, which the archive does not hold")


def _check_sample_inputs(zf: zipfile.ZipFile, names: dict, member: str, where: str) -> None:
    """The sample inputs must load with ``weights_only=True`` (torch falls back to a pickle)."""
    info = names.get(member)
    if info is None:
        raise _refuse(where, f"{member} is missing")
    data = _read(zf, info, where)
    if not data:
        return
    try:
        inner = zipfile.ZipFile(io.BytesIO(data))
        bad = [i.filename for i in inner.infolist() if i.compress_type != zipfile.ZIP_STORED]
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        bad = ["(not a zip)"]
    if bad:
        raise _refuse(where, f"{member} is not a plain torch.save file ({bad[0]})")
    try:
        with _weights_only():
            torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # any failure: torch itself would retry with a full unpickler
        raise _refuse(
            where, f"{member} does not load with weights_only=True ({type(e).__name__})"
        ) from None


def _check_model(zf: zipfile.ZipFile, names: dict, member: str, where: str) -> set[str]:
    """No dynamic shapes (their expressions are evaluated) or guard code; the pytree types."""
    model = _read_json(zf, names[member], where)
    if not isinstance(model, dict) or not isinstance(model.get("graph_module"), dict):
        raise _refuse(where, f"{member}: expected an object with a 'graph_module'")
    if model.get("range_constraints") or model.get("guards_code"):
        raise _refuse(
            where,
            f"{member} has dynamic shapes or guards (their code is evaluated on loading); "
            "the ANE compiles static shapes only: export with dynamic_shapes=None",
        )
    if _has_key(model, "as_expr"):
        raise _refuse(where, f"{member} holds symbolic shape expressions (evaluated on loading)")
    types: set[str] = set()
    for entry in model["graph_module"].get("module_call_graph") or []:
        signature = entry.get("signature") if isinstance(entry, dict) else None
        for spec in (signature or {}).get("in_spec"), (signature or {}).get("out_spec"):
            if isinstance(spec, str):
                types |= _spec_types(spec, member, where)
    return types


def _has_key(value: Any, key: str) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if key in item:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _spec_types(spec: str, member: str, where: str) -> set[str]:
    """The type names a serialised pytree spec (``[version, {"type": ..., ...}]``) uses."""
    try:
        tree = json.loads(spec)
    except (ValueError, RecursionError):
        raise _refuse(where, f"{member}: a pytree spec is not valid JSON") from None
    _check_depth(tree, member, where)
    found: set[str] = set()
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("type"), str):
                found.add(item["type"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def register_pytree_types(types: set[str], where: str) -> None:
    """Register the archive's pytree types from the allowlist, or say why not."""
    from torch.utils import _pytree

    for name in sorted(types - set(_pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE)):
        match = _TRANSFORMERS_TYPE.fullmatch(name)
        if match is None:
            raise ConversionError(
                f"{where}: the saved program's inputs or outputs use the pytree type {name!r}, "
                "which anekit does not register (it registers transformers' output classes); "
                "export a module returning tensors, tuples, lists or dicts"
            )
        _import_transformers_module(name.rsplit(".", 1)[0], match["family"], where)
        if name not in _pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            raise ConversionError(
                f"{where}: the installed transformers has no output class {name!r}; "
                "save and convert with the same transformers version"
            )


def _import_transformers_module(module: str, family: str | None, where: str) -> None:
    """Import a transformers module of the allowlist (its classes register as pytrees)."""
    try:
        transformers = importlib.import_module("transformers")
    except ImportError:
        raise ConversionError(
            f"{where}: the saved program returns transformers' output classes; reading it "
            "needs transformers: pip install transformers"
        ) from None
    if family is not None:  # only a modeling file shipped inside the installed package
        package = Path(transformers.__file__).parent
        if not (package / "models" / family / f"modeling_{family}.py").is_file():
            raise ConversionError(f"{where}: the installed transformers has no module {module}")
    importlib.import_module(module)


@contextlib.contextmanager
def _weights_only() -> Iterator[None]:
    """``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1`` while torch reads: every ``torch.load`` restricted."""
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_ENV = ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """torch's log and warnings kept from the user unless ``verbose``."""
    if verbose:
        yield
        return
    logger = logging.getLogger("torch")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def load_exported(
    path: str | os.PathLike[str], *, verbose: bool = False
) -> torch.export.ExportedProgram:
    """Read a ``torch.export.save`` file as data; ConversionError says what is wrong with it.

    Args:
        path: the ``.pt2`` file (a regular file of at most MAX_ARCHIVE_BYTES).
        verbose (bool): let torch's log and warnings through. Default: False.
    """
    where = str(path)
    data = read_regular(
        path, limit=MAX_ARCHIVE_BYTES, what="a torch.export.save .pt2 file", error=_file_error
    )
    archive = check_archive(data, where)
    register_pytree_types(archive.pytree_types, where)
    try:
        with _weights_only(), _quiet(verbose):
            return torch.export.load(io.BytesIO(archive.data))
    except Exception as e:  # torch raises many kinds for a bad archive
        raise ConversionError(
            f"{where}: not an ExportedProgram saved with torch.export.save ({type(e).__name__}: {e})"
        ) from None


def _file_error(message: str, *, path: str) -> ConversionError:
    return ConversionError(f"{path}: {message}")
