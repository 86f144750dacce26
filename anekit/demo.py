"""``anekit demo``: build a small program, print its MIL text and save it with its weights."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from anekit import mil


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="out/demo_model", help="directory to save the program in")


def run(args: argparse.Namespace) -> int:
    rng = np.random.default_rng(0)
    b = mil.Builder()
    x = b.input("x", (1, 64, 1, 32), "fp16")
    w = b.weight("w", (rng.standard_normal((128, 64, 1, 1)) * 0.1).astype(np.float16))
    b.output(b.identity(x=x), "y")
    b.output(w, "w_out")
    program = b.build()
    print(program.to_text())
    out = program.save(Path(args.out))
    print(f"saved to {out}/ (model.mil + weights/)")
    return 0
