"""Grammar-aware mutation of MIL text, run in a memory-limited worker with a time bound per input.

Used by ``tests/test_mil_fuzz.py`` (hypothesis draws the ``random.Random`` a mutation uses)
and from the command line to count outcomes, for example against an older checkout::

    python -m tests.milfuzz --seconds 60 [--root /path/to/other/checkout] [--seed 0]

Each input is parsed in a worker process under ``RLIMIT_AS``; the parent waits at most
``timeout`` seconds and kills and replaces a worker that does not answer. Outcomes: ``ok``
(parsed), ``anekit`` (an AnekitError), ``other`` (any other exception: a defect), ``hang``
(over the time bound), ``memory`` (MemoryError or the worker died under the limit).
"""

from __future__ import annotations

import argparse
import os
import random
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

SEEDS = [
    """program(1.3)
[buildInfo = dict<string, string>({{"coremlc-version", "3505.4.1"}})]
{
    func main<ios18>(tensor<fp16, [1, 4]> x, tensor<fp16, [1, 4]> z) {
        tensor<int32, [2]> shp = const()[name = string("shp"), val = tensor<int32, [2]>([4, 1])];
        bool flag = const()[name = string("flag"), val = bool(false)];
        fp16 eps = const()[name = string("eps"), val = fp16(0x1p-3)];
        tensor<fp16, [1, 4]> s = add(x = x, y = z)[name = string("s")];
        tensor<fp16, [1, 4]> m = mul(x = s, y = fp16(0x1.8p+1))[name = string("m")];
        tensor<fp16, [4, 1]> r = reshape(x = m, shape = shp)[name = string("r")];
        tensor<fp16, [8, 1]> c = concat(axis = int32(0), interleave = flag, values = (r, r))[name = string("c")];
    } -> (c);
}
""",
    """program(1.0)
[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremltools-version", "9.0"}})]
{
    func main<ios16>(tensor<fp16, [1, 2, 1, 8]> x) {
        tensor<int32, [1]> ax = const()[name = tensor<string, []>("ax"), val = tensor<int32, [1]>([-1])];
        tensor<bool, []> kd = const()[name = tensor<string, []>("kd"), val = tensor<bool, []>(true)];
        tensor<fp16, [1, 2, 1, 1]> s = reduce_sum(axes = ax, keep_dims = kd, x = x)[name = tensor<string, []>("s")];
        tensor<fp16, [1, 2, 1, 8]> y = sub(x = x, y = s)[name = tensor<string, []>("y")];
    } -> (y);
}
""",
    """program(1.3)
[buildInfo = dict<string, dict<string, string>>({{"a", {{"b", "c\\"d"}}}})]
{
    func main<ios18>(tensor<fp32, [2, 3]> x) {
        tensor<fp32, [3, 2]> w = const()[name = string("w"), val = tensor<fp32, [3, 2]>([[1.5, -2], [0x1p-3, 3e2], [inf, -0.0]])];
        tensor<fp32, [2, 2]> y = matmul(transpose_x = bool(false), transpose_y = bool(false), x = x, y = w)[name = string("y")];
        tensor<int32, [2, 2]> i = cast(dtype = string("int32"), x = y)[name = string("i")];  // a comment
    } -> (y, i);
}
""",
]

# what grows into the hostile families: nesting, long runs, extreme numbers, odd characters
_OPENERS = ["[", "(", "{", "dict<string, ", "tensor<fp16, [", '"', '\\"', "<"]
_RUNS = ["1, ", "x, ", '\\"', '"\\', "[", "(", "a ", " ", "\t", "0", "f", "tensor<a,[", "-", "//"]
_NUMBERS = [
    "1e999", "-1e999", "0x1p99999", "0x1p-99999", "1e-999", "1e39", "0x1p+128", "70000",
    "65520", "1e-9", "nan", "-inf", "inf", "infinity", "1_000", "0x", "1e", ".", "-0",
    "99999999999999999999999999", "9" * 5000, "2147483648", "-2147483649", "4294967296",
    "9223372036854775808", "-9223372036854775809", "65537", "16385", "0",
]  # fmt: skip
_DIMS = ["0", "-1", "65537", "2147483648", "9223372036854775807", "9223372036854775808",
         "100000000000000000000", "s", "1.5", "0x10", "+2"]  # fmt: skip
_UNICODE = [
    "\u0661", "\uff11", "\u0966", "\u00e9", "\u0301", "\u202e", "\u2028", "\u00a0", "\ufeff",
    "\U0001f600", "\ud800", "\x85", "\x1c", "\u3000", "\u00b2", "\u2167",
]  # fmt: skip


def mutate(r: random.Random, max_repeat: int = 200_000) -> str:
    """One mutated program: a seed with one to four grammar-aware edits."""
    text = r.choice(SEEDS)
    for _ in range(r.randint(1, 4)):
        text = _EDITS[r.randrange(len(_EDITS))](r, text, max_repeat)
    return text


def _at(r: random.Random, text: str) -> int:
    return r.randrange(len(text) + 1)


def _nest(r: random.Random, text: str, n: int) -> str:
    i, depth = _at(r, text), r.choice([2, 65, 1000, n])
    opener = r.choice(_OPENERS)
    closer = {"[": "]", "(": ")", "{": "}", "dict<string, ": ">", "tensor<fp16, [": "]>", "<": ">"}
    return text[:i] + opener * depth + closer.get(opener, "") * r.choice([0, depth]) + text[i:]


def _run(r: random.Random, text: str, n: int) -> str:
    i = _at(r, text)
    return text[:i] + r.choice(_RUNS) * r.randint(1, n) + text[i:]


