"""Facts of the code the docs quote inline (a delay, a timeout, a size limit, a shape), from
the constants that set them: `after <!-- docs-check: ane-load-retry -->100 ms<!-- /docs-check -->`.

Each generator imports its constant, so changing the constant without the doc fails
``make docs-check``.
"""

from __future__ import annotations

from tools.docnumbers import binary_size, generates


def _seconds(value: float) -> str:
    """``0.1`` -> "100 ms", ``0.3`` -> "0.3 s", ``5.0`` -> "5 s": ms below 0.3 s, else s."""
    return f"{value * 1000:g} ms" if value < 0.3 else f"{value:g} s"


@generates("ane-load-retry")
def ane_load_retry() -> str:
    """The pause before the one retry of a failed ``loadWithQoS:`` (docs/ane.md)."""
    from anekit.backends.ane.kernel import LOAD_RETRY_DELAY_S

    return _seconds(LOAD_RETRY_DELAY_S)


@generates("mil-max-bytes")
def mil_max_bytes() -> str:
    """The largest MIL text file (or standard input) ``mil.load_path`` reads (docs/mil.md)."""
    from anekit.mil.loading import MAX_MIL_BYTES

    return binary_size(MAX_MIL_BYTES)


@generates("serve-max-body")
def serve_max_body() -> str:
    """The largest request body ``anekit serve`` takes before answering 413 (docs/serve.md)."""
    from anekit.llm.serve.app import MAX_BODY_BYTES

    return binary_size(MAX_BODY_BYTES)


@generates("probe-chain-wait")
def probe_chain_wait() -> str:
    """How long the chaining probe waits for the second program's output (docs/probe.md)."""
    from anekit.probe.dispatch import CHAIN_POLL_S

    return _seconds(CHAIN_POLL_S)


@generates("probe-fence-early")
def probe_fence_early() -> str:
    """How long the fence probe lets the ANE (wrongly) run before the GPU signals."""
    from anekit.probe.events import WAIT_BEFORE_SIGNAL_S

    return _seconds(WAIT_BEFORE_SIGNAL_S)


@generates("probe-fence-timeout")
def probe_fence_timeout() -> str:
    """How long the fence probe waits for the ANE's signal back (option ``signal_timeout_s``)."""
    from anekit.probe.events import SIGNAL_TIMEOUT_S

    return _seconds(SIGNAL_TIMEOUT_S)


@generates("two-processes-matmul")
def two_processes_matmul() -> str:
    """The matmul the ``two_processes`` doctor rung evaluates (docs/training.md)."""
    from anekit.doctor.dist_rungs import SIDE

    return f"{SIDE} x {SIDE}"


@generates("onnx-model-limit")
def onnx_model_limit() -> str:
    """The largest ONNX file ``from_onnx`` reads (protobuf's limit, docs/onnx.md)."""
    from anekit.frontends.onnx.model import MODEL_LIMIT

    return binary_size(MODEL_LIMIT)


@generates("onnx-total-limit")
def onnx_total_limit() -> str:
    """The declared size of a whole ONNX model past which it is refused (docs/onnx.md)."""
    from anekit.frontends.onnx.model import TOTAL_LIMIT

    return binary_size(TOTAL_LIMIT)


@generates("dist-timeout")
def dist_timeout() -> str:
    """``anekit train --dist-timeout``'s default (docs/training.md)."""
    from anekit.cli.train import DEFAULT_TIMEOUT

    return _seconds(DEFAULT_TIMEOUT)


@generates("dist-join")
def dist_join() -> str:
    """The least time joining a distributed group waits for the other ranks."""
    from anekit.train.distributed.engines import JOIN_SECONDS

    return _seconds(JOIN_SECONDS)
