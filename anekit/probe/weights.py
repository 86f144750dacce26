"""``weight_reload``: are weights frozen at compile time (ANE_NOTES 2.4)?

maderix (M5) and libane report that overwriting the weight files and reloading changes
nothing; Orion reports that unload, patch the BLOBFILE, reload works. This experiment
does exactly that to a compiled in-memory model (unload; replace the weight bytes in
its work directory's ``weights/`` file, at the offset they were found, the file replaced
atomically; reload; evaluate), then also recompiles the
same model object in place, and compares both with a fresh compile of the new weights.
Where ``_ANEClient`` has the mutable-weights selectors (reported on macOS 27:
``mapMutableWeightsForModel:andProcedure:mappedWeightsBuffer:size:error:``,
``syncMutableWeightsForModel:andProcedure:fromOffset:withSize:error:``,
``unmapMutableWeightsForModel:andProcedure:``) it maps the weights, finds the old weight
bytes in the mapping, writes new ones there, syncs and evaluates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anekit.backends import budget
from anekit.backends.ane.kernel import request_for
from anekit.errors import EvaluationError
from anekit.files import write_atomic
from anekit.ladder import cases
from anekit.ladder.runner import Context
from anekit.mil import Builder, Program
from anekit.probe.common import (
    FAILED,
    call,
    client,
    compile_kernel,
    dispatch,
    framework,
    has,
    inner_model,
    step,
    step_value,
)

SHAPE = (1, 16, 1, 32)
MAP, SYNC, UNMAP = (
    "mapMutableWeightsForModel:andProcedure:mappedWeightsBuffer:size:error:",
    "syncMutableWeightsForModel:andProcedure:fromOffset:withSize:error:",
    "unmapMutableWeightsForModel:andProcedure:",
)
MAX_MAPPED_BYTES = 1 << 30  # a mapping larger than this is refused, not read


def weights(start: int) -> np.ndarray:
    """Distinct weights (multiples of 1/4, exact in fp16); different ``start``, different values."""
    return cases.quarters(SHAPE, np.float16, start) + np.float16(0.25 * (start % 3))


def program(w: np.ndarray) -> Program:
    """``y = x * w`` with ``w`` in ``weights/w.bin``."""
    b = Builder()
    x = b.input("x", SHAPE, "fp16")
    b.output(b.mul(x=x, y=b.weight("w", w)), "y")
    return b.build()


def _verdict(y: np.ndarray, x: np.ndarray, candidates: dict[str, np.ndarray]) -> dict[str, Any]:
    """Which weights the output was computed with, and the largest difference from each."""
    diffs = {
        name: float(np.max(np.abs(y.astype(np.float64) - (x * w).astype(np.float64))))
        for name, w in candidates.items()
    }
    same = [name for name, d in diffs.items() if d <= cases.EXACT]
    return {
        "computed_with": same[0] if len(same) == 1 else ("both" if same else "neither"),
        "max_abs_diff": diffs,
    }


def weight_reload(ctx: Context) -> None:
    """Unload, overwrite the weight file, reload: old weights or new? And the mutable weights."""
    fw = framework(ctx)
    old, new, mapped = weights(0), weights(17), weights(29)
    x = cases.quarters(SHAPE, np.float16, 5)
    seen = {"old": old, "new": new}
    k = compile_kernel(ctx, program(old), pack_inputs=False)
    try:
        parts = k.objc_parts()
        files = sorted(p for p in k.workdir.rglob("*") if p.is_file())
        ctx.observe(
            "workdir_files", {str(p.relative_to(k.workdir)): p.stat().st_size for p in files}
        )
        ctx.observe("before", _run(fw, k, parts, x, seen))
        model, opts, qos = parts.loaded.model, parts.loaded.options, parts.loaded.qos

        def model_step(label: str, selector: str, *args: Any) -> bool:
            """``selector`` sent to the in-memory model as step ``label``: did it succeed?"""
            return (
                step(ctx, label, call, fw, "_ANEInMemoryModel", model, selector, *args)
                is not FAILED
            )

        model_step("unload", "unloadWithQoS:error:", qos)
        ctx.observe("patched", _patch(k.workdir, old, new))
        if model_step("reload", "loadWithQoS:options:error:", qos, opts):
            step(ctx, "after_reload", _run, fw, k, parts, x, seen)
            step(ctx, "after_reload_new_request", _run, fw, k, parts, x, seen, True)
            model_step("unload_again", "unloadWithQoS:error:", qos)
        budget.BUDGET.charge()
        if model_step("recompile_in_place", "compileWithQoS:options:error:", qos, opts):
            if model_step("load_after_recompile", "loadWithQoS:options:error:", qos, opts):
                step(ctx, "after_recompile", _run, fw, k, parts, x, seen, True)
        if has(fw, "_ANEClient", "-", MAP):
            ctx.observe("mutable", _mutable(ctx, fw, k, parts, x, old, mapped))
        else:
            ctx.observe("mutable", "absent: _ANEClient has no " + MAP)
    finally:
        step(ctx, "close", k.close)  # the model may be left unloaded: record, do not mask
    with compile_kernel(ctx, program(new), pack_inputs=False) as fresh:
        ctx.observe("fresh_compile", _run(fw, fresh, fresh.objc_parts(), x, seen))
        ctx.observe("fresh_workdir_differs", fresh.workdir != k.workdir)


def _patch(workdir: Any, old: np.ndarray, new: np.ndarray) -> dict[str, Any]:
    """Replace ``old``'s bytes by ``new``'s in the one weight file that holds them."""
    for path in sorted((workdir / "weights").glob("*")):
        data = path.read_bytes()
        at = data.find(old.tobytes())
        if at >= 0:
            write_atomic(path, data[:at] + new.tobytes() + data[at + new.nbytes :])
            return {"file": str(path.relative_to(workdir)), "offset": at, "bytes": new.nbytes}
    raise EvaluationError(f"no file under {workdir / 'weights'} holds the compiled weights")


def _run(
    fw: Any, k: Any, parts: Any, x: np.ndarray, seen: dict[str, np.ndarray], fresh: bool = False
) -> dict[str, Any]:
    """Evaluate with input ``x`` (``fresh``: through a newly built request); which weights show?"""
    k.input_buffer("x")[...] = x
    k.output_buffer("y")[...] = 0
    request = None
    if fresh:
        request = request_for(
            fw, parts.inputs, parts.outputs, parts.input_indices, parts.output_indices
        )
    with parts.device_owned():
        dispatch(parts, request)
    return _verdict(np.array(k.output_buffer("y")), x, seen)


def _mutable(
    ctx: Context, fw: Any, k: Any, parts: Any, x: np.ndarray, old: np.ndarray, mapped: np.ndarray
) -> dict[str, Any]:
    """Map the procedure's weights, find ``old`` in them, write ``mapped`` there, sync, evaluate."""
    cl, model = client(fw), inner_model(parts)
    record: dict[str, Any] = {}
    for label, procedure in (("number", fw.number(0)), ("name", "main")):
        ok, memory, error = fw.map_mutable_weights(cl, model, procedure, MAX_MAPPED_BYTES)
        record[f"map_{label}"] = {
            "ok": ok,
            "bytes": None if memory is None else len(memory),
            "error": None if error is None else str(error),
        }
        if not ok or memory is None:
            continue
        try:
            offset = bytes(memory).find(old.tobytes())
            record["old_weights_at"] = offset if offset >= 0 else None
            if offset < 0:
                break
            memory[offset : offset + mapped.nbytes] = mapped.tobytes()
            step(
                ctx,
                "sync",
                call,
                fw,
                "_ANEClient",
                cl,
                SYNC,
                model,
                procedure,
                offset,
                mapped.nbytes,
            )
            step(ctx, "after_sync", _run, fw, k, parts, x, {"old": old, "mapped": mapped})
        finally:
            step(
                ctx,
                "unmap",
                lambda p=procedure: cl.unmapMutableWeightsForModel_andProcedure_(model, p),
            )
        break
    return record


def weight_reload_headline(seen: dict[str, Any]) -> str:
    """The finding in one line (``anekit probe``'s summary)."""
    after = step_value(seen, "after_reload") if "after_reload" in seen else "not reloaded"
    if isinstance(after, dict):
        after = after["computed_with"]
    mutable = seen["mutable"] if isinstance(seen["mutable"], str) else "present"
    return f"after unload/patch/reload the model computes with: {after} weights; mutable: {mutable}"
