"""The ANE experiments of ``doctor --ladder``: one function per rung, each recording what it saw.

Every function takes a :class:`~anekit.ladder.runner.Context` and runs in its own
process on a Mac (``ladder.py`` declares the order and prerequisites). They use the
framework through the backend's one seam, ``framework.load()``, or a stand-in put in
``ctx.resources["framework"]`` (the tests do that). A function raises to fail its
rung; what is merely learned (which layout or binding rule held) is observed.
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

import numpy as np

from anekit.backends import budget
from anekit.backends.ane import dialect as dialects
from anekit.backends.ane import framework, host
from anekit.backends.ane.inmemory import (
    InMemoryModel,
    in_memory_model,
    workdir_files,
    workdir_path,
)
from anekit.backends.ane.iosurface import Surface
from anekit.backends.ane.kernel import compile_step
from anekit.backends.ane.layout import computed, parse_attributes
from anekit.backends.ane.workdirs import WORKDIRS
from anekit.backends.base import TensorSpec
from anekit.errors import CompileError, EvaluationError
from anekit.fp16 import round_fp16_away
from anekit.ladder import cases
from anekit.ladder.runner import Context, describe_exception
from anekit.mil import Builder, Program
from anekit.mil.types import DType

LAYOUTS_TRIED = ("auto", "dense", "pad64", "pad128")
BINDINGS_TRIED = ("symbols", "signature", "alphabetical", "size")
QOS = 21
MAX_BUDGET_COMPILES = 1000


def _fw(ctx: Context) -> Any:
    fw = ctx.resources.get("framework")
    return fw if fw is not None else framework.load()


def _compile(ctx: Context, program: Program, **options: Any) -> Any:
    from anekit.backends import ane

    return ane.compile(program, framework=_fw(ctx), **options)


def _attempt(ctx: Context, case: cases.Case, **options: Any) -> dict[str, Any]:
    """Compile and evaluate ``case``; the comparison, or the error, as a record."""
    try:
        with _compile(ctx, case.program, **options) as k:
            record = cases.compare(case, k(**case.inputs))
            record["layout"] = k.layout.as_dict()
            return record
    except Exception as e:  # any failure is this variant's record; the others still run
        return {"match": False, "error": describe_exception(e)}


OP_NAME = "scale_op"  # the load rung's output op: its name differs from its variable's


def weighted_program(weight: float) -> Program:
    """``y = x * w`` with ``w`` in its own weight file, the op named ``scale_op``.

    The op's ``name`` attribute differs from its output variable ``y``, so the ``load``
    rung's dump of ``modelAttributes`` shows which of the two the compiler binds by.
    """
    b = Builder()
    x = b.input("x", (1, 16, 1, 32), "fp16")
    w = b.weight("w", np.full((1, 16, 1, 32), weight, np.float16))
    y = b.output(b.mul(x=x, y=w), "y")
    y.producer.attrs["name"] = OP_NAME
    return b.build()


def _host_dialect() -> str:
    return dialects.choose(None, dialects.host_chip(), host.macos_version())


# -- the Objective-C side ---------------------------------------------------------------------------
def imports(ctx: Context) -> None:
    """objc, Foundation and IOSurface import (PyObjC core, Cocoa and IOSurface wrappers)."""
    import importlib

    for name in ("objc", "Foundation", "IOSurface"):
        module = importlib.import_module(name)
        ctx.observe(name, getattr(module, "__file__", None))
    import objc

    ctx.observe("pyobjc", objc.__version__)


def bundle(ctx: Context) -> None:
    """``objc.loadBundle`` of the framework; which classes it defines."""
    import objc

    objc.loadBundle(
        "AppleNeuralEngine", {}, bundle_path=framework.FRAMEWORK_PATH, scan_classes=False
    )
    found = {}
    for name in sorted(framework.SELECTORS):
        try:
            objc.lookUpClass(name)
            found[name] = True
        except objc.nosuchclass_error:
            found[name] = False
    ctx.observe("classes", found)
    missing = [n for n in framework.REQUIRED_CLASSES if not found.get(n)]
    if missing:
        raise CompileError(f"the framework lacks {', '.join(missing)}")


def device_info(ctx: Context) -> None:
    """What ``_ANEDeviceInfo`` reports; fails without an ANE or on a virtual machine."""
    info = ctx.observe("device_info", framework.device_info(_fw(ctx)))
    if info.get("isVirtualMachine"):
        raise EvaluationError("_ANEDeviceInfo reports a virtual machine")
    if not info.get("hasANE"):
        raise EvaluationError(f"_ANEDeviceInfo reports no ANE (hasANE = {info.get('hasANE')})")


def selectors(ctx: Context) -> None:
    """Every class and selector the backend sends, with its runtime type encoding."""
    fw = _fw(ctx)
    rows, missing, client_missing = [], [], []
    for cls_name, sels in framework.SELECTORS.items():
        encodings = {(kind, sel): enc for kind, sel, enc in fw.methods(cls_name)}
        for kind, sel in sels:
            encoding = encodings.get((kind, sel))
            found = encoding is not None or framework.responds(fw, cls_name, kind, sel)
            optional = sel in framework.OPTIONAL_SELECTORS
            client = framework.is_client_path(cls_name, sel)
            rows.append(
                {
                    "class": cls_name,
                    "selector": f"{kind}{sel}",
                    "found": found,
                    "encoding": encoding,
                    "optional": optional,
                    "client_path_only": client,
                }
            )
            if not found and not optional:
                (client_missing if client else missing).append(f"{kind}[{cls_name} {sel}]")
    ctx.observe("selectors", rows)
    ctx.observe("client_path_missing", client_missing)  # costs compile_mlmodelc only
    if missing:
        raise CompileError(f"missing selectors of the in-memory path: {', '.join(missing)}")


def metadata(ctx: Context) -> None:
    """The NSError** of every error selector is an out-parameter for PyObjC."""
    fw = _fw(ctx)  # loading the framework registers the metadata
    rows, wrong = [], []
    for cls_name, sels in framework.ERROR_SELECTORS.items():
        for sel in sels:
            row: dict[str, Any] = {"class": cls_name, "selector": sel}
            try:
                meta = fw.selector_metadata(cls_name, sel)
                arg = meta["arguments"][sel.count(":") + 1]
                row.update(
                    type=_text(arg.get("type")),
                    retval=_text(meta["retval"].get("type")),
                    out_parameter=framework.is_out_parameter(arg),
                )
            except Exception as e:  # a missing class or selector is this row's answer
                row.update(out_parameter=False, error=f"{type(e).__name__}: {e}")
            rows.append(row)
            if not row["out_parameter"] and not framework.is_client_path(cls_name, sel):
                wrong.append(f"{cls_name} {sel} ({row.get('type') or row.get('error')})")
    ctx.observe("metadata", rows)
    if wrong:
        raise CompileError(f"NSError** is not an out-parameter of {', '.join(wrong)}")


def _text(value: Any) -> Any:
    """A type encoding as text for the report (PyObjC gives bytes)."""
    return value.decode("ascii", "replace") if isinstance(value, bytes) else value


def iosurface(ctx: Context) -> None:
    """Create a padded surface, lock it, write through its base address, read back."""
    fw = _fw(ctx)
    lay = computed(TensorSpec("probe", (1, 4, 1, 3), DType.fp16), 64, "probe")
    ctx.observe("properties", lay.surface_properties())
    with fw.pool():
        surface = Surface.create(fw, lay)
    view = surface.view((1, 4, 1, 3), np.dtype(np.float16))
    pattern = cases.quarters((1, 4, 1, 3), np.float16)
    view[...] = pattern
    surface.unlock()
    surface.lock()
    ctx.observe("read_back_after_relock", bool(np.array_equal(view, pattern)))
    ctx.observe("strides", list(view.strides))
    surface.unlock()
    if not np.array_equal(view, pattern):
        raise EvaluationError("IOSurface memory did not read back what was written")


# -- compile and load -----------------------------------------------------------------------------------
def _model(fw: Any, program: Program, dialect: str) -> tuple[Any, str, dict[str, bytes]]:
    text, weights = program.to_text(dialect), program.weight_files()
    with fw.pool():
        return in_memory_model(fw, text, weights), text, weights


def descriptor(ctx: Context) -> None:
    """Descriptor and model build; is the hex identifier stable, and does it see the weights?"""
    fw, dialect = _fw(ctx), ctx.observe("dialect", _host_dialect())
    hexes = [
        str(_model(fw, weighted_program(w), dialect)[0].hexStringIdentifier())
        for w in (0.5, 0.5, 0.25)
    ]
    ctx.observe("hex", hexes[0])
    ctx.observe("same_program_same_hex", hexes[0] == hexes[1])
    covers = ctx.observe("hex_changes_with_weight_bytes_only", hexes[0] != hexes[2])
    # which work-directory policy the evidence needs (workdir_weights=, inmemory.py)
    ctx.observe("workdir_weights", "either" if covers else "rewrite (verify would refuse)")


def compile_rung(ctx: Context) -> None:
    """Compile a small program; list what is in its temporary directory afterwards."""
    fw = _fw(ctx)
    model, text, weights = _model(fw, weighted_program(0.5), _host_dialect())
    workdir = WORKDIRS.acquire(workdir_path(fw, model), workdir_files(text, weights))
    try:
        budget.BUDGET.charge()
        start = time.perf_counter()
        with fw.pool():
            result = model.compileWithQoS_options_error_(QOS, fw.empty_options(), None)
        ctx.observe("compile_s", time.perf_counter() - start)
        ctx.observe(
            "files_after",
            {
                str(p.relative_to(workdir)): p.stat().st_size
                for p in sorted(workdir.rglob("*"))
                if p.is_file()
            },
        )
        compile_step(result, "compile")
    finally:
        WORKDIRS.release(workdir)


def load(ctx: Context) -> None:
    """Compile and load; dump ``modelAttributes`` (of the inner model and of the model)."""
    fw = _fw(ctx)
    program = weighted_program(0.5)
    text = program.to_text(_host_dialect())
    loaded = InMemoryModel(text, program.weight_files(), fw, qos=QOS)
    try:
        with fw.pool():
            inner = loaded.inner_models()
            for label, obj in (
                ("inner_model_attributes", inner[0] if inner else None),
                ("model_attributes", loaded.model),
            ):
                getter = getattr(obj, "modelAttributes", None)
                ctx.observe(label, framework.plain(getter()) if getter is not None else None)
        try:
            io = parse_attributes(loaded.attributes())
            ctx.observe(
                "parsed",
                {
                    "inputs": [vars(e) for e in io.inputs],
                    "outputs": [vars(e) for e in io.outputs],
                    "input_symbols": io.input_symbols,
                    "output_symbols": io.output_symbols,
                },
            )
            ctx.observe("outputs_named_by", _named_by(io.outputs, io.output_symbols))
        except CompileError as e:
            ctx.observe("parsed", f"unusable: {e}")
    finally:
        loaded.unload()


def _named_by(outputs: Any, symbols: Any) -> str:
    """Whether the compiled model names the output by its variable (``y``) or its op's name."""
    names = {str(n) for e in outputs for n in (e.name, e.symbol)} | {str(s) for s in symbols or ()}
    by = [label for label, name in (("variable", "y"), ("op name", OP_NAME)) if name in names]
    return " and ".join(by) if by else f"neither: {sorted(names)}"


