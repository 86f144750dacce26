"""Placement receipts and the default backend order: where a kernel runs, and why.

Off macOS the private route and CoreML are unavailable, so the default order lands on
the reference backend and says why each was skipped. The order on a Mac (the ANE's
cached self-check, then CoreML) is driven here with stand-in backend modules and a
stand-in self-check; the CoreML kernel's pieces (hashing, the compile cache, reading
MLComputePlan) with stand-ins for coremltools' objects. That proves our side only.
"""

from __future__ import annotations

import json
import os
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import anekit
from anekit import backends, cli, config
from anekit.backends import coreml
from anekit.backends.ane import selfcheck
from anekit.backends.coreml import kernel as coreml_kernel
from anekit.backends.placement import OpPlacement, Placement
from anekit.errors import BackendUnavailable, CompileError
from anekit.ladder import cases


def _program() -> anekit.mil.Program:
    return cases.affine((1, 8, 1, 16), "fp16").program


def _off_macos() -> None:
    if backends._module("ane").available()[0] or coreml.available()[0]:
        pytest.skip("this machine has a private or public route to the engine")


def test_the_default_order_off_macos_says_why_each_route_was_skipped(monkeypatch) -> None:
    _off_macos()
    monkeypatch.delenv(config.ENV_BACKEND, raising=False)
    with anekit.compile(_program()) as k:
        placement = k.placement
    assert (placement.backend, placement.engine, placement.chosen_by) == (
        "reference", "CPU", "default order"
    )  # fmt: skip
    skipped = dict(placement.skipped)
    assert list(skipped) == ["ane", "coreml"]
    assert skipped["ane"] == backends._module("ane").available()[1]
    assert skipped["coreml"].startswith("CoreML runs only on macOS")
    lines = placement.lines()
    assert lines[0].startswith("placement: reference (CPU via the NumPy reference backend")
    assert lines[1] == f"  skipped ane: {skipped['ane']}"


def test_a_backend_asked_for_skips_nothing_and_says_so(monkeypatch) -> None:
    with anekit.compile(_program(), backend="reference") as k:
        assert (k.placement.chosen_by, k.placement.skipped) == ("asked for", ())
    monkeypatch.setenv(config.ENV_BACKEND, "reference")
    with anekit.compile(_program()) as k:
        assert k.placement.chosen_by == "asked for by $ANEKIT_BACKEND"


def test_an_isolated_kernel_names_its_worker(monkeypatch) -> None:
    with anekit.compile(_program(), backend="reference", isolate=True, timeout=60.0) as k:
        assert k.placement.path == "a worker process hosting the reference backend"


def test_coreml_asked_for_off_macos_is_unavailable_with_the_reason() -> None:
    _off_macos()
    with pytest.raises(BackendUnavailable, match="'coreml' is unavailable: CoreML runs only on"):
        anekit.compile(_program(), backend="coreml")
    with pytest.raises(BackendUnavailable, match="CoreML runs only on macOS"):
        coreml.compile(_program())


def _stand_in(ok: bool, reason: str, ready: tuple[bool, str] | None = None) -> Any:
    module = types.SimpleNamespace(available=lambda: (ok, reason))
    if ready is not None:
        module.default_ready = lambda: ready
    return module


@pytest.mark.parametrize(
    "ane_ready, coreml_ok, chosen",
    [((True, "self-check passed"), True, "ane"),
     ((False, "the self-check program failed: CompileError: x"), True, "coreml"),
     ((False, "the self-check program failed: CompileError: x"), False, "reference")],
)  # fmt: skip
def test_the_default_order_on_a_mac(monkeypatch, ane_ready, coreml_ok, chosen) -> None:
    modules = {
        "ane": _stand_in(True, "framework loads", ane_ready),
        "coreml": _stand_in(coreml_ok, "CoreML" if coreml_ok else "coremltools missing"),
        "reference": _stand_in(True, "NumPy"),
    }
    monkeypatch.setattr(backends, "_module", modules.__getitem__)
    monkeypatch.delenv(config.ENV_BACKEND, raising=False)
    name, skipped, how = backends.choose_backend()
    assert (name, how) == (chosen, "default order")
    expected = []
    if chosen != "ane":
        expected.append(("ane", ane_ready[1]))
    if chosen == "reference":
        expected.append(("coreml", "coremltools missing"))
    assert list(skipped) == expected


