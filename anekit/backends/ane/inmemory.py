"""The in-memory compile path, the sequence of ANE_NOTES section 2.1 with the fixes of 2.5.

0. the compatibility checker for the chip (unless ``check=False``), the dialect for
   the chip and macOS (:mod:`.dialect`), the device program (:mod:`.device`);
1. ``_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:`` from the MIL
   text as UTF-8 NSData and ``{"@model_path/weights/x.bin": {"offset": 0, "data": NSData}}``
   (an empty dictionary, never nil, when there are no weights);
2. ``_ANEInMemoryModel inMemoryModelWithDescriptor:``;
3. ``hexStringIdentifier``; write ``NSTemporaryDirectory()/<hex>/model.mil`` and ``weights/``
   (:mod:`.workdirs`);
4. ``setPerfStatsMask:`` when ``stats=True`` (``stats_mask=0`` skips it); ``compileWithQoS:options:error:`` (counted
   against the compile budget);
5. ``loadWithQoS:options:error:``, retried once after 100 ms; ``setPerfStatsMask:`` again;
6. ``modelAttributes`` (of the ``_ANEModel`` inside, else of the in-memory model) fixes
   each surface's layout and request index (:mod:`.layout`); surfaces,
   ``_ANEIOSurfaceObject objectWithIOSurface:``, ``_ANERequest`` built once per slot;
7. ``evaluateWithQoS:options:request:error:`` per evaluation;
8. ``unloadWithQoS:error:`` on close (or garbage collection), then the directory goes.

Every framework call runs in an autorelease pool, with one immutable options dictionary.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from anekit.backends import budget
from anekit.backends.ane import dialect as dialects
from anekit.backends.ane import host
from anekit.backends.ane.device import prepare
from anekit.backends.ane.kernel import (
    Loaded,
    SurfaceKernel,
    compile_step,
    evaluation_error,
    load_with_retry,
    read_attributes,
)
from anekit.backends.ane.layout import check_choices
from anekit.backends.ane.stats import check_stats_read, perf_mask, set_perf_mask
from anekit.backends.ane.workdirs import WORKDIRS
from anekit.errors import CompileError, MilTypeError
from anekit.hw.chips import Chip
from anekit.mil.program import WEIGHTS_PREFIX, Program

_HEX_ID = re.compile(r"[0-9A-Za-z_-]+")


class InMemoryModel(Loaded):
    """An ``_ANEInMemoryModel`` compiled and loaded from MIL text and weight files."""

    def __init__(
        self,
        text: str,
        weights: dict[str, bytes],
        framework: Any,
        *,
        qos: int,
        mask: int = 0,
        autorelease: bool = True,
        workdir_weights: str = "rewrite",
    ) -> None:
        super().__init__(framework, qos, autorelease=autorelease)
        fw = framework
        with self.call("compile", CompileError):
            self.model = model = in_memory_model(fw, text, weights)
            files = workdir_files(text, weights)
            rewrite = _rewritable(files, workdir_weights)
            self.workdir = WORKDIRS.acquire(workdir_path(fw, model), files, rewrite)
            try:
                self._compile_and_load(mask)
            except BaseException:
                WORKDIRS.release(self.workdir)
                raise

    def _compile_and_load(self, mask: int) -> None:
        """Compile and load; ``mask``: the performance-counter mask to set (0: leave it alone)."""
        model, options = self.model, self.options
        if mask:
            set_perf_mask([model], mask)
        budget.BUDGET.charge()
        compile_step(model.compileWithQoS_options_error_(self.qos, options, None), "compile")
        load_with_retry(lambda: model.loadWithQoS_options_error_(self.qos, options, None))
        if mask:  # load clears the mask (tmc/apple x/ane)
            set_perf_mask([model, *self.inner_models()], mask)

    def inner_models(self) -> list[Any]:
        """The ``_ANEModel`` inside the in-memory model, if it exposes one."""
        getter = getattr(self.model, "model", None)
        inner = getter() if getter is not None else None
        return [] if inner is None else [inner]

    def attributes(self) -> Any:
        with self.pool():
            return read_attributes([*self.inner_models(), self.model])

    def dispatch(self, request: Any) -> tuple[bool, Any]:
        with self.call("evaluation"):
            return self.model.evaluateWithQoS_options_request_error_(
                self.qos, self.options, request, None
            )

    def unload(self) -> None:
        try:
            with self.call("unload"):
                ok, error = self.model.unloadWithQoS_error_(self.qos, None)
            if not ok:
                raise evaluation_error(error, "unload")
        finally:
            WORKDIRS.release(self.workdir)


class InMemoryKernel(SurfaceKernel):
    """A Program compiled and loaded through ``_ANEInMemoryModel`` (see the module docstring)."""

    route = "private AppleNeuralEngine.framework, in memory (_ANEInMemoryModel)"

    def __init__(
        self,
        program: Program,
        framework: Any,
        *,
        qos: int = 21,
        pack_inputs: bool = True,
        stats: bool = False,
        stats_mask: int | None = None,
        stats_read: str = "request",
        workdir_weights: str = "rewrite",
        dialect: str | None = None,
        chip: str | Chip | None = None,
        check: bool = True,
        layout: str = "auto",
        binding: str = "auto",
        canonical_io: bool = True,
        op_names: str = "match",
        autorelease: bool = True,
    ) -> None:
        program.require_weights("compile")  # before the checker, the passes and the compiler
        check_choices(layout, binding)
        profile = dialects.resolve_chip(chip)
        if check:
            dialects.refuse_incompatible(program, profile)
        self.dialect = dialects.choose(dialect, profile, host.macos_version())
        self.chip = profile.name
        limit = min(profile.max_dim_spatial, profile.max_dim_channel)  # packing stays within it
        device = prepare(program, pack_inputs=pack_inputs, canonical_io=canonical_io,
                         max_dim=limit, op_names=op_names)  # fmt: skip
        try:
            text = device.program.to_text(self.dialect)
        except MilTypeError as e:
            raise CompileError(
                f"cannot print the program in the {self.dialect} dialect: {e}"
            ) from e
        mask = _mask(stats, stats_mask)
        check_stats_read(stats_read)
        loaded = InMemoryModel(text, device.program.weight_files(), framework, qos=qos,
                               mask=mask, autorelease=autorelease,
                               workdir_weights=workdir_weights)  # fmt: skip
        self.qos = loaded.qos
        self.workdir: Path = loaded.workdir
        super().__init__(program, device, loaded, stats=stats, stats_read=stats_read,
                         layout=layout, binding=binding)  # fmt: skip


def _mask(stats: bool, stats_mask: int | None) -> int:
    """The counter mask to set: none without stats, else ``stats_mask`` (default: every bit)."""
    if stats_mask is not None and (
        isinstance(stats_mask, bool) or not isinstance(stats_mask, int) or stats_mask < 0
    ):
        raise ValueError(f"stats_mask must be a non-negative int, found {stats_mask!r}")
    if not stats:
        return 0
    return perf_mask() if stats_mask is None else stats_mask


WORKDIR_WEIGHTS = ("rewrite", "verify")


def _rewritable(files: dict[str, bytes], workdir_weights: str) -> frozenset[str]:
    """The work-directory files written again when the directory is in use (see workdirs)."""
    if workdir_weights not in WORKDIR_WEIGHTS:
        raise ValueError(
            f"workdir_weights must be one of {WORKDIR_WEIGHTS}, found {workdir_weights!r}"
        )
    if workdir_weights == "verify":
        return frozenset()
    return frozenset(name for name in files if name.startswith("weights/"))


def in_memory_model(fw: Any, text: str, weights: dict[str, bytes]) -> Any:
    """Steps 1 and 2: the descriptor from the MIL text and weights, then the model."""
    descriptor = fw.cls("_ANEInMemoryModelDescriptor").modelWithMILText_weights_optionsPlist_(
        fw.data(text.encode("utf-8")), weights_dictionary(fw, weights), None
    )
    if descriptor is None:
        raise CompileError("_ANEInMemoryModelDescriptor rejected the MIL text and weights")
    model = fw.cls("_ANEInMemoryModel").inMemoryModelWithDescriptor_(descriptor)
    if model is None:
        raise CompileError("_ANEInMemoryModel could not be made from the descriptor")
    return model


def weights_dictionary(fw: Any, weights: dict[str, bytes]) -> Any:
    """``{BLOBFILE path: {"offset": 0, "data": NSData}}`` as the descriptor wants it."""
    return fw.dictionary(
        {
            path: fw.dictionary({"offset": fw.number(0), "data": fw.data(blob)})
            for path, blob in weights.items()
        }
    )


def workdir_files(text: str, weights: dict[str, bytes]) -> dict[str, bytes]:
    """What the work directory holds: ``model.mil`` and ``weights/<file>``."""
    files = {"model.mil": text.encode("utf-8")}
    for path, blob in weights.items():
        files["weights/" + path[len(WEIGHTS_PREFIX) :]] = blob
    return files


def workdir_path(fw: Any, model: Any) -> Path:
    hex_id = str(model.hexStringIdentifier())
    if not _HEX_ID.fullmatch(hex_id):
        raise CompileError(f"hexStringIdentifier {hex_id!r} is not a plain directory name")
    return Path(fw.temporary_directory()) / hex_id
