"""The ``_ANEClient`` path: run a CoreML-compiled ``.mlmodelc`` (ANE_NOTES section 2.2).

``+[_ANEClient sharedConnection]``, ``+[_ANEModel modelAtURL:key:]``, then the client's
``compileModel:options:qos:error:`` (options ``kANEFModelType = kANEFModelMIL``,
``kANEFNetPlistFilenameKey = model.mil``), ``loadModel:options:qos:error:``,
``evaluateWithModel:options:request:qos:error:`` and ``unloadModel:options:qos:error:``.
The model's I/O specs come from its ``model.mil``; its inputs are used as compiled
(no packing, no reordering: the binary is fixed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anekit.backends import budget
from anekit.backends.ane.kernel import (
    SurfaceKernel,
    check_qos,
    compile_step,
    load_with_retry,
    unload_step,
)
from anekit.errors import CompileError
from anekit.mil.loading import load
from anekit.mil.program import Program

# Compile options for a MIL model (ANE_NOTES 2.2); keys and values are the framework's names.
COMPILE_OPTIONS = {"kANEFModelType": "kANEFModelMIL", "kANEFNetPlistFilenameKey": "model.mil"}


class ClientKernel(SurfaceKernel):
    """A compiled ``.mlmodelc`` loaded through the shared ``_ANEClient`` connection."""

    def __init__(
        self,
        path: str | Path,
        framework: Any,
        *,
        program: Program | None = None,
        key: str = "anekit",
        qos: int = 21,
        stats: bool = False,
    ) -> None:
        root = Path(path)
        if not (root / "model.mil").is_file():
            raise CompileError(f"{root} is not a compiled ML Program: it has no model.mil")
        program = program if program is not None else load(root)
        super().__init__(program, program, None, framework, stats=stats)
        self.path = root
        self.qos = check_qos(qos)
        fw = framework
        client = fw.cls("_ANEClient").sharedConnection()
        model = fw.cls("_ANEModel").modelAtURL_key_(fw.file_url(str(root.resolve())), key)
        if client is None or model is None:
            raise CompileError(f"_ANEClient/_ANEModel could not open {root}")
        self._client, self._model = client, model
        budget.BUDGET.charge()
        options = fw.dictionary(dict(COMPILE_OPTIONS))
        compile_step(
            client.compileModel_options_qos_error_(model, options, self.qos, None), "compile"
        )
        load_with_retry(
            lambda: client.loadModel_options_qos_error_(model, fw.dictionary({}), self.qos, None)
        )
        self._open_slots()

    def _dispatch(self, request: Any) -> tuple[bool, Any]:
        return self._client.evaluateWithModel_options_request_qos_error_(
            self._model, self._fw.dictionary({}), request, self.qos, None
        )

    def _unload(self) -> None:
        unload_step(
            self._client.unloadModel_options_qos_error_(
                self._model, self._fw.dictionary({}), self.qos, None
            )
        )
