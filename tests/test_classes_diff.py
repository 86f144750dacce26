"""``anekit classes --json`` listings and ``--diff A.json B.json``, on listings written here.

The listing is built from the recording stand-in's runtime listing (what the real
``objc_copyClassNamesForImage``/``class_copyMethodList`` report on a Mac); the diff is
tested on two listings written in the test, one class and one encoding apart, as two
macOS versions would be.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anekit import cli
from anekit.backends import ane
from anekit.doctor import classes
from tests.ane_fake import FakeFramework

OLD = {"format": classes.FORMAT, "macos": "15.3", "build": "24D60", "classes": {
    "_ANEClient": {"+sharedConnection": "@16@0:8",
                   "-evaluateWithModel:options:request:qos:error:": "B52@0:8@16@24@32I40^@44",
                   "-echo:": "B24@0:8@16"},
    "_ANEGone": {"+new": "@16@0:8"},
    "_ANEModel": {"-modelAttributes": "@16@0:8"},
}}  # fmt: skip
NEW = {"format": classes.FORMAT, "macos": "26.0", "build": "25A354", "classes": {
    "_ANEClient": {"+sharedConnection": "@16@0:8",
                   "-evaluateWithModel:options:request:qos:error:": "B56@0:8@16@24@32Q40^@48",
                   "-mapMutableWeightsForModel:andProcedure:mappedWeightsBuffer:size:error:":
                       "B56@0:8@16@24^^v32^Q40^@48"},
    "_ANEModel": {"-modelAttributes": "@16@0:8"},
    "_ANEWeight": {"+weightWithSymbol:": "@24@0:8@16", "-symbol": "@16@0:8"},
}}  # fmt: skip


def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_diff_finds_added_removed_and_changed(tmp_path) -> None:
    d = classes.diff(classes.read_listing(write(tmp_path, "a.json", OLD)),
                     classes.read_listing(write(tmp_path, "b.json", NEW)))  # fmt: skip
    assert d["classes_added"] == {"_ANEWeight": ["+weightWithSymbol:", "-symbol"]}
    assert d["classes_removed"] == ["_ANEGone"]
    assert d["classes_changed"] == {"_ANEClient": {
        "added": ["-mapMutableWeightsForModel:andProcedure:mappedWeightsBuffer:size:error:"],
        "removed": ["-echo:"],
        "changed": {"-evaluateWithModel:options:request:qos:error:": [
            "B52@0:8@16@24@32I40^@44", "B56@0:8@16@24@32Q40^@48"]},
    }}  # fmt: skip
    assert "_ANEModel" not in d["classes_changed"] and not classes.is_empty(d)
    text = classes.format_diff(d).splitlines()
    assert text[0] == "macOS 15.3 (24D60) -> macOS 26.0 (25A354)"
    assert "+ _ANEWeight (2 methods)" in text and "- _ANEGone" in text
    assert ("    ~ -evaluateWithModel:options:request:qos:error: was B52@0:8@16@24@32I40^@44, "
            "now B56@0:8@16@24@32Q40^@48") in text  # fmt: skip
    assert text[-1] == "1 classes added, 1 removed, 1 changed"


def test_the_command_prints_the_diff_writes_it_and_exits_1_when_different(tmp_path, capsys) -> None:
    a, b = write(tmp_path, "a.json", OLD), write(tmp_path, "b.json", NEW)
    out = tmp_path / "d.json"
    assert cli.main(["classes", "--diff", str(a), str(b), "--json", str(out)]) == 1
    assert "    - -echo:" in capsys.readouterr().out
    assert json.loads(out.read_text())["classes_removed"] == ["_ANEGone"]
    assert cli.main(["classes", "--diff", str(a), str(a)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("no differences")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not readable JSON"),
        ('{"a": ' + "[" * 100 + "]" * 100 + "}", "nested deeper than 64 levels"),
        ('[1, 2]', "expected an anekit-classes/1 listing (anekit classes --json), found format 'list'"),
        ('{"format": "other/2"}', "found format 'other/2'"),
        ('{"format": "anekit-classes/1", "classes": []}', "'classes' must map class names"),
        ('{"format": "anekit-classes/1", "classes": {"_ANEX": {"sel": "v"}}}',
         "class '_ANEX': expected {'+selector' or '-selector': type encoding}"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_listing_is_a_usage_error_naming_it(tmp_path, capsys, content,
                                                                  message) -> None:  # fmt: skip
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    good = write(tmp_path, "a.json", OLD)
    assert cli.main(["classes", "--diff", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"anekit classes: error: {bad}: ") and message in err
    assert cli.main(["classes", "--diff", str(good), str(tmp_path / "missing.json")]) == 2
    assert "missing.json: cannot read a listing (anekit classes --json): no such file" in (
        capsys.readouterr().err
    )


def test_an_oversized_listing_is_refused_before_it_is_read(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(classes, "MAX_LISTING_BYTES", 10)
    path = write(tmp_path, "a.json", OLD)
    with pytest.raises(Exception, match="bytes; expected a listing .* of at most 10 bytes"):
        classes.read_listing(path)


def test_a_device_or_fifo_is_refused_at_once(tmp_path, capsys) -> None:
    import os
    import time

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    start = time.monotonic()
    for other in ("/dev/zero", str(fifo)):  # endless or blocking: read whole before
        assert cli.main(["classes", "--diff", str(write(tmp_path, "a.json", OLD)), other]) == 2
        assert "expected a listing" in capsys.readouterr().err
    assert time.monotonic() - start < 10


def test_a_listing_of_the_framework_round_trips_through_the_reader(tmp_path) -> None:
    fake = FakeFramework(tmp_path / "T")
    names = fake.class_names()
    data = classes.listing(fake, names, macos="15.3", build="24D60")
    assert set(data["classes"]) == set(names) and data["macos"] == "15.3"
    assert data["classes"]["_ANEClient"]["+sharedConnection"] == "@24@0:8@16"
    assert "-compileModel:options:qos:error:" in data["classes"]["_ANEClient"]
    path = write(tmp_path, "l.json", data)
    assert classes.read_listing(path) == data
    assert classes.is_empty(classes.diff(data, classes.read_listing(path)))


def test_writing_a_listing_needs_macos_and_says_so(tmp_path, capsys) -> None:
    ok, reason = ane.available()
    if ok:
        pytest.skip("this machine has the framework")
    assert cli.main(["classes", "--json", str(tmp_path / "l.json")]) == 1
    assert "needs macOS" in capsys.readouterr().err and not (tmp_path / "l.json").exists()
    assert cli.main(["classes", "_ANE", "--diff", "a", "b"]) == 2