# -- evaluation ---------------------------------------------------------------------------------------
def eval_aligned(ctx: Context) -> None:
    """Cases with 64-byte-multiple rows, through ``k(...)`` and through the buffers."""
    failed = []
    for case in cases.aligned_cases():
        with _compile(ctx, case.program) as k:
            record = cases.compare(case, k(**case.inputs))
            for name, value in case.inputs.items():
                k.input_buffer(name)[...] = value
            k.run()
            buffers = cases.compare(case, {o.name: k.output_buffer(o.name) for o in k.outputs})
            record["buffers_match"] = buffers["match"]
            record["layout"] = k.layout.as_dict()
        ctx.observe(case.name, record)
        if not (record["match"] and record["buffers_match"]):
            failed.append(case.name)
    if failed:
        raise EvaluationError(f"wrong numbers for {', '.join(failed)}")


def eval_unaligned(ctx: Context) -> None:
    """Each unaligned case under every layout rule: which give the right numbers?"""
    held = {layout: True for layout in LAYOUTS_TRIED}
    for case in cases.unaligned_cases():
        records = {layout: _attempt(ctx, case, layout=layout) for layout in LAYOUTS_TRIED}
        for layout, record in records.items():
            held[layout] = held[layout] and record["match"]
        ctx.observe(case.name, records)
    sources = set()
    for c in cases.unaligned_cases():
        source = ctx.observed[c.name]["auto"].get("layout", {}).get("inputs", {}).get("x", {})
        sources.add(str(source.get("source", "none")).split("; device")[0])
    ctx.observe("layouts_that_hold", [layout for layout, ok in held.items() if ok])
    ctx.observe("auto_sources", sorted(sources))
    if not held["auto"]:
        raise EvaluationError("the default layout gave wrong numbers for an unaligned shape")


