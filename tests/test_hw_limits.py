"""Size limits in the checker: zero-size dimensions, rank, bytes per tensor and per program.

The byte limits are estimates (32-bit DMA offsets in tinygrad's H13 register map): the
tests check that the rules apply them as documented, not that the hardware has them.
"""

from __future__ import annotations

import numpy as np

from anekit import mil
from anekit.hw import check, chips
from anekit.hw.chips import get_chip
from anekit.hw.rules import Context, program_memory
from tests.clitools import run, write

GIB = 2**30


def relu_program(shape: tuple[int, ...]) -> mil.Program:
    b = mil.Builder()
    b.output(b.relu(x=b.input("x", shape, "fp16")), "y")
    return b.build()


def errors(program: mil.Program, chip: str = "m4") -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for d in check(program, chip):
        if d.severity == "error":
            found.setdefault(d.rule, []).append(d.message)
    return found


def test_an_8_gib_input_and_output_are_errors_on_every_chip() -> None:
    program = relu_program((1, 65536, 1, 65536))  # 65536 * 65536 * 2 bytes = 8 GiB each
    for chip in chips():
        found = errors(program, chip)
        assert len(found["tensor-bytes"]) == 2, chip
        assert all("8.00 GiB" in m for m in found["tensor-bytes"])
        assert "16.00 GiB at once (inputs and outputs 16.00" in found["program-memory"][0]


def test_tensor_bytes_count_the_padded_rows() -> None:
    # 2^30 rows of one fp16 element hold 2 GiB of data but take 64 GiB as laid out (64-byte rows)
    found = errors(relu_program((1, 16384, 65536, 1)))
    assert any("64.00 GiB" in m for m in found["tensor-bytes"])
    # just under the 4 GiB estimate: no tensor error
    assert "tensor-bytes" not in errors(relu_program((1, 16383, 1, 65536)))


def test_program_memory_counts_intermediates_at_their_peak() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 64, 1, 32), "fp16")  # 4096 bytes, rows of 64 bytes: no padding
    a = b.relu(x=x)
    c = b.relu(x=a)  # a and c are alive together here
    w = b.weight("w", np.ones((1, 64, 1, 1), np.float16))
    b.output(b.mul(x=b.relu(x=c), y=w), "y")
    ctx = Context(b.build(), get_chip("m4"))
    io, weights, peak = program_memory(ctx)
    assert io == 4096 + 4096
    assert weights == 64 * 2  # the weight's data bytes
    # relu(c) is an intermediate too, but a is gone by then: at most two alive at once
    assert peak == 2 * 4096


def test_zero_size_dimensions_are_errors_not_crashes() -> None:
    for shape in [(1, 0, 1, 8), (1, 4, 2, 0)]:
        found = errors(relu_program(shape))
        assert {"zero-size"} <= set(found), shape
        assert sum("has no elements" in m for m in found["zero-size"]) == 2  # x and y


def test_rank_over_five_is_an_error() -> None:
    assert "rank-limit" in errors(relu_program((1, 2, 1, 2, 1, 2)))
    assert "rank-limit" not in errors(relu_program((1, 2, 1, 2, 2)))


def test_the_limits_are_marked_as_estimates_with_their_source() -> None:
    chip = get_chip("m4")
    for field in ("max_tensor_gib", "max_program_gib"):
        fact = chip.facts[field]
        assert fact.estimate and "aneregs.json" in fact.source and fact.value == 4.0
    assert not chip.facts["max_rank"].estimate and chip.max_rank == 5


BIG = """program(1.3)
{
    func main<ios18>(tensor<fp16, [1, 65536, 1, 65536]> x) {
        tensor<fp16, [1, 65536, 1, 65536]> y = relu(x = x)[name = string("y")];
    } -> (y);
}
"""


def test_estimate_says_when_the_checker_rejects_the_program(capsys, tmp_path) -> None:
    import json

    path = write(tmp_path, BIG)
    code, out, _ = run(capsys, "estimate", path, "--chip", "m4")
    assert code == 0
    total, note = out.splitlines()[-2:]
    assert total.startswith("total on m4:")
    assert note.startswith("note: the checker rejects this program on m4 (3 errors:")
    assert "program-memory, tensor-bytes" in note
    code, out, _ = run(capsys, "estimate", path, "--chip", "m4", "--json")
    assert [e["rule"] for e in json.loads(out)["checker_errors"]].count("tensor-bytes") == 2
    code, out, _ = run(capsys, "estimate", path, "--all-chips")
    assert all("the checker rejects it" in line for line in out.splitlines()[1:])


def test_estimate_of_a_clean_program_has_no_note(capsys, tmp_path) -> None:
    from tests.clitools import CLEAN

    code, out, _ = run(capsys, "estimate", write(tmp_path, CLEAN), "--chip", "m4")
    assert code == 0 and "note:" not in out
