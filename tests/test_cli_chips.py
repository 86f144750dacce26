"""``anekit chips``: the profiles, the default, and the source of every number."""

from __future__ import annotations

import json

from anekit.hw.chips import chips
from tests.clitools import run


def test_chips_table_lists_every_profile_and_the_default(capsys):
    code, out, _ = run(capsys, "chips")
    assert code == 0
    lines = out.splitlines()
    for name in chips():
        assert any(line.split()[:1] == [name] for line in lines)
    assert "default chip: m4" in out


def test_chips_json_carries_sources(capsys):
    code, out, _ = run(capsys, "chips", "--json")
    data = json.loads(out)
    assert code == 0 and data["default"]["chip"] == "m4"
    fact = data["chips"]["m4"]["rated_tops"]
    assert (
        fact["value"] == 38 and fact["source"].startswith("https://") and fact["estimate"] is False
    )
