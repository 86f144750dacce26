"""The IOKit profile of ``anekit doctor``: ``ioreg`` and ``powermetrics`` output, parsed.

The plists are written here with :mod:`plistlib`, shaped as ``ioreg -a -r -c H11ANEIn``
prints an entry (an array of dictionaries with ``IORegistryEntryChildren``), so the
parser is tested on bytes, not on a guess inside the code. The commands themselves run
only on a Mac; here they are replaced by a recorded run.
"""

from __future__ import annotations

import plistlib
import subprocess

import pytest

from anekit.doctor import iokit

ENTRY = [
    {
        "IOObjectClass": "H11ANEIn",
        "IORegistryEntryName": "ane",
        "IOPowerManagement": {"CurrentPowerState": 0, "DevicePowerState": 0, "MaxPowerState": 2},
        "DeviceProperties": {"ANE_ADCLK_TRIG": 7, "ANE_PPT_TRIG": 3, "ane_dvfs_table": [600, 1300]},
        "ANEDevicePropertyTypeANEArchitectureTypeStr": "h16",
        "FirmwareBlob": bytes(range(200)),
        "IORegistryEntryChildren": [
            {"IOObjectClass": "H11ANEInUserClient", "IORegistryEntryName": "H11ANEInUserClient",
             "IOUserClientCreator": "pid 501, aned", "ClockFrequency": 1_400_000_000},
        ],
    }
]  # fmt: skip


def test_ioreg_entries_their_power_state_dvfs_and_triggers() -> None:
    profile = iokit.parse_ioreg(plistlib.dumps(ENTRY))
    assert profile["available"] and not profile["truncated"]
    ane, client = profile["entries"]
    assert (ane["path"], ane["class"]) == ("ane", "H11ANEIn")
    assert ane["power"] == {"CurrentPowerState": 0, "DevicePowerState": 0, "MaxPowerState": 2}
    assert ane["triggers"] == {"DeviceProperties.ANE_ADCLK_TRIG": 7,
                               "DeviceProperties.ANE_PPT_TRIG": 3}  # fmt: skip
    assert ane["dvfs"] == {"DeviceProperties.ane_dvfs_table": [600, 1300]}
    blob = ane["properties"]["FirmwareBlob"]
    assert blob.startswith(bytes(range(64)).hex()) and blob.endswith("... (200 bytes)")
    assert "IORegistryEntryChildren" not in ane["properties"]
    assert client["path"] == "ane/H11ANEInUserClient"
    assert client["dvfs"] == {"ClockFrequency": 1_400_000_000}


def test_ioreg_without_an_entry_or_with_garbage_says_so() -> None:
    assert iokit.parse_ioreg(plistlib.dumps([])) == {
        "available": False, "reason": "no H11ANEIn entry", "entries": [], "truncated": False}  # fmt: skip
    broken = iokit.parse_ioreg(b"<?xml version='1.0'?><plist><dict><key>")
    assert broken["available"] is False and broken["reason"].startswith("ioreg printed no readable")


def test_a_deep_or_wide_registry_is_cut_and_says_so() -> None:
    node: dict = {"IOObjectClass": "H11ANEIn", "IORegistryEntryName": "n0"}
    root = node
    for i in range(1, 40):
        child = {"IOObjectClass": "X", "IORegistryEntryName": f"n{i}"}
        node["IORegistryEntryChildren"] = [child]
        node = child
    profile = iokit.parse_ioreg(plistlib.dumps([root]))
    assert len(profile["entries"]) == iokit.MAX_DEPTH


def recorded(
    stdout: bytes = b"", returncode: int = 0, stderr: bytes = b"", seen: list | None = None
):
    def run(command, **kwargs):
        if seen is not None:
            seen.append((command, kwargs))
        return subprocess.CompletedProcess(command, returncode, stdout, stderr)

    return run


def test_the_ioreg_command_and_its_failures() -> None:
    seen: list = []
    profile = iokit.ioreg_profile(recorded(plistlib.dumps(ENTRY), seen=seen), platform="darwin")
    assert seen[0][0] == ["ioreg", "-a", "-r", "-c", "H11ANEIn"] and seen[0][1]["timeout"] > 0
    assert profile["command"] == "ioreg -a -r -c H11ANEIn" and len(profile["entries"]) == 2
    failed = iokit.ioreg_profile(
        recorded(returncode=1, stderr=b"no such class\n"), platform="darwin"
    )
    assert failed == {"available": False, "reason": "ioreg exited with 1: no such class"}
    assert iokit.ioreg_profile(platform="linux")["reason"] == (
        "IOKit exists only on macOS; this is linux"
    )


def test_powermetrics_only_as_root() -> None:
    assert "needs root" in iokit.power_profile(recorded(), platform="darwin", euid=lambda: 501)[
        "reason"]  # fmt: skip
    sample = plistlib.dumps({"processor": {"ane_energy": 12, "ane_power": 3.5, "cpu_power": 900,
                                           "plane": 1}, "gpu": {"gpu_energy": 4}})  # fmt: skip
    seen: list = []
    power = iokit.power_profile(recorded(sample + b"\0" + sample, seen=seen), platform="darwin",
                                euid=lambda: 0)  # fmt: skip
    assert seen[0][0][0] == "powermetrics" and "-f" in seen[0][0]
    assert power["available"] and power["ane"] == {"processor.ane_energy": 12,
                                                   "processor.ane_power": 3.5}  # fmt: skip


@pytest.mark.parametrize("platform", ["linux", "win32"])
def test_off_macos_nothing_is_run(platform: str) -> None:
    def must_not_run(*a, **k):
        raise AssertionError("ran a command off macOS")

    assert iokit.ioreg_profile(must_not_run, platform=platform)["available"] is False
    assert iokit.power_profile(must_not_run, platform=platform)["available"] is False


@pytest.mark.parametrize("fmt", [plistlib.FMT_XML, plistlib.FMT_BINARY])
def test_damaged_output_never_raises_and_stays_json(fmt) -> None:
    """Corrupted or cut-short plists (either format) give a reason, never an exception."""
    import json
    import random

    rng = random.Random(7)
    base = plistlib.dumps(ENTRY, fmt=fmt)
    for _ in range(300):
        data = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cut = bytes(data[: rng.randrange(1, len(data) + 1)])
        json.dumps(iokit.parse_ioreg(cut))
        json.dumps(iokit.parse_powermetrics(cut))


def test_doctor_reports_the_profile_and_says_why_not_here(monkeypatch) -> None:
    from anekit.doctor import report

    r = report.report(smoke=False)
    assert r["iokit"]["available"] is False and r["power"]["available"] is False
    text = report.format_report(r)
    lines = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in text.splitlines()[1:]
             if line.startswith("  ")}  # fmt: skip
    assert lines["IOKit"] == f"not read: {r['iokit']['reason']}"
    assert lines["power"] == f"not sampled: {r['power']['reason']}"
    parsed = {"command": "ioreg", **iokit.parse_ioreg(plistlib.dumps(ENTRY))}
    monkeypatch.setattr(iokit, "ioreg_profile", lambda: parsed)
    monkeypatch.setattr(iokit, "power_profile", lambda: {"available": True, "reason": None,
                                                         "ane": {"processor.ane_power": 3.5}})  # fmt: skip
    text = report.format_report(report.report(smoke=False))
    assert (
        "ane (H11ANEIn): 6 properties, power state 0, 1 DVFS/clock, 2 trigger; "
        "ane/H11ANEInUserClient (H11ANEInUserClient): 4 properties"
    ) in text
    assert "processor.ane_power = 3.5" in text
