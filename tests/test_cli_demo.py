"""``anekit demo`` trains, samples, and never replaces a run it did not make."""

from __future__ import annotations

from anekit.cli import main


def test_demo_trains_and_marks_its_directory(tmp_path, capsys) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--steps", "2", "--backend", "reference", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "--- sample" in printed
    assert printed.startswith(
        "anekit demo: training the tiny config for 2 steps on CPython's pydoc"
    )
    last = printed.rstrip().splitlines()[-4:]  # ends with the next commands to try
    assert [line.split()[1] for line in last] == ["generate", "chat", "serve", "convert"]
    assert all(str(out) in line for line in last[:3])
    assert (out / ".anekit-demo").is_file() and (out / "LATEST").is_file()
    # a second demo may replace the first one's checkpoints
    assert main(["demo", "--steps", "2", "--backend", "reference", "--out", str(out)]) == 0


def test_demo_refuses_a_directory_holding_another_run(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["train", "--config", "tiny", "--steps", "1", "--backend", "reference",
                 "--out", str(out), "--sample-tokens", "0"]) == 0  # fmt: skip
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["demo", "--steps", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"anekit demo: error: {out}: holds a training run") and "did not make" in err
    )
    assert sorted(p.name for p in out.iterdir()) == before
