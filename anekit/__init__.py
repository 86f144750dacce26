"""anekit: program Apple's Neural Engine directly, and everywhere else through its models.

The public entry points are re-exported here lazily, so ``import anekit`` stays
cheap and never imports PyObjC.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it; resolved on first attribute access.
_LAZY: dict[str, str] = {
    "mil": "anekit.mil",
    "errors": "anekit.errors",
    "compile": "anekit.backends",
    "Kernel": "anekit.backends",
    "available_backends": "anekit.backends",
    "compile_mlmodelc": "anekit.backends.ane",
    "diff": "anekit.backends.reference.compare",
    "export_mlpackage": "anekit.passes.coreml",
    "check": "anekit.hw",
    "estimate": "anekit.hw",
    "chips": "anekit.hw",
    "llm": "anekit.llm",
    "from_torch": "anekit.frontends.torch",
    "from_onnx": "anekit.frontends.onnx",
    "trace": "anekit.probe.tracing",
    "compress": "anekit.compression",
    "compress_with_report": "anekit.compression",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'anekit' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if module_name.endswith("." + name) else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
