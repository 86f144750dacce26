"""``anekit.export_mlpackage``: the public CoreML route, read back by coremltools.

coremltools (the test extra) is the independent reference: its own reader loads the
package and its own MIL builder re-infers every op's type. Off macOS nothing is run
through CoreML; the package is checked op by op and constant by constant.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import cli, mil
from anekit.errors import ConversionError, UsageError
from anekit.ladder import cases
from anekit.mil.ops import registry
from anekit.passes import coreml
from tests.coreml_readback import assert_same, read_back
from tests.opcases import all_cases

pytest.importorskip("coremltools")

# Programs anekit accepts and coremltools' builder does not (findings, docs/coreml.md): the
# case id and what coremltools says. A fix on either side makes this test fail: update it.
FINDINGS = {
    "exp-fp32-rank0": "rank 0",
    "add-rank0-x": "rank 0",
    "mul-int32": "rank 0",
    "maximum-int32": "rank 0",
    "select-int32": "rank 0",
    "expand_dims-scalar": "rank 0",
    "gather-scalar-index-int8": "rank 0",
    "select-cond-widest": "coremltools infers 'out' as fp16 [3, 4], anekit as fp16 [2, 3, 4]",
    "topk-k-minus-one": "coremltools infers 'values' as fp16 [2, -1], anekit as fp16 [2, 5]",
    "matmul-vector-x": "coremltools infers 'z' as fp16 [1, 3], anekit as fp16 [2, 3]",
    "matmul-vector-y": "IndexError: list index out of range",
    "matmul-dot": "IndexError: list index out of range",
    "slice_by_size-to-end-negative-begin": "coremltools infers 'y' as int32 [7, 6], anekit as "
    "int32 [3, 6]",
    "pixel_unshuffle-f2": "expects tensor or scalar of dtype from type domain ['uint32'] but got "
    "int32",
}


def _programs() -> list[tuple[str, str, mil.Program]]:
    out = []
    for case in all_cases():
        b = mil.Builder(case.opset)
        try:
            case.build(b)
            out.append((case.id, case.op, b.build()))
        except Exception:  # a case that shows anekit refusing a program: nothing to export
            continue
    return out


def test_every_registry_op_goes_through_coremltools_builder_with_the_same_types() -> None:
    """Each op case's program rebuilt by coremltools' builder: every op exists there, and every
    output type coremltools infers equals anekit's, except the listed findings."""
    failed, converted, tried = {}, set(), set()
    for case_id, op, program in _programs():
        tried.add(op)
        try:
            coreml.to_pymil(program)
            converted.add(op)
        except ConversionError as e:
            failed[case_id] = str(e)
    assert tried == set(registry.names()) and len(tried) == 125  # every op has a case
    # every op exists in coremltools' builder; one is refused in every case anekit has
    assert tried - converted == {"pixel_unshuffle"}
    assert set(failed) == set(FINDINGS)
    for case_id, fragment in FINDINGS.items():
        assert fragment in failed[case_id], (case_id, failed[case_id])


def test_findings_name_the_op_its_type_and_its_line() -> None:
    text = (
        "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [2, 4]> x, tensor<fp16, [4]> v) {\n"
        '        tensor<fp16, [2]> z = matmul(x = x, y = v)[name = string("z")];\n'
        "    } -> (z);\n}\n"
    )
    with pytest.raises(ConversionError) as info:
        coreml.to_pymil(mil.parse(text))
    assert info.value.problems == (("z", "matmul", "line 4"),)


def _affine() -> mil.Program:
    return cases.affine((1, 64, 1, 64), "fp16").program


@pytest.mark.parametrize(
    "program",
    [cases.binding_case().program, cases.many_inputs().program, _affine(),
     cases.affine((1, 8, 1, 1), "fp32").program],
    ids=["three_by_three", "fourteen_inputs", "affine_fp16", "affine_fp32"],
)  # fmt: skip
def test_the_projects_programs_read_back_the_same(tmp_path: Path, program) -> None:
    out = anekit.export_mlpackage(program, tmp_path / "m.mlpackage")
    assert out == tmp_path / "m.mlpackage"
    theirs = assert_same(program, out)
    assert theirs["opset"] == "CoreML8"  # iOS18's opset: the dialect kept
    assert [p.name for p in tmp_path.iterdir()] == ["m.mlpackage"]  # nothing left beside it


