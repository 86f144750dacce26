"""``compile_cache``: the first compile against a cache hit, and what the cache holds.

ANE_NOTES 2.1 and 7 give 20-40 ms for a first compile and about 0 for a cache hit (the
compiler caches E5 bundles under ``~/Library/Caches/<app>/com.apple.e5rt.e5bundlecache``).
This compiles a program no earlier run has compiled (its constant comes from the time),
times ``compileWithQoS:`` and ``loadWithQoS:``, then does the same with a second model
object of the identical program, and lists the files that appeared in the cache and in
the work directory. ``_ANEClient``'s cache queries are asked too where they exist.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from anekit.backends import budget
from anekit.backends.ane import dialect as dialects
from anekit.backends.ane import host
from anekit.backends.ane.inmemory import in_memory_model, workdir_files, workdir_path
from anekit.backends.ane.workdirs import WORKDIRS
from anekit.inspect.cache import default_cache_dirs
from anekit.ladder.runner import Context
from anekit.mil import Builder, Program
from anekit.probe.common import QOS, call, client, framework, has, step

MAX_LISTED = 200  # cache files listed in the report
MAX_WALKED = 100_000  # files looked at per snapshot (a huge cache is sampled, and says so)
CLIENT_QUERIES = ("compiledModelExistsFor:", "compiledModelExistsMatchingHash:")


def unique_program() -> Program:
    """``y = x * c`` with ``c`` from the clock: a program no earlier run compiled."""
    factor = 1.0 + (time.time_ns() // 1000 % 1000) / 1024  # exact in fp16
    b = Builder()
    x = b.input("x", (1, 16, 1, 32), "fp16")
    b.output(b.mul(x=x, y=factor), "y")
    return b.build()


def snapshot(roots: list[Path]) -> dict[str, int]:
    """Every file under ``roots`` with its size (at most :data:`MAX_WALKED`)."""
    files: dict[str, int] = {}
    for root in roots:
        for path in root.rglob("*"):
            if len(files) >= MAX_WALKED:
                return files
            if path.is_file():
                files[str(path)] = path.stat().st_size
    return files


def compile_cache(ctx: Context) -> None:
    """First compile vs cache hit; which files the cache and the work directory hold."""
    fw = framework(ctx)
    roots = [Path(p) for p in ctx.options.get("cache_dirs", [])] or default_cache_dirs()
    ctx.observe("cache_dirs", [str(r) for r in roots])
    program = unique_program()
    dialect = dialects.choose(None, dialects.host_chip(), host.macos_version())
    text, weights = program.to_text(dialect), program.weight_files()
    before = snapshot(roots)
    ctx.observe("first", _compile_once(ctx, fw, "first", text, weights))
    after = snapshot(roots)
    new = {k: v for k, v in after.items() if k not in before}
    ctx.observe("new_cache_files", dict(sorted(new.items())[:MAX_LISTED]))
    ctx.observe("new_cache_file_count", len(new))
    ctx.observe("second", _compile_once(ctx, fw, "second", text, weights))
    ctx.observe("cache_files_after_second", len(snapshot(roots)) - len(after))


def _compile_once(
    ctx: Context, fw: Any, label: str, text: str, weights: dict[str, bytes]
) -> dict[str, Any]:
    """Descriptor, model, work directory, then timed compile and load; unload and clean up."""
    with fw.pool():
        model = in_memory_model(fw, text, weights)
    record: dict[str, Any] = {"hex": str(model.hexStringIdentifier())}
    workdir = WORKDIRS.acquire(workdir_path(fw, model), workdir_files(text, weights))
    opts = fw.empty_options()
    try:
        budget.BUDGET.charge()
        for phase, selector, args in (
            ("compile", "compileWithQoS:options:error:", (QOS, opts)),
            ("load", "loadWithQoS:options:error:", (QOS, opts)),
        ):
            start = time.perf_counter()
            with fw.pool():
                outcome = step(
                    ctx, f"{label}_{phase}", call, fw, "_ANEInMemoryModel", model, selector, *args
                )
            record[f"{phase}_s"] = time.perf_counter() - start
            record[f"{phase}_ok"] = outcome is True
        record["workdir_files"] = sorted(
            str(p.relative_to(workdir)) for p in workdir.rglob("*") if p.is_file()
        )
        _client_queries(ctx, fw, label, model)
        if record["load_ok"]:
            step(
                ctx,
                f"{label}_unload",
                call,
                fw,
                "_ANEInMemoryModel",
                model,
                "unloadWithQoS:error:",
                QOS,
            )
    finally:
        WORKDIRS.release(workdir)
    return record


def _client_queries(ctx: Context, fw: Any, label: str, model: Any) -> None:
    """``_ANEClient``'s compiled-model queries, where the client has them."""
    inner = getattr(model, "model", lambda: None)()
    for selector in CLIENT_QUERIES:
        if inner is None or not has(fw, "_ANEClient", "-", selector):
            continue
        argument = inner if selector.endswith("For:") else model.hexStringIdentifier()
        step(
            ctx,
            f"{label}_{selector.rstrip(':')}",
            lambda s=selector, a=argument: bool(getattr(client(fw), s.replace(":", "_"))(a)),
        )


def compile_cache_headline(seen: dict[str, Any]) -> str:
    """The finding in one line (``anekit probe``'s summary)."""
    first, second = seen["first"], seen["second"]
    return (
        f"first compile {first['compile_s'] * 1e3:.1f} ms, second {second['compile_s'] * 1e3:.1f}"
        f" ms; {seen['new_cache_file_count']} new cache files"
    )
