"""What the convert pipeline chose is recorded in the program (``buildInfo``), survives a
save and a load in both dialects, and sorts the checker's findings into advice and facts;
a program the pipeline did not make keeps every finding as advice."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit import passes as P
from anekit.passes import provenance


def lookup_and_mask() -> mil.Program:
    """An embedding lookup, a mask made with logical_and, and a last axis of 3 inside."""
    b = mil.Builder()
    ids = b.input("ids", (1, 40), "int32")
    keep = b.input("keep", (1, 40), "bool")
    rows = b.gather(x=b.weight("table", np.ones((50, 64), np.float32)), indices=ids, axis=0)
    small = b.slice_by_size(x=rows, begin=[0, 0, 0], size=[1, 40, 3])
    both = b.logical_and(x=keep, y=b.const(np.ones((1, 40), bool)))
    gate = b.select(cond=b.expand_dims(x=both, axes=[-1]), a=small, b=np.float32(0))
    b.output(b.reduce_sum(x=gate, axes=[1, 2], keep_dims=False, name="out"))
    return b.build()


@pytest.mark.parametrize("chip", ["m1", "m4"])
def test_the_record_names_what_the_passes_made_and_travels_with_the_model(chip, tmp_path) -> None:
    prog = P.convert(lookup_and_mask(), None, chip)
    names, flags = provenance.recorded(prog)
    assert "layouts" in flags
    assert {"lookup", "mask"} <= set(names.values())
    prog.save(tmp_path / "m", dialect=P.save_dialect(prog))
    loaded = mil.load(tmp_path / "m")
    assert provenance.recorded(loaded) == (names, flags)
    advice, facts = provenance.split(loaded, anekit.check(loaded, chip=chip))
    assert {f.diagnostic.rule for f in facts} == {"op-unverified", "last-axis-padding"}
    assert not any(d.rule == "op-unverified" for d in advice)
    assert all("converter:" in f.format("m") and "put a long axis" not in f.format("m")
               for f in facts)  # fmt: skip


def test_without_a_record_every_finding_is_advice_and_a_foreign_value_is_ignored() -> None:
    prog = lookup_and_mask()
    found = anekit.check(prog, chip="m4")
    assert provenance.split(prog, found) == (found, [])
    prog.build_info = {**prog.build_info, provenance.KEY: "v0;layouts"}
    assert provenance.recorded(prog) is None
    assert provenance.split(prog, found) == (found, [])


def test_the_users_own_comparisons_stay_advice() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 64), "fp16")
    hit = b.equal(x=x, y=np.float16(0), name="users_eq")
    b.output(b.select(cond=hit, a=x, b=np.float16(1), name="out"))
    prog = P.convert(b.build(), None, "m4")
    names, _ = provenance.recorded(prog)
    assert "users_eq" not in names
    advice, _ = provenance.split(prog, anekit.check(prog, chip="m4"))
    assert "users_eq" in {d.name for d in advice if d.rule == "op-unverified"}


def test_a_front_ends_gelu_spelling_is_recorded_and_kept_through_the_passes() -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU())
    prog = anekit.from_torch(model, (torch.randn(2, 8),), chip="m4")
    names, flags = provenance.recorded(prog)
    gelus = [op.name for op in prog.main.ops if op.op_type == "gelu"]
    assert gelus and all(names[n] == "gelu" for n in gelus) and "layouts" in flags
    advice, facts = provenance.split(prog, anekit.check(prog, chip="m4"))
    assert "op-unverified" not in {d.rule for d in advice}
    assert any("MIL gelu" in f.reason for f in facts)