def binding(ctx: Context) -> None:
    """Three inputs and outputs in differing orders: which binding rules give the right numbers?"""
    case = cases.binding_case()
    raw = dict(pack_inputs=False, canonical_io=False)
    records = {"canonical": _attempt(ctx, case), "packed": _attempt(ctx, case, canonical_io=False)}
    for rule in BINDINGS_TRIED:
        records[rule] = _attempt(ctx, case, binding=rule, **raw)
    for label, record in records.items():
        ctx.observe(label, record)
    ctx.observe("rules_that_hold", [r for r in BINDINGS_TRIED if records[r]["match"]])
    if not records["canonical"]["match"]:
        raise EvaluationError("anekit's default binding (canonical names) gave wrong numbers")


def shared_buffers(ctx: Context) -> None:
    """Buffer sets: one surface in two kernels' requests, and a request of 14 separate inputs."""
    case = cases.affine((1, 64, 1, 64), "fp16")
    separate = dict(pack_inputs=False)  # a packed input cannot be bound on its own
    with (
        _compile(ctx, case.program, **separate) as first,
        _compile(ctx, case.program, **separate) as second,
    ):
        head = first.buffers()
        tail = second.buffers({"x": head.buffer("y", output=True)})  # the output, no copy
        head.write("x", case.inputs["x"])
        head.run()
        tail.run()
        want = case.expected["y"] * np.float16(2) + np.float16(1)
        chain = cases.Case("chained", case.program, case.inputs, {"y": want})
        record = cases.compare(chain, {"y": np.array(tail.output("y"))})
        record["one_surface"] = tail.buffer("x").memory is head.buffer("y", output=True).memory
    ctx.observe("chained", record)
    wide = cases.many_inputs()
    with _compile(ctx, wide.program, **separate) as k:
        many = cases.compare(wide, k(**wide.inputs))
        many["request_inputs"] = len(k.device_program.main.inputs)
    ctx.observe("many_inputs", many)
    failed = [name for name, r in (("chained", record), ("many_inputs", many)) if not r["match"]]
    if failed:
        raise EvaluationError(f"wrong numbers with shared buffers: {', '.join(failed)}")


