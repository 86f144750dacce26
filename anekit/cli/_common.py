"""What every command shares: the parser class, argument types, program loading, progress bars.

Only the standard library is imported here at module level: ``anekit --help`` builds every
command's parser, and must not load the toolkit to do so. Feature modules are imported
inside the functions that need them, which run only when a command does.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from anekit.hw.chips import Chip
    from anekit.mil.program import Program

MODEL_HELP = "a model.mil file, or a model directory (model.mil + weights/)"
# for the commands that read shapes, not weights: fmt, check, estimate
SHAPES_HELP = MODEL_HELP + ", or - for standard input (weight files are not read)"
CHIP_HELP = "chip profile (anekit chips lists them); default: the host's chip, else m4"
BACKEND_HELP = "ane or reference (default: $ANEKIT_BACKEND, else the best available here)"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, ``anekit COMMAND: error: ...``, exit 2."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # A command rejects what it does not know itself, so the message names the command
        # (argparse leaves leftovers to the top-level parser, which would say "anekit: ...").
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def one_line(text: str) -> str:
    """``text`` with its line breaks turned into spaces."""
    return " ".join(text.splitlines())


def add_chip(parser: argparse.ArgumentParser, what: str = "") -> None:
    """Add ``--chip`` (a :class:`Chip`, or None for the default; see :func:`resolve_chip`)."""
    parser.add_argument("--chip", type=chip_profile, help=(what + "; " if what else "") + CHIP_HELP)


def chip_profile(text: str) -> Chip:
    """An argparse ``type`` for ``--chip``: the profile; an unknown name is a usage error."""
    from anekit.hw.chips import get_chip

    try:
        return get_chip(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def resolve_chip(chip: Chip | None) -> Chip:
    """The chip given on the command line, or the default, saying on stderr how it was chosen."""
    from anekit.hw.chips import default_chip, get_chip

    if chip is not None:
        return chip
    chosen, how = default_chip()
    print(f"chip {chosen}: {how} (pass --chip to choose)", file=sys.stderr)
    return get_chip(chosen)


def add_backend(parser: argparse.ArgumentParser) -> None:
    """Add ``--backend`` (a backend name, or None for the best available one)."""
    parser.add_argument("--backend", type=backend_name, help=BACKEND_HELP)


def one_of(what: str, names: Callable[[], Iterable[str]]) -> Callable[[str], str]:
    """An argparse ``type`` accepting one of ``names()``, which is called only when parsing.

    It replaces ``choices=`` where the names live in a feature module that ``--help`` must
    not import.
    """

    def parse(text: str) -> str:
        known = list(names())
        if text not in known:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {text!r}; expected one of: {', '.join(known)}"
            )
        return text

    parse.__name__ = what
    return parse


def _backends() -> Iterable[str]:
    from anekit.backends import BACKENDS

    return BACKENDS


# whether the backend can run here is checked when the command runs
backend_name = one_of("backend", _backends)


def _llm_compressions() -> Iterable[str]:
    from anekit.llm.compressed import CHOICES

    return CHOICES


COMPRESS_HELP = (
    "store the weights compressed (int8, w8a8, lut6, lut4; fp16: compiled in, uncompressed): "
    "the layers run as segment programs with their weights compiled in"
)
# what a language model can be loaded with (anekit.llm.compressed)
llm_compression = one_of("compression", _llm_compressions)


THREADS_HELP = (
    "BLAS / OpenMP / torch threads while timing (default 1: steady on a shared machine; "
    "needs threadpoolctl)"
)


def add_residual_options(parser: argparse.ArgumentParser) -> None:
    """``--residual`` and ``--strict``, passed to ``llm.load`` (generate, chat, serve)."""
    parser.add_argument(
        "--residual", choices=("auto", "fp16", "host"), default="auto",
        help="where the residual stream lives between programs: auto (default) moves it to "
        "float32 on the host at the first step that overflows fp16 (docs/numerics.md)",
    )  # fmt: skip
    parser.add_argument(
        "--strict", action="store_true",
        help="values the golden model saturated or replaced (its cliff events) stop the "
        "generation with an error naming the position, layer and op (default: one warning)",
    )  # fmt: skip


def add_threads(parser: argparse.ArgumentParser) -> None:
    """Add ``--threads N`` (at least 1): the thread count timings pin every pool to."""
    parser.add_argument("--threads", type=positive_int, default=1, help=THREADS_HELP)


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, found {text!r}")
    return value


def non_negative(kind: type) -> Any:
    """An argparse ``type``: a finite ``kind`` (int or float) that is at least 0."""

    def parse(text: str) -> Any:
        value = kind(text)
        if not (math.isfinite(value) and value >= 0):
            raise argparse.ArgumentTypeError(f"expected a finite number >= 0, found {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in "invalid int value"
    return parse


def output_file(text: str) -> str:
    """An argparse ``type`` for every file a command writes (``--out``, ``--json FILE``, ...).

    Checked when the command line is read, before any work: a directory, a block device or an
    unwritable place is a usage error; a link is written through, a device or FIFO written into
    (see ``anekit.files.write_atomic``).
    """
    from anekit.errors import UsageError
    from anekit.files import check_output

    try:
        check_output(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def utf8_text(text: str) -> str:
    """An argparse ``type``: text that UTF-8 can encode.

    An argument that is not valid UTF-8 (``$'\\xff'``) reaches Python with lone surrogates
    in it (PEP 383: byte 0xff becomes U+DCFF), which no tokenizer can encode.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        found = ", ".join(
            f"byte 0x{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff" else f"U+{ord(c):04X}"
            for c in text[e.start : e.end]
        )
        raise argparse.ArgumentTypeError(
            f"expected UTF-8 text, found {found} (not a character) at character {e.start}"
        ) from None
    return text


def load_program(path: str, weights: str | None = None, *, shapes_only: bool = False) -> Program:
    """The program at ``path`` (a model directory, a ``.mil`` file or ``-``); see ``mil.load_path``."""
    from anekit.mil.loading import load_path

    # the command owns its process: pausing the collector during the parse is ours to do
    return load_path(path, weights, shapes_only=shapes_only, pause_gc=True)


def progress_bar(total: int, *, unit: str, initial: int = 0) -> Any:
    """A tqdm bar on stderr when it is a terminal and tqdm is installed; else None.

    Callers print plain progress lines when there is no bar, so logs stay readable.
    """
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, unit=unit, file=sys.stderr, dynamic_ncols=True)
