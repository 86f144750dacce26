"""Toolchain speed: parse and print MIL text the project did not write, statements per second.

Each shape is written here as text in the style of coremltools' output (``var_N`` names,
one weight.bin holding every blob, ``op_N`` op names that differ from the value names),
not produced by anekit's printer, so no parser path fitted to our own output helps:

- ``conv chain``: 500 small convs of four widths: 3x3 ones with bias, relu and their own
  window consts, alternating with 1x1 ones that leave their parameters to the defaults;
- ``wide attention``: 4 blocks of 16 heads, every head sliced, multiplied and soft-maxed
  on its own, then concatenated and projected;
- ``legacy dialect``: a GELU MLP in program(1.0) / ios16 spelling (``tensor<int32, []>(1)``
  scalars, ``name = tensor<string, []>(...)``);
- ``inline constants``: every op takes its own distinct small inline tensor or scalar,
  written inline and as const statements, in hex and decimal floats;
- ``BLOBFILE constants``: a deep stack of linear layers whose weights are BLOBFILE consts.

The candidates run interleaved (the order rotates every round) and each figure is the
best and median of several rounds, one thread for BLAS, by wall clock (the headline) and
by this process's CPU time (``time.process_time``: the machine may be shared, and a
round that lost the CPU to another process shows as a wall-clock figure below its CPU
one). Target (issue 13): parse at least 50,000 statements/s on every shape.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from threadpoolctl import threadpool_limits

from anekit import mil
from anekit.bench.programs import TransformerShape, chained_convs, transformer
from anekit.mil import blob, reader, verify

TARGET = 50_000
HEADER = (
    '[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, '
    '{"coremltools-version", "9.0"}})]'
)
WEIGHTS = "@model_path/weights/weight.bin"


class Text:
    """A program being written as coremltools writes it: statements, weights in one file."""

    def __init__(self, legacy: bool = False) -> None:
        self.legacy = legacy
        self.lines: list[str] = []
        self.blobs: list[np.ndarray] = []
        self.n = 0
        self.rng = np.random.default_rng(0)

    def var(self) -> str:
        self.n += 1
        return f"var_{self.n}"

    def scalar(self, dtype: str, text: str) -> str:
        return f"tensor<{dtype}, []>({text})" if self.legacy else f"{dtype}({text})"

    def string(self, s: str) -> str:
        return self.scalar("string", f'"{s}"')

    def const(self, type_: str, literal: str) -> str:
        name = self.var()
        self.lines.append(
            f"            {type_} {name} = const()[name = {self.string('op_' + name[4:])}, "
            f"val = {literal}];"
        )
        return name

    def ints(self, values: list[int]) -> str:
        t = f"tensor<int32, [{len(values)}]>"
        return self.const(t, f"{t}([{', '.join(map(str, values))}])")

    def weight(self, array: np.ndarray) -> str:
        self.blobs.append(array.astype(np.float16))
        t = f"tensor<fp16, [{', '.join(map(str, array.shape))}]>"
        return self.const(t, f"{t}(BLOBFILE(path = {self.string(WEIGHTS)}, offset = {{off}}))")

    def op(self, type_: str, op: str, args: dict[str, str], suffix: str = "") -> str:
        name = f"{self.var()}{suffix}"
        text = ", ".join(f"{k} = {v}" for k, v in args.items())
        self.lines.append(f"            {type_} {name} = {op}({text})[name = {self.string(name)}];")
        return name

    def finish(self, inputs: str, output: str) -> tuple[str, dict[str, bytes]]:
        offsets = blob.layout(self.blobs) if self.blobs else []
        body, k = [], 0
        for line in self.lines:
            if "{off}" in line:
                line = line.replace("{off}", self.scalar("uint64", str(offsets[k])))
                k += 1
            body.append(line)
        version, opset = ("1.0", "ios16") if self.legacy else ("1.3", "ios18")
        header = HEADER.replace("string, string", "tensor<string, []>, tensor<string, []>")
        text = "\n".join(
            [f"program({version})", header if self.legacy else HEADER, "{",
             f"    func main<{opset}>({inputs}) {{", *body, f"    }} -> ({output});", "}", ""]
        )  # fmt: skip
        files = {WEIGHTS: blob.write_blob_file(self.blobs)} if self.blobs else {}
        return text, files


def conv_chain(convs: int = 500, spatial: int = 8) -> tuple[str, dict]:
    """Many small convs of varying widths: 3x3 ones with every parameter written out, as
    coremltools writes them, and 1x1 ones that leave their parameters to the defaults."""
    t = Text()
    widths = [16, 24, 32, 24]
    h, c_in = "x", widths[-1]
    for i in range(convs):
        c_out = widths[i % len(widths)]
        act = f"tensor<fp16, [1, {c_out}, {spatial}, {spatial}]>"
        bias = t.weight(t.rng.standard_normal(c_out) * 0.05)
        if i % 2:
            w = t.weight(t.rng.standard_normal((c_out, c_in, 1, 1)) * 0.05)
            h = t.op(act, "conv", {"bias": bias, "weight": w, "x": h}, "_cast_fp16")
        else:
            pad_type = t.const("string", t.string("custom"))
            strides = t.ints([1, 1])
            pad = t.ints([1, 1, 1, 1])
            dilations = t.ints([1, 1])
            groups = t.const("int32", t.scalar("int32", "1"))
            w = t.weight(t.rng.standard_normal((c_out, c_in, 3, 3)) * 0.05)
            args = {"bias": bias, "dilations": dilations, "groups": groups, "pad": pad,
                    "pad_type": pad_type, "strides": strides, "weight": w, "x": h}  # fmt: skip
            h = t.op(act, "relu", {"x": t.op(act, "conv", args, "_cast_fp16")}, "_cast_fp16")
        c_in = c_out
    first = f"tensor<fp16, [1, {widths[-1]}, {spatial}, {spatial}]>"
    return t.finish(f"{first} x", h)


def wide_attention(blocks: int = 4, heads: int = 16, head_dim: int = 32, seq: int = 64):
    """Attention with every head sliced and computed on its own, then concatenated and projected."""
    t = Text()
    dim = heads * head_dim
    act, head = f"tensor<fp16, [1, {dim}, {seq}]>", f"tensor<fp16, [1, {head_dim}, {seq}]>"
    h = "x"
    for _ in range(blocks):
        qkv = t.op(f"tensor<fp16, [1, {3 * dim}, {seq}]>", "matmul", {
            "transpose_x": t.const("bool", t.scalar("bool", "true")),
            "transpose_y": t.const("bool", t.scalar("bool", "false")),
            "x": t.weight(t.rng.standard_normal((1, dim, 3 * dim)) * 0.02), "y": h})  # fmt: skip
        outs = []
        for i in range(heads):
            size = t.ints([1, head_dim, seq])
            q, k, v = (
                t.op(head, "slice_by_size", {"begin": t.ints([0, j * dim + i * head_dim, 0]),
                                             "size": size, "x": qkv})
                for j in range(3)
            )  # fmt: skip
            scores = t.op(f"tensor<fp16, [1, {seq}, {seq}]>", "matmul", {
                "transpose_x": t.const("bool", t.scalar("bool", "true")),
                "transpose_y": t.const("bool", t.scalar("bool", "false")), "x": q, "y": k})  # fmt: skip
            scale = t.const("fp16", t.scalar("fp16", f"{1 / np.sqrt(head_dim):.6f}"))
            scaled = t.op(f"tensor<fp16, [1, {seq}, {seq}]>", "mul", {"x": scores, "y": scale})
            axis = t.const("int32", t.scalar("int32", "-1"))
            probs = t.op(f"tensor<fp16, [1, {seq}, {seq}]>", "softmax", {"axis": axis, "x": scaled})
            outs.append(t.op(head, "matmul", {
                "transpose_x": t.const("bool", t.scalar("bool", "false")),
                "transpose_y": t.const("bool", t.scalar("bool", "true")), "x": v, "y": probs}))  # fmt: skip
        cat = t.op(act, "concat", {"axis": t.const("int32", t.scalar("int32", "1")),
                                   "interleave": t.const("bool", t.scalar("bool", "false")),
                                   "values": f"({', '.join(outs)})"})  # fmt: skip
        h = t.op(act, "add", {"x": h, "y": cat})
    return t.finish(f"{act} x", h)


def legacy_mlp(layers: int = 300, dim: int = 64, seq: int = 32) -> tuple[str, dict]:
    """A GELU MLP written in the program(1.0) / ios16 dialect that M1 and M2 need."""
    t = Text(legacy=True)
    act = f"tensor<fp16, [{seq}, {dim}]>"
    h = "x"
    for _ in range(layers):
        w = t.weight(t.rng.standard_normal((dim, dim)) * 0.05)
        b = t.weight(t.rng.standard_normal(dim) * 0.05)
        y = t.op(act, "linear", {"bias": b, "weight": w, "x": h}, "_cast_fp16")
        mode = t.const("tensor<string, []>", t.string("TANH_APPROXIMATION"))
        g = t.op(act, "gelu", {"mode": mode, "x": y}, "_cast_fp16")
        axes = t.ints([-1])
        eps = t.const("tensor<fp16, []>", t.scalar("fp16", "0x1.5p-17"))
        n = t.op(act, "layer_norm", {"axes": axes, "epsilon": eps, "x": g}, "_cast_fp16")
        h = t.op(act, "add", {"x": h, "y": n}, "_cast_fp16")
    return t.finish(f"{act} x", h)


def inline_constants(ops: int = 1500, channels: int = 8) -> tuple[str, dict]:
    """Every op with its own inline constants: no literal repeats, so no literal cache helps.

    Small vectors and scalars, in hex (as coremltools prints them: ``0x1.8p+1``) and decimal,
    both as const statements and written inline as arguments.
    """
    t = Text()
    act = f"tensor<fp16, [1, {channels}, 1, 8]>"
    vec = f"tensor<fp16, [1, {channels}, 1, 1]>"
    h = "x"
    for i in range(ops):
        values = t.rng.standard_normal(channels).astype(np.float16).astype(float)
        if i % 3 == 0:
            literal = f"{vec}([{', '.join(_hex(v) for v in values)}])"
            h = t.op(act, "mul", {"x": h, "y": literal})
        elif i % 3 == 1:
            literal = f"{vec}([{', '.join(f'{v:.6g}' for v in values)}])"
            h = t.op(act, "add", {"x": h, "y": t.const(vec, literal)})
        else:
            h = t.op(act, "sub", {"x": h, "y": t.scalar("fp16", _hex(values[0]))})
    return t.finish(f"{act} x", h)


def _hex(x: float) -> str:
    """A float as coremltools prints it: exact hex, trailing zeros dropped (0x1.8p+1)."""
    mantissa, exponent = x.hex().split("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}"


def blobfile_constants(layers: int = 1500, dim: int = 32) -> tuple[str, dict]:
    """A deep stack of linear layers whose weights and biases are BLOBFILE consts."""
    t = Text()
    act = f"tensor<fp16, [8, {dim}]>"
    h = "x"
    for _ in range(layers):
        w = t.weight(t.rng.standard_normal((dim, dim)) * 0.05)
        b = t.weight(t.rng.standard_normal(dim) * 0.05)
        h = t.op(act, "linear", {"bias": b, "weight": w, "x": h}, "_cast_fp16")
    return t.finish(f"{act} x", h)


def _ours(build: Callable[[], mil.Program]) -> Callable[[], tuple[str, dict]]:
    def make() -> tuple[str, dict]:
        program = build()
        return program.to_text(), program.weight_files()

    return make


SHAPES: dict[str, Callable[[], tuple[str, dict]]] = {
    "conv chain (500 small convs)": conv_chain,
    "wide attention (4 x 16 heads)": wide_attention,
    "legacy dialect (300-layer MLP)": legacy_mlp,
    "inline constants (1500 ops)": inline_constants,
    "BLOBFILE constants (1500 layers)": blobfile_constants,
    "ours: 128 chained 1x1 convs": _ours(lambda: chained_convs(128, channels=64, spatial=8)),
    "ours: 12-layer transformer": _ours(lambda: transformer(TransformerShape(n_layers=12))),
}


def main(rounds: int = 9) -> None:
    texts = {label: make() for label, make in SHAPES.items()}
    programs = {label: mil.parse(text, files) for label, (text, files) in texts.items()}
    statements = {
        label: sum(len(f.ops) for f in p.functions.values()) for label, p in programs.items()
    }
    times: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    labels = list(texts)
    with threadpool_limits(1):
        for r in range(rounds):
            for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                text, files = texts[label]
                stages = (("cold", partial(_cold_parse, text, files)),
                          ("warm", partial(mil.parse, text, files)),
                          ("print", programs[label].to_text))  # fmt: skip
                for stage, fn in stages:
                    t0, c0 = time.perf_counter(), time.process_time()
                    fn()
                    c1, t1 = time.process_time(), time.perf_counter()
                    times.setdefault((label, stage), []).append(t1 - t0)
                    cpu.setdefault((label, stage), []).append(c1 - c0)
    print(f"statements/s, best and median of {rounds} interleaved rounds, one BLAS thread")
    print("cold: the parser's caches emptied first; warm: the same text parsed again")
    print("wall: wall clock (the headline); cpu: this process's CPU time (the machine is shared)")
    print(f"{'shape':34} {'stmts':>6} {'kB':>5}  {'cold best':>10} {'median':>8}  "
          f"{'warm best':>10} {'median':>8}  {'print best':>10} {'median':>8}")  # fmt: skip
    below, below_cpu = [], []
    for label in labels:
        n = statements[label]
        for clock, table in (("wall", times), ("cpu", cpu)):
            cells = []
            for stage in ("cold", "warm", "print"):
                t = [max(x, 1e-9) for x in table[(label, stage)]]  # process_time ticks coarsely
                cells.append(f"{n / min(t):10,.0f} {n / statistics.median(t):8,.0f}")
                if clock == "wall" and max(t) / min(t) > 2:
                    print(
                        f"  warning: {label} {stage}: spread {max(t) / min(t):.1f}x (busy machine)"
                    )
            rate = n / statistics.median(table[(label, "cold")])
            if rate < TARGET and not label.startswith("ours"):
                (below if clock == "wall" else below_cpu).append(label)
            name = label if clock == "wall" else "  (cpu)"
            print(f"{name:34} {n:6d} {len(texts[label][0]) / 1e3:5.0f}  " + "  ".join(cells))
    for clock, missed in (("wall clock", below), ("cpu time", below_cpu)):
        verdict = "every shape meets it" if not missed else f"below it: {', '.join(missed)}"
        print(f"target: cold parse >= {TARGET:,} statements/s (median, {clock}): {verdict}")


def _cold_parse(text: str, files: dict) -> None:
    """Parse with the process-wide caches emptied: what a program seen for the first time costs."""
    reader.clear_caches()
    verify.clear_cache()
    mil.parse(text, files)


if __name__ == "__main__":
    main()