def dialect_rung(ctx: Context) -> None:
    """``ios18`` and ``legacy`` on the same program: which compile and run?"""
    case = cases.affine((1, 64, 1, 64), "fp16")
    works = []
    for name in ("ios18", "legacy"):
        record = _attempt(ctx, case, dialect=name)
        ctx.observe(name, record)
        if record["match"]:
            works.append(name)
    ctx.observe("dialects_that_work", works)
    ctx.observe("host_default", _host_dialect())
    if _host_dialect() not in works:
        raise EvaluationError(f"the default dialect {_host_dialect()} does not work here")


def threads(ctx: Context) -> None:
    """2 and 8 threads evaluating one model with different inputs: all right?"""
    case = cases.affine((1, 64, 1, 64), "fp16")
    per_thread = int(ctx.options.get("evaluations_per_thread", 25))
    with _compile(ctx, case.program) as k:
        for n in (2, 8):
            errors: list[str] = []

            def work(seed: int, errors: list[str] = errors) -> None:
                for i in range(per_thread):
                    x = cases.quarters((1, 64, 1, 64), np.float16, seed * 1000 + i)
                    want = x * np.float16(2) + np.float16(1)
                    try:
                        if not np.array_equal(k(x=x)["y"], want):
                            errors.append(f"thread {seed} evaluation {i}: wrong numbers")
                    except Exception as e:  # objc.error too: a thread must not swallow it
                        errors.append(f"thread {seed} evaluation {i}: {type(e).__name__}: {e}")

            start = time.perf_counter()
            pool = [threading.Thread(target=work, args=(s,)) for s in range(n)]
            [t.start() for t in pool]
            [t.join() for t in pool]
            ctx.observe(
                f"threads_{n}",
                {
                    "seconds": time.perf_counter() - start,
                    "errors": errors[:20],
                    "error_count": len(errors),
                },
            )
            if errors:
                raise EvaluationError(f"{len(errors)} errors with {n} threads: {errors[0]}")


def stats(ctx: Context) -> None:
    """Hardware time without stats, with a stats object but no counter mask, and with both."""
    case = cases.affine((1, 64, 1, 64), "fp16")
    for label, options in (
        ("stats_off", {}),
        ("stats_without_mask", {"stats": True, "stats_mask": 0}),
        ("stats_with_mask", {"stats": True}),
        ("stats_attached_only", {"stats": True, "stats_read": "attached"}),
    ):
        with _compile(ctx, case.program, **options) as k:
            k(**case.inputs)
            ctx.observe(label, k.last_stats())
    found = ctx.observed["stats_with_mask"]
    ctx.observe("read_from", found["read_from"] if found else "nowhere: no hardware time reported")


