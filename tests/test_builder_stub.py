"""The checked-in Builder stub lists every registered op with its parameters."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from anekit.mil.ops import registry

ROOT = Path(__file__).resolve().parent.parent


def test_builder_stub_is_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("gen", ROOT / "tools" / "gen_builder_stub.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.STUB.read_text(encoding="utf-8") == gen.render(), (
        "anekit/mil/builder.pyi is stale: run python tools/gen_builder_stub.py"
    )


def test_stub_declares_every_op_and_parameter() -> None:
    text = (ROOT / "anekit" / "mil" / "builder.pyi").read_text(encoding="utf-8")
    for opdef in registry.all_ops():
        if opdef.name == "const":
            continue
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"def {opdef.name}("))
        for p in opdef.params:
            assert f" {p.name}: " in line, (opdef.name, p.name)
