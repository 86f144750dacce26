"""The call tracer against a stand-in runtime (``tests/trace_fake.py``).

It proves our side only: that ``anekit.trace()`` installs a wrapper for each method it
can pass through safely, records each message with its arguments summarised, result,
timing and nesting, streams JSON lines, and restores every original implementation
afterwards (the classes' method tables are identical to before and behave the same),
also when installing fails part-way or the traced code raises. Whether PyObjC and the
real runtime behave as the seam assumes is checked only on a Mac.
"""

from __future__ import annotations

import json
import sys

import pytest

import anekit
from anekit import cli
from anekit.backends import ane
from anekit.probe import tracehost, tracing
from tests import trace_fake
from tests.trace_fake import FakeRuntime, make_classes


@pytest.fixture
def classes():
    client, model = make_classes()
    return client, model, FakeRuntime(client, model)


def test_trace_records_each_message_and_restores_every_method(classes) -> None:
    client, model, runtime = classes
    before = {c.name: dict(c.table) for c in (client, model)}
    obj = model.new()
    with anekit.trace(["_ANEClient", "_ANEInMemoryModel"], runtime=runtime) as t:
        assert client.send("sharedConnection") == "connection"
        assert client.send("echo:", "ping") is True
        assert obj.send("compileWithQoS:options:error:", 21, {}, None) == (True, None)
        assert obj.send("programHandle") == 42
    # the very same implementations under every original selector, and the same behaviour
    for c in (client, model):
        for key, impl in before[c.name].items():
            assert c.table[key] is impl
    assert runtime.swizzled == []
    assert client.send("echo:", "ping") is True and obj.send("programHandle") == 42
    calls = [(c.class_name, c.kind, c.selector, c.depth) for c in t.records]
    assert calls == [
        ("_ANEClient", "+", "sharedConnection", 0),
        ("_ANEClient", "+", "echo:", 0),
        ("_ANEInMemoryModel", "-", "setPerfStatsMask:", 1),  # nested: finishes first
        ("_ANEInMemoryModel", "-", "compileWithQoS:options:error:", 0),
        ("_ANEInMemoryModel", "-", "programHandle", 0),
    ]
    compile_call = t.records[3]
    assert compile_call.args == [21, "<dict 0 keys>", None] and compile_call.result == [True, None]
    assert compile_call.seconds >= 0.01  # it slept that long inside
    assert t.records[2].start_s >= compile_call.start_s  # began inside it
    assert len(t.records) == 5  # nothing after the block was recorded


def test_methods_that_cannot_pass_through_are_left_alone(classes) -> None:
    client, model, runtime = classes
    with anekit.trace(["_ANEClient", "_ANEInMemoryModel"], runtime=runtime) as t:
        pass
    assert t.skipped["+[_ANEClient description]"] == "housekeeping"
    assert t.skipped["-[_ANEInMemoryModel dealloc]"] == "housekeeping"
    assert "is not passed through" in t.skipped["-[_ANEInMemoryModel frame]"]  # a struct
    assert "is not passed through" in t.skipped["-[_ANEInMemoryModel bytes]"]  # void*
    assert t.skipped["-[_ANEInMemoryModel initWithDescriptor:]"] == (
        "an ownership-transferring method family"
    )
    assert t.skipped["-[_ANEInMemoryModel evaluateWithCompletion:]"] == (
        "a block argument is not passed through"
    )
    assert t.skipped["-[_ANEInMemoryModel identifierWithError:]"] == (
        "an NSError** method that does not return BOOL"
    )
    assert "-[_ANEInMemoryModel compileWithQoS:options:error:]" in t.traced  # NSError** is fine
    assert len(t.traced) == 6


def test_an_exception_in_a_traced_method_is_recorded_and_propagates(classes) -> None:
    _, model, runtime = classes
    obj = model.new()
    with anekit.trace(["_ANEInMemoryModel"], runtime=runtime) as t:
        with pytest.raises(ValueError, match="unload refused"):
            obj.send("unloadWithQoS:error:", 21, None)
    assert t.records[0].error == "ValueError: unload refused" and t.records[0].result is None
    assert runtime.swizzled == []


