"""A ``.pt2`` is data: archives that would make ``torch.export.load`` run code are refused."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from anekit.errors import ConversionError  # noqa: E402
from anekit.frontends.torch import archive, convert_file  # noqa: E402
from tests import pt2_craft  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt2") / "small.pt2"
    pt2_craft.small_archive(path)
    return path


@pytest.mark.parametrize("kind", pt2_craft.KINDS)
def test_hostile_archive_is_refused_before_its_payload_runs(kind, source, tmp_path) -> None:
    marker = tmp_path / "payload_ran"
    hostile = pt2_craft.hostile(kind, source, tmp_path / f"{kind}.pt2", marker)
    with pytest.raises(ConversionError, match="refused"):
        convert_file(hostile, tmp_path / "out")
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["use_pickle", "sample_inputs", "legacy_constants"])
def test_the_crafted_archives_do_run_code_in_torch_itself(kind, source, tmp_path) -> None:
    # the control: without anekit's checks, torch 2.13 unpickles these payloads
    marker = tmp_path / "payload_ran"
    hostile = pt2_craft.hostile(kind, source, tmp_path / f"{kind}.pt2", marker)
    try:
        torch.export.load(str(hostile))
    except Exception:  # noqa: BLE001 - only whether the payload ran matters
        pass
    assert marker.exists()


def test_weights_only_backstop_holds_when_the_checks_are_bypassed(
    source, tmp_path, monkeypatch
) -> None:
    marker = tmp_path / "payload_ran"
    hostile = pt2_craft.hostile("sample_inputs", source, tmp_path / "s.pt2", marker)
    data = hostile.read_bytes()
    unchecked = archive.Archive(data=data, root="s", models=["model"], pytree_types=set())
    monkeypatch.setattr(archive, "check_archive", lambda data, where: unchecked)
    with pytest.raises(ConversionError):
        archive.load_exported(hostile)
    assert not marker.exists()


def test_a_plain_archive_still_loads_and_torch_log_stays_quiet(source, capfd) -> None:
    exported = archive.load_exported(source)
    x = torch.randn(2, 4)
    assert exported.module()(x).shape == (2, 4)
    assert capfd.readouterr().err == ""


def test_unknown_pytree_types_are_refused_not_imported(source, tmp_path) -> None:
    checked = archive.check_archive(source.read_bytes(), "x.pt2")
    assert checked.pytree_types <= {"builtins.tuple", "builtins.dict"}
    with pytest.raises(ConversionError, match="does not register"):
        archive.register_pytree_types({"os.system_output"}, "x.pt2")
    with pytest.raises(ConversionError, match="no module|no output class"):
        archive.register_pytree_types({"transformers.models.evil.modeling_evil.Out"}, "x.pt2")


def test_truncated_and_garbage_archives_are_conversion_errors(source, tmp_path) -> None:
    data = source.read_bytes()
    for i, blob in enumerate([b"", b"PK\x03\x04" + b"\0" * 40, data[: len(data) // 2]]):
        path = tmp_path / f"bad{i}.pt2"
        path.write_bytes(blob)
        with pytest.raises(ConversionError):
            archive.load_exported(path)


def test_a_missing_transformers_is_named(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    with pytest.raises(ConversionError, match="pip install transformers"):
        archive.register_pytree_types({"transformers.modeling_outputs.NoSuchOutput"}, "x.pt2")
