"""The in-memory compile path, exactly the sequence of ANE_NOTES section 2.1.

1. ``_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:`` from the MIL
   text as UTF-8 NSData and ``{"@model_path/weights/x.bin": {"offset": 0, "data": NSData}}``
   (an empty dictionary, never nil, when there are no weights);
2. ``_ANEInMemoryModel inMemoryModelWithDescriptor:``;
3. ``hexStringIdentifier``; write ``NSTemporaryDirectory()/<hex>/model.mil`` and ``weights/``;
4. ``compileWithQoS:options:error:`` (counted against the compile budget);
5. ``loadWithQoS:options:error:``, retried once after 100 ms;
6. surfaces, ``_ANEIOSurfaceObject objectWithIOSurface:``, ``_ANERequest`` built once per slot;
7. ``evaluateWithQoS:options:request:error:`` per evaluation;
8. ``unloadWithQoS:error:`` on close, then the directory is removed.
"""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path
from typing import Any

from anekit.backends import budget
from anekit.backends.ane.kernel import (
    SurfaceKernel,
    check_qos,
    compile_step,
    device_program,
    load_with_retry,
    unload_step,
)
from anekit.errors import CompileError
from anekit.files import write_atomic
from anekit.mil.program import WEIGHTS_PREFIX, Program

_HEX_ID = re.compile(r"[0-9A-Za-z_-]+")


class InMemoryKernel(SurfaceKernel):
    """A Program compiled and loaded through ``_ANEInMemoryModel``."""

    def __init__(
        self,
        program: Program,
        framework: Any,
        *,
        qos: int = 21,
        pack_inputs: bool = True,
        stats: bool = False,
    ) -> None:
        device, packing = device_program(program, pack_inputs)
        super().__init__(program, device, packing, framework, stats=stats)
        self.qos = check_qos(qos)
        fw = framework
        text = device.to_text()
        weights = device.weight_files()
        descriptor = fw.cls("_ANEInMemoryModelDescriptor").modelWithMILText_weights_optionsPlist_(
            fw.data(text.encode("utf-8")), _weights_dictionary(fw, weights), None
        )
        if descriptor is None:
            raise CompileError("_ANEInMemoryModelDescriptor rejected the MIL text and weights")
        model = fw.cls("_ANEInMemoryModel").inMemoryModelWithDescriptor_(descriptor)
        if model is None:
            raise CompileError("_ANEInMemoryModel could not be made from the descriptor")
        self._model = model
        self.workdir = WORKDIRS.acquire(_workdir(fw, model), text, weights)
        try:
            budget.BUDGET.charge()
            compile_step(
                model.compileWithQoS_options_error_(self.qos, fw.dictionary({}), None), "compile"
            )
            load_with_retry(
                lambda: model.loadWithQoS_options_error_(self.qos, fw.dictionary({}), None)
            )
        except BaseException:
            WORKDIRS.release(self.workdir)
            raise
        self._open_slots()

    def _dispatch(self, request: Any) -> tuple[bool, Any]:
        return self._model.evaluateWithQoS_options_request_error_(
            self.qos, self._fw.dictionary({}), request, None
        )

    def _unload(self) -> None:
        try:
            unload_step(self._model.unloadWithQoS_error_(self.qos, None))
        finally:
            WORKDIRS.release(self.workdir)


def _weights_dictionary(fw: Any, weights: dict[str, bytes]) -> Any:
    """``{BLOBFILE path: {"offset": 0, "data": NSData}}`` as the descriptor wants it."""
    return fw.dictionary(
        {
            path: fw.dictionary({"offset": fw.number(0), "data": fw.data(blob)})
            for path, blob in weights.items()
        }
    )


def _workdir(fw: Any, model: Any) -> Path:
    hex_id = str(model.hexStringIdentifier())
    if not _HEX_ID.fullmatch(hex_id):
        raise CompileError(f"hexStringIdentifier {hex_id!r} is not a plain directory name")
    return Path(fw.temporary_directory()) / hex_id


class WorkDirs:
    """The compiler's ``<tmp>/<hex>/`` directories, shared by kernels of identical programs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[Path, int] = {}

    def acquire(self, path: Path, text: str, weights: dict[str, bytes]) -> Path:
        """Create ``path`` with ``model.mil`` and ``weights/`` unless another kernel already did."""
        with self._lock:
            if path not in self._users:
                (path / "weights").mkdir(parents=True, exist_ok=True)
                write_atomic(path / "model.mil", text.encode("utf-8"))
                for name, blob in weights.items():
                    target = path / "weights" / name[len(WEIGHTS_PREFIX) :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    write_atomic(target, blob)
                self._users[path] = 0
            self._users[path] += 1
        return path

    def release(self, path: Path) -> None:
        """Forget one user of ``path``; the last one removes the directory."""
        with self._lock:
            self._users[path] -= 1
            if self._users[path] == 0:
                del self._users[path]
                shutil.rmtree(path, ignore_errors=True)


WORKDIRS = WorkDirs()
