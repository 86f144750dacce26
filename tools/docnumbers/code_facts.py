"""Facts of the code the docs quote inline (a delay, a timeout, a size limit, a shape), from
the constants that set them: `after <!-- docs-check: ane-load-retry -->100 ms<!-- /docs-check -->`.

Each generator imports its constant, so changing the constant without the doc fails
``make docs-check``. To add one: a row of ``FACTS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from tools.docnumbers import binary_size, generates


def _seconds(value: float) -> str:
    """``0.1`` -> "100 ms", ``0.3`` -> "0.3 s", ``5.0`` -> "5 s": ms below 0.3 s, else s."""
    return f"{value * 1000:g} ms" if value < 0.3 else f"{value:g} s"


def _square(side: int) -> str:
    """``64`` -> "64 x 64"."""
    return f"{side} x {side}"


# (block name, "module:CONSTANT", how its value reads in the docs); what each quotes
FACTS: list[tuple[str, str, Callable[..., str]]] = [
    # the pause before the one retry of a failed ``loadWithQoS:`` (docs/ane.md)
    ("ane-load-retry", "anekit.backends.ane.kernel:LOAD_RETRY_DELAY_S", _seconds),
    # the largest MIL text file (or standard input) ``mil.load_path`` reads (docs/mil.md)
    ("mil-max-bytes", "anekit.mil.loading:MAX_MIL_BYTES", binary_size),
    # the largest request body ``anekit serve`` takes before answering 413 (docs/serve.md)
    ("serve-max-body", "anekit.llm.serve.app:MAX_BODY_BYTES", binary_size),
    # how long the chaining probe waits for the second program's output (docs/probe.md)
    ("probe-chain-wait", "anekit.probe.dispatch:CHAIN_POLL_S", _seconds),
    # how long the fence probe lets the ANE (wrongly) run before the GPU signals
    ("probe-fence-early", "anekit.probe.events:WAIT_BEFORE_SIGNAL_S", _seconds),
    # how long the fence probe waits for the ANE's signal back (option ``signal_timeout_s``)
    ("probe-fence-timeout", "anekit.probe.events:SIGNAL_TIMEOUT_S", _seconds),
    # the matmul the ``two_processes`` doctor rung evaluates (docs/training.md)
    ("two-processes-matmul", "anekit.doctor.dist_rungs:SIDE", _square),
    # the largest ONNX file ``from_onnx`` reads (protobuf's limit, docs/onnx.md)
    ("onnx-model-limit", "anekit.frontends.onnx.model:MODEL_LIMIT", binary_size),
    # the declared size of a whole ONNX model past which it is refused (docs/onnx.md)
    ("onnx-total-limit", "anekit.frontends.onnx.model:TOTAL_LIMIT", binary_size),
    # ``anekit train --dist-timeout``'s default (docs/training.md)
    ("dist-timeout", "anekit.cli.train:DEFAULT_TIMEOUT", _seconds),
    # the least time joining a distributed group waits for the other ranks
    ("dist-join", "anekit.train.distributed.engines:JOIN_SECONDS", _seconds),
]


def _fact(where: str, fmt: Callable[..., str]) -> Callable[[], str]:
    """A generator that imports ``module:CONSTANT`` when called and formats its value."""
    module, constant = where.split(":")

    def generate() -> str:
        return fmt(getattr(importlib.import_module(module), constant))

    generate.__doc__ = f"``{constant}`` of ``{module}``."
    return generate


for _name, _where, _fmt in FACTS:
    generates(_name)(_fact(_where, _fmt))