# -- the ANE self-check -----------------------------------------------------------------------------
def test_the_self_check_verdict_is_cached_per_macos_build_and_version(
    tmp_path, monkeypatch
) -> None:
    cache, runs = tmp_path / "c.json", []

    def run() -> tuple[bool, str]:
        runs.append(1)
        return False, "the self-check program failed: CompileError: nope"

    monkeypatch.setattr(selfcheck, "macos_build", lambda: "24D70")
    ok, reason = selfcheck.verdict(run, cache)
    assert (ok, reason, len(runs)) == (
        False,
        "the self-check program failed: CompileError: nope",
        1,
    )
    ok, reason = selfcheck.verdict(run, cache)
    assert len(runs) == 1 and reason.endswith("(self-check cached for macOS 24D70, anekit 0.1.0)")
    monkeypatch.setattr(selfcheck, "macos_build", lambda: "24E248")  # a macOS update
    selfcheck.verdict(run, cache)
    assert len(runs) == 2 and len(json.loads(cache.read_text())) == 2


def test_a_damaged_cache_means_checking_again(tmp_path, monkeypatch) -> None:
    cache = tmp_path / "c.json"
    cache.write_text('{"macOS x": {"ok": "yes"}')
    assert selfcheck.verdict(lambda: (True, "fine"), cache) == (True, "fine")
    assert json.loads(cache.read_text())[selfcheck.cache_key()]["ok"] is True


def test_the_self_check_runs_in_a_fresh_process_and_reports_why_it_fails_here() -> None:
    _off_macos()
    ok, reason = selfcheck.run_in_fresh_process()
    assert ok is False
    assert reason.startswith("the self-check program failed: BackendUnavailable: backend 'ane'")


# -- the CoreML kernel's pieces --------------------------------------------------------------------
def _weighted(value: float) -> anekit.mil.Program:
    b = anekit.mil.Builder()
    x = b.input("x", (1, 16, 1, 8), "fp16")
    b.output(b.mul(x=x, y=b.weight("w", np.full((1, 16, 1, 8), value, np.float16))), "y")
    return b.build()


def test_the_program_hash_covers_text_weights_and_tool_versions() -> None:
    h = coreml_kernel.program_hash
    assert h(_weighted(0.5), "ct 9") == h(_weighted(0.5), "ct 9")
    assert h(_weighted(0.5), "ct 9") != h(_weighted(0.25), "ct 9")  # weights only
    assert h(_weighted(0.5), "ct 9") != h(_weighted(0.5), "ct 10")


def test_a_program_compiles_once_then_comes_from_the_cache(tmp_path) -> None:
    pytest.importorskip("coremltools")
    compiled: list[Path] = []

    def compile_package(package: Path, destination: Path) -> None:
        assert (package / "Manifest.json").is_file()
        destination.mkdir()
        (destination / "model.mil").write_text("compiled")
        compiled.append(package)

    first, cached = coreml_kernel.compiled_model(_weighted(0.5), tmp_path, compile_package, "s")
    again, cached_again = coreml_kernel.compiled_model(
        _weighted(0.5), tmp_path, compile_package, "s"
    )
    assert (first, cached, cached_again, len(compiled)) == (again, False, True, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]  # no scratch left
    coreml_kernel.compiled_model(_weighted(0.25), tmp_path, compile_package, "s")
    assert len(compiled) == 2