def _number(r: random.Random, text: str, n: int) -> str:
    spots = [i for i in range(1, len(text)) if text[i].isdigit() and not text[i - 1].isalnum()]
    if not spots:
        return text
    i = r.choice(spots)
    j = i
    while j < len(text) and (text[j].isalnum() or text[j] in ".+-"):
        j += 1
    return text[:i] + r.choice(_NUMBERS) + text[j:]


def _dim(r: random.Random, text: str, n: int) -> str:
    starts = [i for i in range(len(text)) if text.startswith(", [", i) or text.startswith("<", i)]
    if not starts:
        return text
    i = text.find("[", r.choice(starts))
    j = text.find("]", i)
    if i < 0 or j < 0:
        return text
    dims = [r.choice(_DIMS) for _ in range(r.choice([1, 2, 4, 7]))]
    return text[: i + 1] + ", ".join(dims) + text[j:]


def _unicode(r: random.Random, text: str, n: int) -> str:
    i = _at(r, text)
    return text[:i] + "".join(r.choice(_UNICODE) for _ in range(r.randint(1, 4))) + text[i:]


def _nul(r: random.Random, text: str, n: int) -> str:
    i = _at(r, text)
    return text[:i] + "\0" * r.choice([1, 2, n]) + text[i:]


def _splice(r: random.Random, text: str, n: int) -> str:
    i = _at(r, text)
    j = min(len(text), i + r.randint(1, 40))
    kind = r.randrange(4)
    if kind == 0:
        return text[:i] + text[j:]  # delete
    if kind == 1:
        return text[:j] + text[i:j] * r.choice([1, 2, 1000]) + text[j:]  # duplicate
    if kind == 2:
        return text[:i]  # truncate
    k = _at(r, text)
    return text[:k] + text[i:j] + text[k:]  # copy elsewhere


_EDITS = [_nest, _run, _number, _dim, _unicode, _nul, _splice, _splice]

# -- the worker ---------------------------------------------------------------------------------
_WORKER = r"""
import os, resource, struct, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from anekit.errors import AnekitError
from anekit.mil import parse
inp, out = sys.stdin.buffer, sys.stdout.buffer
out.write(b"ready\n"); out.flush()
while True:
    head = inp.read(4)
    if len(head) < 4:
        break
    data = inp.read(struct.unpack("<I", head)[0])
    try:
        parse(data.decode("utf-8", "surrogatepass"))
        result = b"ok"
    except AnekitError:
        result = b"anekit"
    except MemoryError:
        result = b"memory"
    except BaseException as e:
        result = ("other " + type(e).__name__ + ": " + str(e)[:200]).encode("utf-8", "replace")
    out.write(struct.pack("<I", len(result)) + result); out.flush()
"""


class Worker:
    """A parsing process under an address-space limit; ``run`` returns an outcome name."""

    def __init__(self, root: str | None = None, memory: int = 3 << 30, timeout: float = 5.0):
        self.root, self.memory, self.timeout = root, memory, timeout
        self.proc: subprocess.Popen | None = None
        self.details: Counter[str] = Counter()

    def _start(self) -> subprocess.Popen:
        root = self.root or str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=root)
        proc = subprocess.Popen(  # in root: "-c" puts the working directory first on sys.path
            [sys.executable, "-c", _WORKER, str(self.memory)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=root,
        )
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        return proc

    def run(self, text: str) -> str:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        data = text.encode("utf-8", "surrogatepass")
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(struct.pack("<I", len(data)) + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._lost("memory")
        reply = self._read(4)
        if reply is None:
            return self._lost("hang" if self.proc.poll() is None else "memory")
        body = self._read(struct.unpack("<I", reply)[0]) or b""
        outcome = body.decode("utf-8", "replace")
        if outcome.startswith("other"):
            self.details[outcome] += 1
            return "other"
        return outcome

    def _read(self, n: int) -> bytes | None:
        """``n`` bytes from the worker, or None if it does not send them within the time bound."""
        import selectors

        assert self.proc is not None and self.proc.stdout is not None
        fd, got = self.proc.stdout.fileno(), b""
        deadline = time.monotonic() + self.timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while len(got) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None
                chunk = os.read(fd, n - len(got))
                if not chunk:
                    return None
                got += chunk
        return got

    def _lost(self, outcome: str) -> str:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        return outcome

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def count(
    seconds: float, seed: int, root: str | None, timeout: float, inputs: int | None = None
) -> Counter[str]:
    """Outcomes of mutated inputs drawn from ``seed``: ``inputs`` of them, or for ``seconds``."""
    r, worker, outcomes = random.Random(seed), Worker(root, timeout=timeout), Counter()
    end = time.monotonic() + seconds
    try:
        while (sum(outcomes.values()) < inputs) if inputs else (time.monotonic() < end):
            outcomes[worker.run(mutate(r))] += 1
    finally:
        worker.close()
    for detail, n in worker.details.most_common(10):
        print(f"  {n:5d} x {detail}")
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", help="the checkout to import anekit from (default: this one)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per input")
    parser.add_argument("--inputs", type=int, help="this many inputs instead of --seconds")
    args = parser.parse_args()
    outcomes = count(args.seconds, args.seed, args.root, args.timeout, args.inputs)
    tried = sum(outcomes.values())
    print(
        f"inputs tried {tried}: ok {outcomes['ok']}, anekit errors {outcomes['anekit']}, "
        f"non-anekit errors {outcomes['other']}, hangs (> {args.timeout:g} s) "
        f"{outcomes['hang']}, memory blow-ups {outcomes['memory']}"
    )


if __name__ == "__main__":
    main()
