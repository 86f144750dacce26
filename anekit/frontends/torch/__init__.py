"""The PyTorch front end: ``torch.export`` -> ATen lowering table -> MIL -> ANE passes.

    import anekit
    prog = anekit.from_torch(model, (x,))            # verified against PyTorch by default
    report = anekit.frontends.torch.compare(model, (x,), prog)
    print(report)                                    # relative error, max abs error, cosine

Importing this package imports torch; ``import anekit`` does not.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as e:  # the optional dependency is missing: say how to get it
    raise ImportError("anekit's PyTorch front end needs torch: pip install 'anekit[torch]'") from e

from anekit.frontends.fidelity import Fidelity, OutputFidelity
from anekit.frontends.torch.capture import capture, decompose
from anekit.frontends.torch.compare import compare
from anekit.frontends.torch.frontend import (
    Conversion,
    check_fidelity,
    convert_file,
    from_torch,
    load_exported,
)
from anekit.frontends.torch.lower import convert_exported, unsupported_nodes
from anekit.frontends.torch.lowerings import LOWERINGS

convert = from_torch

__all__ = [
    "LOWERINGS",
    "Conversion",
    "Fidelity",
    "OutputFidelity",
    "capture",
    "check_fidelity",
    "compare",
    "convert",
    "convert_exported",
    "convert_file",
    "decompose",
    "from_torch",
    "load_exported",
    "unsupported_nodes",
]
