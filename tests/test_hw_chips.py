"""Chip profiles: names, lookup, host detection, and the provenance of every number."""

from __future__ import annotations

import importlib
import json
from importlib import resources

import pytest

from anekit.hw.chips import chip_from_brand, chips, default_chip, get_chip, normalize_name

# the package re-exports the function chips(), which shadows the module attribute
chips_mod = importlib.import_module("anekit.hw.chips")

EXPECTED = [
    "m1", "m1-pro", "m1-max", "m1-ultra", "m2", "m2-pro", "m2-max", "m2-ultra",
    "m3", "m3-pro", "m3-max", "m3-ultra", "m4", "m4-pro", "m4-max", "m5", "m5-pro", "m5-max",
]  # fmt: skip


def raw_data() -> dict:
    return json.loads(resources.files("anekit.hw").joinpath("data/chips.json").read_text("utf-8"))


def test_every_issue_chip_has_a_profile_in_generation_order():
    assert chips() == EXPECTED


@pytest.mark.parametrize(
    ("spelling", "name"),
    [("m4", "m4"), ("M4 Pro", "m4-pro"), ("Apple M5 Max", "m5-max"), ("m3_ultra", "m3-ultra")],
)
def test_get_chip_accepts_common_spellings(spelling, name):
    assert get_chip(spelling).name == name
    assert normalize_name(spelling) == name


def test_unknown_chip_lists_valid_names():
    with pytest.raises(ValueError, match="unknown chip 'm9'") as err:
        get_chip("m9")
    for name in EXPECTED:
        assert name in str(err.value)


@pytest.mark.parametrize(
    ("brand", "name"),
    [
        ("Apple M1", "m1"),
        ("Apple M4 Pro", "m4-pro"),
        ("Apple M2 Ultra", "m2-ultra"),
        ("Apple M9 Max", None),
        ("Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz", None),
    ],
)
def test_brand_string_maps_to_a_profile(brand, name):
    assert chip_from_brand(brand) == name


def test_default_off_macos_is_m4_and_says_so(monkeypatch):
    monkeypatch.setattr(chips_mod.platform, "system", lambda: "Linux")
    name, how = default_chip()
    assert name == "m4"
    assert "not running on macOS" in how


def test_default_on_macos_follows_sysctl(monkeypatch):
    monkeypatch.setattr(chips_mod.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(chips_mod, "host_brand_string", lambda: "Apple M3 Max")
    assert default_chip()[0] == "m3-max"
    monkeypatch.setattr(chips_mod, "host_brand_string", lambda: "Apple M7")
    name, how = default_chip()
    assert name == "m4" and "Apple M7" in how


def test_every_number_has_a_known_source_and_an_estimate_flag():
    data = raw_data()
    sources = data["sources"]
    for name, entry in data["chips"].items():
        for group in ("facts", "cost"):
            for key, fact in entry[group].items():
                assert fact["source"] in sources, f"{name}.{key}: unknown source {fact['source']!r}"
                assert isinstance(fact["estimate"], bool), f"{name}.{key}"
                conflict = fact.get("conflict")
                if conflict:
                    assert conflict["source"] in sources, f"{name}.{key} conflict"


def test_profiles_are_physically_consistent():
    for name in EXPECTED:
        chip = get_chip(name)
        assert chip.ne_cores == (32 if name.endswith("ultra") else 16)
        # the ANE cannot stream faster than the memory system it sits on
        assert chip.ane_dram_bw_gbps <= chip.dram_bw_gbps
        assert chip.max_dim_spatial <= chip.max_dim_channel == 65536
        assert (
            chip.generation
            == {"m1": "H13", "m2": "H14", "m3": "H15", "m4": "H16", "m5": "H17"}[name[:2]]
        )


def test_m4_rating_is_int8_and_twice_the_measured_fp16_peak():
    m4 = get_chip("m4")
    assert m4.rated_precision == "int8"
    assert m4.rated_tops / 2 == pytest.approx(m4.measured_fp16_tflops, rel=0.05)


def test_cost_parameters_carry_their_own_provenance():
    m4 = get_chip("m4")
    assert m4.cost.io_bw == pytest.approx(m4.facts["cost.io_bw_gbps"].value * 1e9)
    assert m4.facts["cost.io_bw_gbps"].conflict is not None  # the M4 Air relu sweep disagrees
    assert m4.cost.dram_bw == pytest.approx(64.18e9)  # Anemll: M4 streams a 1 GB head at 64.18 GB/s