def test_a_failed_coreml_compile_is_a_compile_error_and_caches_nothing(tmp_path) -> None:
    pytest.importorskip("coremltools")

    def refuses(package: Path, destination: Path) -> None:
        raise RuntimeError("Error reading protobuf spec")

    with pytest.raises(CompileError, match="CoreML could not compile .*protobuf"):
        coreml_kernel.compiled_model(_weighted(0.5), tmp_path, refuses, "s")
    assert list(tmp_path.iterdir()) == []


class MLNeuralEngineComputeDevice:  # named as coremltools' device classes are
    pass


class MLCPUComputeDevice:
    pass


def _plan(rows: list[tuple[str, str, Any]]) -> Any:
    """A stand-in MLComputePlan: operations with output names, and a usage per operation."""
    ops = [types.SimpleNamespace(operator_name=kind, outputs=[types.SimpleNamespace(name=n)])
           for kind, n, _ in rows]  # fmt: skip
    usage = {id(op): device for op, (_, _, device) in zip(ops, rows)}
    block = types.SimpleNamespace(operations=ops)
    structure = types.SimpleNamespace(
        program=types.SimpleNamespace(functions={"main": types.SimpleNamespace(block=block)})
    )

    def usage_of(op: Any) -> Any:
        device = usage[id(op)]
        if device is None:
            return None
        return types.SimpleNamespace(
            preferred_compute_device=device,
            supported_compute_devices=[device, MLCPUComputeDevice()],
        )

    return types.SimpleNamespace(model_structure=structure,
                                 get_compute_device_usage_for_mlprogram_operation=usage_of)  # fmt: skip


def test_per_op_placement_is_matched_to_the_programs_ops_and_lines() -> None:
    program = anekit.mil.parse(_weighted(0.5).to_text(), weights=_weighted(0.5).weight_files())
    plan = _plan(
        [("const", "w", MLCPUComputeDevice()), ("mul", "y", MLNeuralEngineComputeDevice())]
    )
    w, y = coreml_kernel.op_placements(plan, program)
    assert (y.op, y.kind, y.device, y.supported) == ("y", "mul", "ane", ("ane", "cpu"))
    assert y.line == program.main.ops[-1].line and y.line is not None
    assert w.device == "cpu"
    unknown = coreml_kernel.op_placements(_plan([("mul", "y", None)]), program)
    assert unknown[0].device == "unknown" and unknown[0].supported == ()


def test_a_receipt_counts_devices_and_reads_as_json() -> None:
    p = Placement("coreml", "CoreML: CPU_AND_NE", "CoreML", ops=(
        OpPlacement("a", "conv", "ane", 3), OpPlacement("b", "softmax", "cpu", 4),
        OpPlacement("c", "add", "ane", 5)), notes=("compiled model reused",))  # fmt: skip
    p = p.chosen((("ane", "self-check failed"),), "default order")
    assert p.devices() == {"ane": 2, "cpu": 1}
    assert p.summary().endswith("; default order); ops: 2 on ane, 1 on cpu")
    record = json.loads(json.dumps(p.as_dict()))
    assert record["skipped"] == [{"backend": "ane", "reason": "self-check failed"}]
    assert record["ops"][1] == {"op": "b", "kind": "softmax", "device": "cpu", "line": 4,
                                "supported": []}  # fmt: skip


def test_anekit_run_prints_the_receipt(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv(config.ENV_BACKEND, raising=False)
    source = _program().save(tmp_path / "p")
    assert cli.main(["run", str(source), "--random", "--backend", "reference"]) == 0
    out = capsys.readouterr().out.splitlines()
    (placed,) = [line for line in out if line.startswith("placement: ")]
    assert placed.startswith("placement: reference (CPU via") and placed.endswith("asked for)")
    assert cli.main(["run", str(source), "--random", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["placement"]["chosen_by"] == "default order"
    if not os.environ.get(config.ENV_BACKEND):
        assert record["placement"]["backend"] == record["backend"]