def test_an_install_that_fails_part_way_restores_what_it_installed(classes) -> None:
    client, model, runtime = classes
    before = dict(model.table)
    runtime.fail_on = "setPerfStatsMask:"
    with pytest.raises(RuntimeError, match="cannot add a method"):
        with anekit.trace(["_ANEInMemoryModel"], runtime=runtime):
            pass
    assert runtime.swizzled == [] and all(model.table[k] is v for k, v in before.items())


def test_the_trace_is_streamed_as_json_lines_and_printed_as_a_timeline(classes, tmp_path) -> None:
    client, model, runtime = classes
    path = tmp_path / "t.jsonl"
    with anekit.trace(["_ANEInMemoryModel"], jsonl=path, runtime=runtime) as t:
        model.new().send("compileWithQoS:options:error:", 21, {}, None)
        assert len(path.read_text().splitlines()) == 2  # flushed as each call ended
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["selector"] for r in rows] == ["setPerfStatsMask:", "compileWithQoS:options:error:"]
    assert tracing.read_jsonl(path, 1 << 20) == t.records
    text = tracing.timeline(t.records).splitlines()
    assert text[0].endswith(
        "-[_ANEInMemoryModel compileWithQoS:21 options:<dict 0 keys> error:null] -> [true, null]"
    )
    assert text[1].split("ms", 2)[2].startswith("    -[_ANEInMemoryModel setPerfStatsMask:15]")
    assert text[-1] == "2 calls on 1 thread"


def test_a_cut_short_line_is_dropped_and_a_huge_trace_refused(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"index": 0, "start_s": 0.0, "seconds": 0.1, "thread": 1, "depth": 0, '
                    '"class_name": "C", "kind": "-", "selector": "s", "args": [], "result": null, '
                    '"error": null}\n{"index": 1, "sta')  # fmt: skip
    assert [c.selector for c in tracing.read_jsonl(path, 1 << 20)] == ["s"]
    with pytest.raises(anekit.errors.UsageError, match="over the 10 read"):
        tracing.read_jsonl(path, 10)


def test_summaries_name_kinds_without_calling_methods() -> None:
    assert tracing.summarize(b"abc") == "<3 bytes>"
    assert tracing.summarize({"a": 1, "b": 2}) == "<dict 2 keys: a, b>"
    assert tracing.summarize("x" * 500).endswith("...")
    assert tracing.summarize(object()) == "<object>"


def test_the_trace_host_runs_a_script_under_the_trace(tmp_path, monkeypatch) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\nfrom tests.trace_fake import CLIENT\n"
        "CLIENT.send('echo:', sys.argv[1])\nsys.exit(3)\n"
    )
    out = tmp_path / "calls.jsonl"
    before = dict(trace_fake.CLIENT.table)
    argv = ["--out", str(out), "--class", "_ANEClient", "--", str(script), "ping"]
    assert tracehost.host(argv, runtime=trace_fake.RUNTIME) == 3  # the script's status
    calls = tracing.read_jsonl(out, 1 << 20)
    assert [(c.selector, c.args, c.result) for c in calls] == [("echo:", ["ping"], True)]
    assert all(trace_fake.CLIENT.table[k] is v for k, v in before.items())
    assert sys.argv[0] != str(script)  # restored


def test_anekit_trace_is_exported_lazily() -> None:
    assert anekit.trace is tracing.trace


def test_the_command_needs_macos_and_says_so(tmp_path, capsys) -> None:
    ok, reason = ane.available()
    if ok:
        pytest.skip("this machine has the framework")
    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    assert cli.main(["trace", "--", "python", str(script)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("anekit trace: error: ") and "needs macOS" in err and reason in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "expected the command to trace after --"),
        (["--", "bash", "x.sh"], "expected a Python command after --"),
        (["--", "python"], "expected a script or -m module"),
        (["--", "python", "-c", "1"], "interpreter option '-c' is not passed through"),
        (["--", "python", "missing.py"], "missing.py: no such script"),
    ],
)
def test_a_bad_command_is_a_usage_error(argv, message, capsys) -> None:
    assert cli.main(["trace", *argv]) == 2
    assert message in capsys.readouterr().err
