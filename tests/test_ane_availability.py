"""Honest availability, the dialect per chip and macOS, and the checker before compile.

Hosts are simulated: ``host.facts`` is replaced by a made-up Mac and the framework
by the recording stand-in, so each case (a virtual machine, Rosetta, macOS 14)
shows the reason and the reference backend as the default. What a real Mac says
is for ``anekit doctor --ladder`` to record.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.backends import ane as ane_backend
from anekit.backends import budget, choose_backend, resolve_backend
from anekit.backends.ane import compile as ane_compile
from anekit.backends.ane import framework, host, kernel, selfcheck
from anekit.errors import CompileError
from tests.ane_fake import FakeFramework

M4 = host.HostFacts("darwin", "arm64", "15.3", False, False, "Apple M4", "m4")


@pytest.fixture
def fake(tmp_path: Path) -> FakeFramework:
    return FakeFramework(tmp_path / "T")


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(budget, "BUDGET", budget.CompileBudget())
    monkeypatch.setattr(kernel, "LOAD_RETRY_DELAY_S", 0.0)
    ane_backend._availability.cache_clear()
    yield
    ane_backend._availability.cache_clear()


def simulate(monkeypatch: pytest.MonkeyPatch, facts: host.HostFacts, fake=None) -> None:
    """Make this process look like ``facts``, with the stand-in as its framework."""
    monkeypatch.setattr(host, "facts", lambda: facts)
    monkeypatch.setattr(host, "FRAMEWORK_PATH", str(Path(__file__).parent))  # a directory
    monkeypatch.setattr(framework, "problem", lambda: None)
    monkeypatch.setattr(framework, "load", lambda: fake)


def unweighted() -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 8), "fp16")
    b.output(b.mul(x=x, y=2.0), "y")
    return b.build()


def test_a_simulated_m4_on_macos_15_is_available(monkeypatch, fake) -> None:
    simulate(monkeypatch, M4, fake)
    ok, reason = ane_backend.available()
    assert ok and "ANE h16" in reason and "dialect ios18" in reason
    monkeypatch.setattr(selfcheck, "verdict", lambda: (True, "the self-check program matched"))
    assert resolve_backend(None) == "ane"


def test_a_failed_self_check_moves_the_default_on_and_says_why(monkeypatch, fake) -> None:
    simulate(monkeypatch, M4, fake)
    monkeypatch.setattr(selfcheck, "verdict", lambda: (False, "the self-check program failed: X"))
    name, skipped, _ = choose_backend(None)
    assert name == "reference"  # CoreML is not there either off macOS
    assert skipped[0] == ("ane", "the self-check program failed: X")


VM = dataclasses.replace(M4, virtual_machine=True)
ROSETTA = dataclasses.replace(M4, machine="x86_64", translated=True)
MACOS_14 = dataclasses.replace(M4, macos="14.6")


@pytest.mark.parametrize(
    "facts, device, reason",
    [
        (VM, {}, "virtual machine (kern.hv_vmm_present = 1)"),
        (M4, {"isVirtualMachine": True}, "_ANEDeviceInfo reports a virtual machine"),
        (M4, {"hasANE": False}, "reports no ANE"),
        (ROSETTA, {}, "runs under Rosetta 2 as x86_64 on an Apple-silicon Mac; install an arm64"),
        (MACOS_14, {}, "needs macOS 15 or later; this is macOS 14.6"),
    ],
    ids=["vm-sysctl", "vm-device-info", "no-ane", "rosetta", "macos-14"],
)
def test_unusable_macs_give_the_reference_backend_and_a_reason(
    monkeypatch, fake, facts, device, reason
) -> None:
    fake.device.update(device)
    simulate(monkeypatch, facts, fake)
    ok, why = ane_backend.available()
    assert not ok and reason in why
    assert resolve_backend(None) == "reference"
    assert anekit.backends.available_backends()["ane"] == why
    with anekit.compile(unweighted()) as k:
        assert k.backend == "reference"


def test_macos_14_is_enough_for_the_legacy_dialect_of_an_m1(monkeypatch, fake) -> None:
    simulate(monkeypatch, dataclasses.replace(MACOS_14, brand="Apple M1", chip="m1"), fake)
    ok, reason = ane_backend.available()
    assert ok and "dialect legacy" in reason


@pytest.mark.parametrize(
    "error", [KeyError("kern.osproductversion"), SystemError("objc"), OSError(5)]
)
def test_an_unexpected_exception_while_probing_is_a_reason(monkeypatch, error) -> None:
    def boom() -> host.HostFacts:
        raise error

    monkeypatch.setattr(host, "facts", boom)
    ok, reason = ane_backend.available()
    assert not ok and f"probing the ANE raised {type(error).__name__}" in reason
    assert resolve_backend(None) == "reference"


def test_framework_loading_failures_of_any_type_become_reasons(monkeypatch) -> None:
    class Broken:
        def __init__(self) -> None:
            raise RuntimeError("PyObjC bridge support is broken")

    monkeypatch.setattr(framework, "_loaded", None)
    monkeypatch.setattr(framework, "_failure", None)
    monkeypatch.setattr(framework, "platform_problem", lambda: None)
    monkeypatch.setattr(framework, "Framework", Broken)
    reason = framework.problem()
    assert reason == "loading the framework raised RuntimeError: PyObjC bridge support is broken"


def test_device_info_survives_missing_selectors(fake) -> None:
    del fake.selectors[("_ANEDeviceInfo", "numANEs")]
    info = framework.device_info(fake)
    assert info["hasANE"] is True and info["aneSubType"] == "h16" and info["numANEs"] is None


def test_host_facts_off_macos_and_version_parsing() -> None:
    facts = host.facts()
    if facts.platform == "darwin":
        pytest.skip("this is a Mac")
    assert facts.macos is None and facts.translated is None and facts.chip is None
    assert host.problem(facts).startswith("needs macOS on Apple silicon")
    assert host.version_tuple("15.3.1") == (15, 3, 1) and host.version_tuple("26.0 beta") == (26,)


# -- the dialect ---------------------------------------------------------------------------------
def descriptor_text(fake: FakeFramework) -> str:
    return fake.calls_to("modelWithMILText:weights:optionsPlist:")[-1].args[0].payload.decode()


def test_the_dialect_follows_the_chip_unless_named(fake) -> None:
    with ane_compile(unweighted(), framework=fake, chip="m1") as k:
        assert k.dialect == "legacy" and descriptor_text(fake).startswith("program(1.0)")
        assert "func main<ios16>" in descriptor_text(fake)
        np.testing.assert_array_equal(k(x=np.ones((1, 4, 1, 8), np.float16))["y"], 2.0)
    with ane_compile(unweighted(), framework=fake, chip="m4") as k:
        assert k.dialect == "ios18" and descriptor_text(fake).startswith("program(1.3)")
    with ane_compile(unweighted(), framework=fake, chip="m4", dialect="legacy") as k:
        assert k.dialect == "legacy" and descriptor_text(fake).startswith("program(1.0)")


def test_ios18_on_macos_14_is_refused_before_compiling(monkeypatch, fake) -> None:
    monkeypatch.setattr(host, "macos_version", lambda: "14.6")
    with pytest.raises(CompileError, match="ios18 MIL dialect needs macOS 15"):
        ane_compile(unweighted(), framework=fake, chip="m4")
    assert fake.calls == []
    with ane_compile(unweighted(), framework=fake, chip="m4", dialect="legacy") as k:
        assert k.dialect == "legacy"


def test_unknown_dialect_and_chip_are_compile_errors(fake) -> None:
    with pytest.raises(CompileError, match="unknown MIL dialect 'ios99'"):
        ane_compile(unweighted(), framework=fake, dialect="ios99")
    with pytest.raises(CompileError, match="unknown chip 'm99'"):
        ane_compile(unweighted(), framework=fake, chip="m99")


# -- the checker before compile ---------------------------------------------------------------------
def matmul_k48() -> mil.Program:
    b = mil.Builder()
    x, y = b.input("x", (1, 16, 48), "fp16"), b.input("y", (1, 48, 32), "fp16")
    b.output(b.matmul(x=x, y=y), "z")
    return b.build()


def test_the_checker_refuses_a_program_before_the_compiler_sees_it(fake) -> None:
    with pytest.raises(CompileError, match=r"checker for m1 found 1 error\(s\).*m1-matmul-k"):
        ane_compile(matmul_k48(), framework=fake, chip="m1")
    assert fake.calls == [], "the framework was called for a program the checker rejects"
    with ane_compile(matmul_k48(), framework=fake, chip="m1", check=False) as k:
        assert k.dialect == "legacy"
    assert fake.calls_to("compileWithQoS:options:error:")
    with ane_compile(matmul_k48(), framework=fake, chip="m4"):
        pass  # no such rule on M4
