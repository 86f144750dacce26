"""GPU -> ANE -> GPU with no copies: a Metal kernel writes the ANE's input, the ANE runs,
a second Metal kernel reads the ANE's output, all in the same IOSurface memory.

    python examples/metal_zero_copy.py                 # CPU waits between the stages
    python examples/metal_zero_copy.py --probe r.json  # GPU<->ANE fences, if r.json says so

The fence path (the ANE waits for the GPU's MTLSharedEvent and signals another back)
is used only when ``anekit probe shared-events --json r.json`` found it works on this
Mac; otherwise each stage waits on the CPU for the one before. Needs macOS on Apple
silicon and ``pip install 'anekit[metal]'``. The numbers are checked against NumPy.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import threading

import numpy as np

import anekit
from anekit.probe.common import dispatch
from anekit.probe.events import fenced_request

SHAPE = (1, 64, 1, 64)  # channels x width, fp16
SOURCE = """
#include <metal_stdlib>
using namespace metal;

// x[c, w] = ((c * 64 + w) % 61 - 30) / 4: rows start every `stride` bytes (padded rows)
kernel void fill(device uchar *x [[buffer(0)]], constant uint &stride [[buffer(1)]],
                 uint2 g [[thread_position_in_grid]]) {
    device half *row = (device half *)(x + g.y * stride);
    row[g.x] = half(int((g.y * 64 + g.x) % 61) - 30) / 4.0h;
}

// out[c * width + w] = y[c, w], densely, as float
kernel void gather(device const uchar *y [[buffer(0)]], constant uint &stride [[buffer(1)]],
                   device float *out [[buffer(2)]], uint2 g [[thread_position_in_grid]],
                   uint2 size [[threads_per_grid]]) {
    device const half *row = (device const half *)(y + g.y * stride);
    out[g.y * size.x + g.x] = float(row[g.x]);
}
"""


def program() -> anekit.mil.Program:
    b = anekit.mil.Builder()
    x = b.input("x", SHAPE, "fp16")
    b.output(b.add(x=b.mul(x=x, y=2.0), y=1.0), "y")
    return b.build()


def fence_works(report: str | None) -> bool:
    """Whether a probe report says the ANE waits for the GPU and signals back."""
    if report is None:
        return False
    with open(report, encoding="utf-8") as f:
        results = {r["name"]: r for r in json.load(f)["experiments"]}
    found = results.get("shared-events", {})
    return found.get("status") == "pass" and bool(found["observed"]["fence"]["fence_works"])


def pipeline(device, name):
    """A compute pipeline for kernel ``name`` of :data:`SOURCE`."""
    library, error = device.newLibraryWithSource_options_error_(SOURCE, None, None)
    if library is None:
        raise RuntimeError(f"Metal did not compile the kernels: {error}")
    state, error = device.newComputePipelineStateWithFunction_error_(
        library.newFunctionWithName_(name), None
    )
    if state is None:
        raise RuntimeError(f"no pipeline for {name}: {error}")
    return state


def encode(command_buffer, state, buffers) -> None:
    """One dispatch over C x W threads; ``buffers``: (MTLBuffer, offset) or packed bytes."""
    import Metal

    enc = command_buffer.computeCommandEncoder()
    enc.setComputePipelineState_(state)
    for index, item in enumerate(buffers):
        if isinstance(item, bytes):
            enc.setBytes_length_atIndex_(item, len(item), index)
        else:
            enc.setBuffer_offset_atIndex_(item[0], item[1], index)
    enc.dispatchThreads_threadsPerThreadgroup_(Metal.MTLSizeMake(SHAPE[3], SHAPE[1], 1),
                                               Metal.MTLSizeMake(16, 16, 1))  # fmt: skip
    enc.endEncoding()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", metavar="REPORT", help="an `anekit probe` JSON report")
    args = parser.parse_args(argv)
    fenced = fence_works(args.probe)
    with anekit.compile(program(), backend="ane") as k:
        import Metal  # pyobjc-framework-Metal: the `metal` extra

        x, y = k.input_buffer("x").metal_buffer(), k.output_buffer("y").metal_buffer()
        device = x.buffer.device()
        queue = device.newCommandQueue()
        fill, gather = pipeline(device, "fill"), pipeline(device, "gather")
        n = SHAPE[1] * SHAPE[3]
        result = device.newBufferWithLength_options_(n * 4, Metal.MTLResourceStorageModeShared)
        stride_x = struct.pack("I", x.strides[1])  # bytes from one channel's row to the next
        stride_y = struct.pack("I", y.strides[1])
        write, read = queue.commandBuffer(), queue.commandBuffer()
        encode(write, fill, [(x.buffer, x.offset), stride_x])
        if fenced:
            go, done = device.newSharedEvent(), device.newSharedEvent()
            write.encodeSignalEvent_value_(go, 1)
            read.encodeWaitForEvent_value_(done, 1)
            encode(read, gather, [(y.buffer, y.offset), stride_y, (result, 0)])
            write.commit()
            read.commit()  # both queued: the GPU, then the ANE, then the GPU again
            parts = k.objc_parts()
            request = fenced_request(parts.loaded.fw, parts, wait=(go, 1), signal=(done, 1))
            with parts.device_owned():
                ane = threading.Thread(target=dispatch, args=(parts, request))
                ane.start()
                read.waitUntilCompleted()
                ane.join()
        else:
            write.commit()
            write.waitUntilCompleted()  # CPU wait: the input is written
            k.run()  # the ANE reads it in place and writes the output surface
            encode(read, gather, [(y.buffer, y.offset), stride_y, (result, 0)])
            read.commit()
            read.waitUntilCompleted()
    got = np.frombuffer(result.contents().as_buffer(n * 4), np.float32).reshape(SHAPE)
    c, w = np.meshgrid(np.arange(SHAPE[1]), np.arange(SHAPE[3]), indexing="ij")
    xs = ((c * 64 + w) % 61 - 30) / 4
    want = (2 * xs + 1).reshape(SHAPE)
    ok = np.array_equal(got, want)
    print(f"{'fenced' if fenced else 'CPU waits'}: GPU -> ANE -> GPU through "
          f"{x.length + y.length} bytes of shared IOSurface memory, no copies: "
          f"{'right numbers' if ok else 'WRONG numbers'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