def _rss_kb() -> int | None:
    """This process's resident set size from ``ps`` (kilobytes)."""
    import os

    try:
        out = subprocess.run(
            ["ps", "-o", "rss=", "-p", str(os.getpid())],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return int(out.stdout.strip())
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def memory(ctx: Context) -> None:
    """Resident memory before and after many evaluations, with and without pools."""
    case = cases.affine((1, 64, 1, 64), "fp16")
    n = int(ctx.options.get("evaluations", 2000))
    for pools in (True, False):
        with _compile(ctx, case.program, autorelease=pools) as k:
            for _ in range(10):
                k(**case.inputs)
            before = _rss_kb()
            for _ in range(n):
                k(**case.inputs)
            after = _rss_kb()
        growth = None if before is None or after is None else after - before
        ctx.observe(
            f"pools_{'on' if pools else 'off'}",
            {"evaluations": n, "rss_before_kb": before, "growth_kb": growth},
        )


def unload(ctx: Context) -> None:
    """Close a kernel: unloaded, its directory gone, its surfaces unlocked; compile again."""
    case = cases.affine((1, 64, 1, 64), "fp16")
    k = _compile(ctx, case.program)
    workdir, surfaces = k.workdir, k.surfaces
    k.close()
    ctx.observe("workdir_left", workdir.exists())
    ctx.observe("markers_left", sorted(p.name for p in workdir.parent.glob(workdir.name + ".*")))
    ctx.observe("surfaces_still_locked", sum(s.locked for s in surfaces))
    again = ctx.observe("compile_again", _attempt(ctx, case))
    if workdir.exists() or not again["match"]:
        raise EvaluationError("close left its work directory, or a second compile failed")


def worker(ctx: Context) -> None:
    """An isolated kernel: compiled and run in a worker process on the ANE."""
    import anekit

    case = cases.affine((1, 64, 1, 64), "fp16")
    backend = ctx.options.get("worker_backend", "ane")  # the tests host the reference backend
    with anekit.compile(case.program, backend=backend, isolate=True, timeout=60.0) as k:
        record = cases.compare(case, k(**case.inputs))
        record["worker_pid"] = k.worker_pid
        record["worker_layout"] = k.worker_layout
    ctx.observe("isolated", record)
    if not record["match"]:
        raise EvaluationError("the isolated kernel gave wrong numbers")


class _Unlimited(budget.CompileBudget):
    """A count without a limit: the budget rung measures the real one."""

    def __init__(self) -> None:
        super().__init__(1)
        self.limit = MAX_BUDGET_COMPILES + 1


def _rounded_product(y: np.ndarray, x: np.ndarray, factor: float) -> bool:
    """Whether ``y`` is ``x * factor`` stored in fp16, ties to even or away from zero.

    The engine's tie rule is an inference (docs/numerics.md, N4): either is a right answer.
    """
    exact = x.astype(np.float32) * np.float32(factor)
    even, away = exact.astype(np.float16), round_fp16_away(exact).astype(np.float16)
    return bool(np.all((y == even) | (y == away)))


def compile_budget(ctx: Context) -> None:
    """Compile distinct programs in this process until the framework fails; record when."""
    budget.BUDGET = _Unlimited()
    case = cases.affine((1, 16, 1, 32), "fp16")
    x = case.inputs["x"]
    for i in range(int(ctx.options.get("max_compiles", MAX_BUDGET_COMPILES))):
        b = Builder()
        xi = b.input("x", (1, 16, 1, 32), "fp16")
        factor = 1.0 + i / 1024  # exact in fp16: distinct programs, checkable results
        b.output(b.mul(x=xi, y=factor), "y")
        try:
            with _compile(ctx, b.build(), check=False) as k:
                right = _rounded_product(k(x=x)["y"], x, factor)
        except Exception as e:  # whatever the framework raises ends the count
            ctx.observe("first_failure", {"compile": i + 1, "error": describe_exception(e)})
            break
        ctx.observe("compiles_that_worked", i + 1)
        if not right:
            ctx.observe("first_failure", {"compile": i + 1, "error": "wrong numbers (silent)"})
            break
