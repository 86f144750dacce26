"""The trait vocabulary: declared once, enforced by register(), and every trait really read."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from anekit.mil.ops import registry, traits
from anekit.mil.ops.registry import OpDef, param

ROOT = Path(__file__).resolve().parent.parent


def _source(module: str) -> ast.Module:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"reader {module} does not exist"
    return ast.parse(Path(spec.origin).read_text(encoding="utf-8"))


def _trait_names_used(tree: ast.Module) -> set[str]:
    """Names of the traits module a source uses: imported by name and used, or as traits.X."""
    imported = {
        alias.asname or alias.name: alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "anekit.mil.ops.traits"
        for alias in node.names
    }
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in imported:
            used.add(imported[node.id])
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "traits"
        ):
            used.add(node.attr)
    return used


def _names_for(trait: str) -> set[str]:
    """The traits-module names that stand for ``trait``: its constant and every group holding it."""
    return {
        name
        for name, value in vars(traits).items()
        if name.isupper() and (value == trait or (isinstance(value, frozenset) and trait in value))
    }


def test_every_op_uses_only_declared_traits() -> None:
    for opdef in registry.all_ops():
        assert opdef.traits <= traits.VOCABULARY.keys(), opdef.name


def test_register_rejects_an_unknown_trait() -> None:
    bad = OpDef(name="no_such_op", params=(param("x"),), infer=lambda a: a.x.type)
    with pytest.raises(ValueError, match=r"unknown traits \['sparkly'\].*known: .*const"):
        registry.register(bad.evolve(traits=frozenset({"sparkly", traits.EXACT})))
    assert "no_such_op" not in registry.names()


def test_every_trait_has_a_constant_a_meaning_and_a_reader() -> None:
    for name, trait in traits.VOCABULARY.items():
        assert name.upper() in vars(traits) and getattr(traits, name.upper()) == name
        assert trait.meaning and trait.readers, name


@pytest.mark.parametrize("trait", sorted(traits.VOCABULARY))
def test_each_declared_reader_reads_its_trait(trait: str) -> None:
    wanted = _names_for(trait)
    for module in traits.VOCABULARY[trait].readers:
        used = _trait_names_used(_source(module))
        assert used & wanted, f"{module} is listed as reading {trait!r} but uses none of {wanted}"


def test_every_op_declaring_a_trait_is_read_somewhere() -> None:
    used = {
        trait
        for t in traits.VOCABULARY.values()
        for module in t.readers
        for name in _trait_names_used(_source(module))
        for trait in traits.VOCABULARY
        if name in _names_for(trait)
    }
    assert used == traits.VOCABULARY.keys()


def _string_trait_tests(tree: ast.Module) -> list[int]:
    """Lines that compare ``.traits`` with a string literal instead of a declared constant."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Compare, ast.BinOp)):
            continue
        parts = (
            [node.left, *node.comparators]
            if isinstance(node, ast.Compare)
            else [node.left, node.right]
        )
        touches_traits = any(isinstance(p, ast.Attribute) and p.attr == "traits" for p in parts)
        literals = [
            c
            for p in parts
            for c in ast.walk(p)
            if isinstance(c, ast.Constant) and isinstance(c.value, str)
        ]
        if touches_traits and literals:
            lines.append(node.lineno)
    return lines


def test_tools_ask_for_traits_by_constant_not_by_string() -> None:
    offenders = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "anekit").rglob("*.py"))
        if (lines := _string_trait_tests(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert offenders == {}


def test_string_trait_tests_are_detected() -> None:
    tree = ast.parse('if "exact" in op.opdef.traits: pass\nif op.opdef.traits & {"const"}: pass\n')
    assert _string_trait_tests(tree) == [1, 2]


def test_sort_like_ops_declare_exact() -> None:
    # topk's values and argsort's indices are never rounded again by the reference backend
    for name in ("topk", "argsort"):
        assert traits.EXACT in registry.get(name).traits, name
    # a running sum makes new values: no trait of the vocabulary applies to it
    assert registry.get("cumsum").traits == frozenset()