def test_weights_go_to_the_weight_file_with_their_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    b = mil.Builder()
    x = b.input("x", (1, 32, 1, 16), "fp16")
    w = b.weight("w", (rng.standard_normal((48, 32, 1, 1)) / 8).astype(np.float16))
    b.output(b.conv(x=x, weight=w), "y")
    program = b.build()
    out = anekit.export_mlpackage(program, tmp_path / "conv.mlpackage")
    theirs = assert_same(program, out)
    np.testing.assert_array_equal(
        np.asarray(theirs["consts"]["w"]), program.main.ops[0].outputs[0].const
    )
    assert (
        out / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"
    ).stat().st_size > 48 * 32 * 2


def test_the_legacy_dialect_exports_as_ios16(tmp_path: Path) -> None:
    b = mil.Builder("ios16")
    x = b.input("x", (1, 16, 1, 32), "fp16")
    b.output(b.add(x=b.mul(x=x, y=2.0), y=1.0), "y")
    program = b.build()
    theirs = assert_same(program, anekit.export_mlpackage(program, tmp_path / "l.mlpackage"))
    assert theirs["opset"] == "CoreML6"


def test_names_kept_where_an_op_is_named_apart_from_its_variable(tmp_path: Path) -> None:
    """coremltools names a variable after its op: the variable's name (the interface) wins."""
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 8), "fp16")
    y = b.output(b.relu(x=x), "y")
    y.producer.attrs["name"] = "relu_op"
    theirs = read_back(anekit.export_mlpackage(b.build(), tmp_path / "n.mlpackage"))
    assert theirs["ops"] == [("relu", ["y"])] and theirs["outputs"][0][0] == "y"


def test_a_converted_bert_reads_back_the_same(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32,
    )  # fmt: skip
    program = anekit.from_torch(
        transformers.BertModel(config).eval(), (torch.randint(0, 99, (1, 8)),)
    )
    theirs = assert_same(program, anekit.export_mlpackage(program, tmp_path / "bert.mlpackage"))
    assert theirs["inputs"] == [("input_ids", "int32", (1, 8))]
    assert [o[0] for o in theirs["outputs"]] == ["last_hidden_state", "pooler_output"]
    # coremltools' select needed its scalar constants broadcast (a finding): still a select
    assert sum(1 for kind, _ in theirs["ops"] if kind == "select") >= 1


def test_an_llm_block_program_reads_back_the_same(tmp_path: Path) -> None:
    from anekit.llm import kernels
    from anekit.llm.config import config_from_hf

    cfg = config_from_hf({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 96, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 64,
    })  # fmt: skip
    program = kernels.block_program(cfg, kernels.BlockKey(1, 16))
    theirs = assert_same(program, anekit.export_mlpackage(program, tmp_path / "block.mlpackage"))
    assert {name for name, _, _ in theirs["inputs"]} >= {"x", "k_cache", "v_cache", "mask"}
    assert all(dtype == "fp16" for _, dtype, _ in theirs["inputs"] + theirs["outputs"])


def test_io_coreml_cannot_take_is_refused_naming_it(tmp_path: Path) -> None:
    b = mil.Builder()
    x = b.input("x", (4,), "int8")
    b.output(b.identity(x=x), "y")
    with pytest.raises(ConversionError, match="dtype int8, not one of") as info:
        anekit.export_mlpackage(b.build(), tmp_path / "i.mlpackage")
    assert info.value.problems[0][:2] == ("x", "input")
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_an_existing_package_is_replaced_only_when_asked(tmp_path: Path) -> None:
    out = tmp_path / "m.mlpackage"
    anekit.export_mlpackage(_affine(), out)
    with pytest.raises(UsageError, match="exists"):
        anekit.export_mlpackage(_affine(), out)
    anekit.export_mlpackage(_affine(), out, overwrite=True)
    with pytest.raises(UsageError, match="ends in .mlpackage"):
        anekit.export_mlpackage(_affine(), tmp_path / "m.zip")


def test_anekit_export_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = cases.binding_case().program.save(tmp_path / "prog")
    out = tmp_path / "b.mlpackage"
    assert cli.main(["export", str(source), "--mlpackage", str(out), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["mlpackage"] == str(out) and record["ops"] == len(
        cases.binding_case().program.ops
    )
    assert_same(cases.binding_case().program, out)
    assert cli.main(["export", str(source), "--mlpackage", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
