"""The ``_ANEClient`` path: run a CoreML-compiled ``.mlmodelc`` (ANE_NOTES section 2.2).

``+[_ANEClient sharedConnection]``, ``+[_ANEModel modelAtURL:key:]``, then the client's
``compileModel:options:qos:error:`` (options ``kANEFModelType = kANEFModelMIL``,
``kANEFNetPlistFilenameKey = model.mil``), ``loadModel:options:qos:error:``,
``evaluateWithModel:options:request:qos:error:`` and ``unloadModel:options:qos:error:``.
The model's I/O specs come from its ``model.mil``; its inputs are used as compiled
(no packing, no renaming: the binary is fixed), so layout and binding come from the
model's ``modelAttributes`` where it reports them. Every call runs in an autorelease pool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anekit import passes
from anekit.backends import budget
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
from anekit.backends.ane.stats import perf_mask, set_perf_mask
from anekit.errors import CompileError
from anekit.mil.loading import load
from anekit.mil.program import Program

# Compile options for a MIL model (ANE_NOTES 2.2); keys and values are the framework's names.
COMPILE_OPTIONS = {"kANEFModelType": "kANEFModelMIL", "kANEFNetPlistFilenameKey": "model.mil"}


class ClientModel(Loaded):
    """An ``_ANEModel`` compiled and loaded through the shared ``_ANEClient`` connection."""

    def __init__(
        self, root: Path, framework: Any, *, key: str, qos: int, stats: bool, autorelease: bool
    ) -> None:
        super().__init__(framework, qos, autorelease=autorelease)
        fw = framework
        with self.call("compile", CompileError):
            client = fw.cls("_ANEClient").sharedConnection()
            model = fw.cls("_ANEModel").modelAtURL_key_(fw.file_url(str(root.resolve())), key)
            if client is None or model is None:
                raise CompileError(f"_ANEClient/_ANEModel could not open {root}")
            self.client, self.model = client, model
            if stats:
                set_perf_mask([model], perf_mask())
            budget.BUDGET.charge()
            compile_options = fw.dictionary(dict(COMPILE_OPTIONS))
            compile_step(
                client.compileModel_options_qos_error_(model, compile_options, self.qos, None),
                "compile",
            )
            load_with_retry(
                lambda: client.loadModel_options_qos_error_(model, self.options, self.qos, None)
            )
            if stats:  # load clears the mask (tmc/apple x/ane)
                set_perf_mask([model], perf_mask())

    def attributes(self) -> Any:
        with self.pool():
            return read_attributes([self.model])

    def dispatch(self, request: Any) -> tuple[bool, Any]:
        with self.call("evaluation"):
            return self.client.evaluateWithModel_options_request_qos_error_(
                self.model, self.options, request, self.qos, None
            )

    def unload(self) -> None:
        with self.call("unload"):
            ok, error = self.client.unloadModel_options_qos_error_(
                self.model, self.options, self.qos, None
            )
        if not ok:
            raise evaluation_error(error, "unload")


class ClientKernel(SurfaceKernel):
    """A compiled ``.mlmodelc`` loaded through the shared ``_ANEClient`` connection."""

    route = "private AppleNeuralEngine.framework, a compiled .mlmodelc (_ANEClient)"

    def __init__(
        self,
        path: str | Path,
        framework: Any,
        *,
        program: Program | None = None,
        key: str = "anekit",
        qos: int = 21,
        stats: bool = False,
        layout: str = "auto",
        binding: str = "auto",
        autorelease: bool = True,
    ) -> None:
        check_choices(layout, binding)
        root = Path(path)
        if not (root / "model.mil").is_file():
            raise CompileError(f"{root} is not a compiled ML Program: it has no model.mil")
        program = program if program is not None else load(root)
        loaded = ClientModel(root, framework, key=key, qos=qos, stats=stats,
                             autorelease=autorelease)  # fmt: skip
        self.path = root
        self.qos = loaded.qos
        # compiled already: the program only describes its I/O, so nothing is packed or renamed
        device = prepare(program, pack_inputs=False, canonical_io=False, max_dim=passes.MAX_DIM)
        super().__init__(program, device, loaded, stats=stats, layout=layout, binding=binding)
