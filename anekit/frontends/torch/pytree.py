"""Names for a model's inputs and outputs from their pytree paths.

A model returns a tensor, or a pytree of them: a ``ModelOutput``, a dict, a (named) tuple,
nested. Each leaf is named after its path: ``logits``, ``hidden_states_0``,
``output_1_key``; a lone tensor is ``output``. The same names serve the exported graph
(its ``out_spec``) and the eager module's result, so the fidelity check pairs them by name.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch.utils import _pytree

from anekit.errors import ConversionError

PathPart = str | int


def leaf_paths(spec: _pytree.TreeSpec) -> list[tuple[PathPart, ...]]:
    """Each leaf's path in ``spec``: keys (dicts, ModelOutput, namedtuple fields) or positions."""
    if spec.is_leaf():
        return [()]
    children = list(spec.children())
    keys = _keys(spec, len(children))
    return [(key, *rest) for key, child in zip(keys, children) for rest in leaf_paths(child)]


def _keys(spec: _pytree.TreeSpec, count: int) -> list[PathPart]:
    context = spec.context
    if isinstance(context, (list, tuple)) and len(context) == count:
        if all(isinstance(k, str) for k in context):
            return list(context)
    fields = getattr(spec.type, "_fields", None)
    if isinstance(fields, tuple) and len(fields) == count:
        return list(fields)
    return list(range(count))


def path_name(path: tuple[PathPart, ...]) -> str:
    """``("hidden_states", 0)`` -> ``hidden_states_0``; a path starting at a position gets
    ``output_``; the empty path (a lone tensor) is ``output``."""
    if not path:
        return "output"
    parts = [re.sub(r"\W", "_", str(p)) for p in path]
    name = "_".join(parts)
    return name if isinstance(path[0], str) and re.match(r"[A-Za-z_]", name) else f"output_{name}"


def leaf_names(spec: _pytree.TreeSpec) -> list[str]:
    """The unique name of each leaf of ``spec``, in flattening order."""
    names: list[str] = []
    for path in leaf_paths(spec):
        name = base = path_name(path)
        n = 1
        while name in names:  # two paths spelled alike (``a_b`` and ``a``/``b``): number them
            name, n = f"{base}_{n}", n + 1
        names.append(name)
    return names


def named_tensors(result: Any) -> dict[str, torch.Tensor]:
    """An eager result's tensors by leaf name (the names the converted program uses)."""
    leaves, spec = _pytree.tree_flatten(result)
    return {
        name: leaf for name, leaf in zip(leaf_names(spec), leaves) if isinstance(leaf, torch.Tensor)
    }


def select(names: list[str], wanted: Any) -> list[str]:
    """The names ``outputs=`` keeps (all for None), in the model's order; unknown ones fail."""
    if wanted is None:
        return list(names)
    wanted = [wanted] if isinstance(wanted, str) else list(wanted)
    unknown = [w for w in wanted if w not in names]
    if unknown or not wanted:
        raise ConversionError(
            f"outputs={wanted!r}: the model's outputs are {', '.join(names)}"
            + (f"; no output {unknown[0]!r}" if unknown else "")
        )
    return [n for n in names if n in wanted]
