"""``anekit inspect FILE``: format detection, text and JSON summaries."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from anekit.cli import main
from anekit.inspect.report import detect_format

DATA = Path(__file__).parent / "data" / "hwx"

MIL = """program(1.3)
[buildInfo = dict<string, string>({{"coremlc-version", "3505.4.1"}})]
{
    func main<ios18>(tensor<fp16, [1, 4, 1, 8]> x) {
        tensor<fp16, [1, 4, 1, 8]> y = relu(x = x)[name = string("y")];
        tensor<fp16, [1, 4, 1, 8]> z = sigmoid(x = y)[name = string("z")];
        tensor<fp16, [1, 4, 1, 8]> w = relu(x = z)[name = string("w")];
    } -> (w);
}
"""


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["inspect", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_summary_of_an_hwx(capsys):
    code, out, _ = _run(capsys, str(DATA / "conv.hwx"))
    assert code == 0
    assert "generation H13" in out and "zin_ane_compiler v4.2.1" in out
    assert "input   image" in out and "(1, 3, 1, 1)" in out
    assert "weights: 3 symbols, 192 bytes" in out
    assert "Cin.Cin=3" in out
    assert "__text+0x74 (task 0: aneRegs.KernelDMASrc.CoeffBaseAddr[0].Addr)" in out


def test_json_summary_of_an_hwx(capsys):
    code, out, _ = _run(capsys, str(DATA / "concat.hwx"), "--json")
    assert code == 0
    info = json.loads(out)
    assert {"format", "generation", "compiler", "tensors", "weights", "tasks"} <= set(info)
    assert (info["format"], info["generation"]) == ("hwx", "H13")
    assert info["compiler"]["version"] == "v4.2.1"
    shapes = {t["name"]: t["shape"] for t in info["tensors"]}
    assert shapes["output@output"] == [1, 16400, 1, 1]
    assert [t["fields"]["aneRegs.Common.Cin.Cin"] for t in info["tasks"]] == [16384, 16]
    assert info["weights"] == []


def test_unknown_generation_json_has_raw_words(capsys, tmp_path):
    raw = bytearray((DATA / "relu.hwx").read_bytes())
    raw[8] = 9  # cpusubtype 9: H17
    path = tmp_path / "h17.hwx"
    path.write_bytes(bytes(raw))
    info = json.loads(_run(capsys, str(path), "--json")[1])
    assert info["generation"] == "H17"
    (task,) = info["tasks"]
    assert task["words"][:2] == [0x02000000, 0]  # the first words of relu's descriptor


def test_malformed_hwx_exits_2_with_the_offset(capsys, tmp_path):
    path = tmp_path / "cut.hwx"
    path.write_bytes((DATA / "conv.hwx").read_bytes()[:0x300])
    code, _, err = _run(capsys, str(path))
    assert code == 2
    assert err.startswith("anekit inspect: error: ") and "cut.hwx @ 0x" in err


def test_unrecognised_file(capsys, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    code, _, err = _run(capsys, str(path))
    assert code == 2 and "unrecognised format" in err


def test_no_file_and_no_cache_is_a_usage_error(capsys):
    code, _, err = _run(capsys)
    assert code == 2 and "FILE" in err


def test_weight_bin_summary(capsys, tmp_path):
    blob = pytest.importorskip("anekit.mil.blob")
    arrays = [np.arange(6, dtype=np.float16), np.ones((3, 5), dtype=np.float32)]
    path = tmp_path / "weight.bin"
    path.write_bytes(blob.write_blob_file(arrays))
    assert detect_format(path.read_bytes()) == "weight.bin"
    info = json.loads(_run(capsys, str(path), "--json")[1])
    assert info["format"] == "weight.bin"
    assert [r["size"] for r in info["records"]] == [a.nbytes for a in arrays]
    # First record right after the 64-byte header, its data after the 64-byte record.
    assert (info["records"][0]["offset"], info["records"][0]["data_offset"]) == (64, 128)


def test_mil_text_summary(capsys, tmp_path):
    pytest.importorskip("anekit.mil.parser")
    path = tmp_path / "model.mil"
    path.write_text(MIL)
    assert detect_format(path.read_bytes()) == "mil"
    info = json.loads(_run(capsys, str(path), "--json")[1])
    assert info["functions"] == {"main": {"ops": 3, "op_types": {"relu": 2, "sigmoid": 1}}}
    code, out, _ = _run(capsys, str(path))
    assert code == 0 and "main: 3 ops (relu x2, sigmoid x1)" in out


def _flatbuffer() -> bytes:
    flatbuffers = pytest.importorskip("flatbuffers")
    b = flatbuffers.Builder(0)
    name = b.CreateString("AneInference")
    b.StartObject(2)
    b.PrependUOffsetTRelativeSlot(0, name, 0)
    b.PrependUint32Slot(1, 4, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def test_e5_and_plain_flatbuffer(capsys, tmp_path):
    e5 = tmp_path / "H16G.e5"
    e5.write_bytes(_flatbuffer())
    info = json.loads(_run(capsys, str(e5), "--json")[1])
    assert info["format"] == "e5" and info["op_types"] == ["AneInference"]
    assert info["root"] == {"f0": "AneInference", "f1": 4}
    other = tmp_path / "thing.bin"
    other.write_bytes(_flatbuffer())
    code, out, _ = _run(capsys, str(other))
    assert code == 0 and out.startswith(f"{other}: FlatBuffer")
    assert "root.f0: string 'AneInference'" in out


def test_cache_path_that_is_a_file_says_so(tmp_path: Path, capsys) -> None:
    file = tmp_path / "cache"
    file.write_bytes(b"")
    assert main(["inspect", "--cache", str(file)]) == 2
    assert f"{file}: expected a cache directory, found a file" in capsys.readouterr().err


def test_mil_with_a_byte_order_mark_and_crlf_is_described(capsys, tmp_path):
    path = tmp_path / "model.mil"
    path.write_bytes(b"\xef\xbb\xbf" + MIL.replace("\n", "\r\n").encode())
    code, out, _ = _run(capsys, str(path))
    assert code == 0 and "main: 3 ops (relu x2, sigmoid x1)" in out
