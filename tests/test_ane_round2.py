"""The second audit's fixes to the ANE backend, driven through the PyObjC stand-in.

Each hypothesis is behind a switch whose default is what a hardware-tested client does;
these tests show both readings on a stand-in that behaves each way. They prove our
side of the contract only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from anekit import mil
from anekit.backends.ane import compile as ane_compile
from anekit.errors import CompileError, EvaluationError
from anekit.mil.rewrite import rename_io
from tests.ane_fake import FakeFramework, FakeObjCError
from tests.ane_fixtures import fresh


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeFramework:
    return fresh(tmp_path, monkeypatch)


def two_outputs() -> mil.Program:
    """Two outputs whose op names sort the other way round from their canonical names."""
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 32), "fp16")
    big = b.output(b.concat(values=(x, x), axis=3), "big")
    small = b.output(b.mul(x=x, y=3.0), "small")
    big.producer.attrs["name"], small.producer.attrs["name"] = "z_op", "a_op"
    return b.build()


X = (np.arange(128) % 16 / 4).astype(np.float16).reshape(1, 4, 1, 32)


def test_rename_io_renames_the_producing_op_with_its_variable() -> None:
    program = two_outputs()
    names = {"big": "o0_big", "small": "o1_small"}
    matched = rename_io(program, {}, names).to_text()
    assert "o0_big = concat(" in matched and 'name = string("o0_big")' in matched
    assert 'name = string("z_op")' not in matched
    kept = rename_io(program, {}, names, op_names="keep").to_text()
    assert 'name = string("z_op")' in kept
    with pytest.raises(ValueError, match="op_names must be one of"):
        rename_io(program, {}, names, op_names="sometimes")


@pytest.mark.parametrize("named_by", ["variable", "op"])
def test_outputs_come_back_right_whichever_name_the_compiler_binds_by(fake, named_by) -> None:
    fake.outputs_named_by = named_by
    with ane_compile(two_outputs(), framework=fake) as k:
        out = k(x=X)
    np.testing.assert_array_equal(out["big"], np.concatenate([X, X], axis=3))
    np.testing.assert_array_equal(out["small"], X * np.float16(3))


def test_keeping_op_names_on_a_compiler_that_binds_by_them_is_refused_not_silent(fake) -> None:
    fake.outputs_named_by = "op"
    with pytest.raises(CompileError, match="reports outputs"):
        ane_compile(two_outputs(), framework=fake, op_names="keep")


def _raise(name: str, reason: str) -> Any:
    def send(*args: Any) -> None:
        raise FakeObjCError(name, reason)

    return send


@pytest.mark.parametrize(
    "selector, call, error",
    [
        ("evaluateWithQoS:options:request:error:", "evaluate", EvaluationError),
        ("unloadWithQoS:error:", "close", EvaluationError),
        ("loadWithQoS:options:error:", "compile", CompileError),
    ],
)
def test_objc_errors_leave_the_public_api_as_ours(fake, selector, call, error) -> None:
    program = two_outputs()
    fake.selectors[("model", selector)] = _raise("NSInternalInconsistencyException", "gone")
    with pytest.raises(error, match="raised NSInternalInconsistencyException: gone") as info:
        k = ane_compile(program, framework=fake)
        k(x=X) if call == "evaluate" else k.close()
    assert info.value.user_info["exception"] == "NSInternalInconsistencyException"


@pytest.mark.parametrize(
    "where, read, found",
    [("array", "request", "perfStatsArray[0]"), ("property", "request", "perfStats"),
     ("attached", "request", "the attached stats object"), ("array", "attached", None),
     ("attached", "attached", "the attached stats object")],
)  # fmt: skip
def test_hardware_time_is_read_where_the_switch_says(fake, where, read, found) -> None:
    fake.stats_where = where
    with ane_compile(two_outputs(), framework=fake, stats=True, stats_read=read) as k:
        k(x=X)
        stats = k.last_stats()
    if found is None:
        assert stats is None
    else:
        assert stats["read_from"] == found
        assert stats["hw_s"] == pytest.approx((23_456 if where != "attached" else 12_345) * 1e-9)
    with pytest.raises(ValueError, match="stats_read must be one of"):
        ane_compile(two_outputs(), framework=fake, stats_read="psychic")


def test_a_request_the_framework_refuses_to_validate_is_an_error_before_evaluation(fake) -> None:
    fake.request_valid = False
    with ane_compile(two_outputs(), framework=fake) as k:
        with pytest.raises(EvaluationError, match="validate"):
            k(x=X)
    assert fake.calls_to("evaluateWithQoS:options:request:error:") == []


def test_objc_msgsend_gets_the_pointer_behind_bridged_strings_and_numbers() -> None:
    """PyObjC bridges NSString/NSNumber results to str/int subclasses that ``pyobjc_id``
    refuses (a TypeError, the mutable-weights probe's "name" variant): the proxy is used."""
    import types

    from anekit.backends.ane.framework import _pointer

    class Proxy:
        def __init__(self, address: int) -> None:
            self.address = address

    def pyobjc_id(obj: object) -> int:
        if not isinstance(obj, Proxy):
            raise TypeError(f"Expecting an Objective-C object, got {type(obj).__name__}")
        return obj.address

    class Bridged(str):  # as objc.pyobjc_unicode
        def nsstring(self) -> Proxy:
            return Proxy(0x1000)

    class Number(int):  # as a bridged NSNumber
        __pyobjc_object__ = Proxy(0x2000)

    objc = types.SimpleNamespace(pyobjc_id=pyobjc_id)
    assert _pointer(objc, Bridged("main")) == 0x1000
    assert _pointer(objc, Number(0)) == 0x2000
    assert _pointer(objc, Proxy(0x3000)) == 0x3000
    with pytest.raises(TypeError):
        pyobjc_id(Bridged("main"))  # what the probe did before
