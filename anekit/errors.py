"""Every exception anekit raises, in one place.

Each error carries the fields that locate it (file, line, column, op, input
name, offset) and a message that says what was expected, what was found and
where. All derive from :class:`AnekitError`, so ``except AnekitError`` catches
everything the toolkit raises on bad input. The classes for bad input also derive from the
built-in type a caller would otherwise catch (``ValueError`` for bad values and files,
``TypeError`` and ``ValueError`` for ill-typed programs and constants), so
``except ValueError`` keeps working.

Not covered: a wrong *kind* of argument in a call (``mil.load(3)``), which is a programming
error and stays Python's ``TypeError``.
"""

from __future__ import annotations

import errno

__all__ = [
    "AnekitError",
    "NumericsOverflow",
    "MilSyntaxError",
    "MilTypeError",
    "WeightFileError",
    "BackendUnavailable",
    "CompileError",
    "EvaluationError",
    "CompileBudgetExhausted",
    "CheckpointError",
    "TrainingDiverged",
    "DistributedError",
    "ConversionError",
    "InspectError",
    "UsageError",
    "KernelClosed",
    "UnknownName",
    "os_reason",
    "ModelError",
    "GarbageValues",
    "ModelClosed",
    "SessionReused",
]


class AnekitError(Exception):
    """Base class of every anekit error."""


class MilSyntaxError(AnekitError, ValueError):
    """MIL text that does not parse: carries file, line, column and the offending line."""

    def __init__(
        self,
        message: str,
        *,
        line: int,
        column: int,
        source_line: str = "",
        file: str | None = None,
    ) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        self.file = file
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"{self.file or '<mil>'}:{self.line}:{self.column}"
        text = f"{where}: {self.message}"
        if self.source_line:
            line, at = _around(self.source_line, max(self.column - 1, 0))
            text += f"\n    {line}\n    {' ' * at}^"
        return text


_SHOWN_LINE = 160  # characters of a long source line an error shows, around the column
# control characters (NUL, escape sequences) would act on the terminal: shown as "?"
_CONTROLS = {c: "?" for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F)}


def _around(line: str, index: int) -> tuple[str, int]:
    """The part of ``line`` an error shows around ``index``, and where ``index`` falls in it."""
    if len(line) <= _SHOWN_LINE:
        return line.translate(_CONTROLS), index
    start = min(max(index - _SHOWN_LINE // 2, 0), len(line) - _SHOWN_LINE)
    head = "..." if start else ""
    tail = "..." if start + _SHOWN_LINE < len(line) else ""
    shown = line[start : start + _SHOWN_LINE].translate(_CONTROLS)
    return head + shown + tail, index - start + len(head)


class MilTypeError(AnekitError, TypeError, ValueError):
    """A well-formed program whose types, shapes or names are inconsistent."""

    def __init__(
        self,
        message: str,
        *,
        op: str | None = None,
        param: str | None = None,
        line: int | None = None,
        column: int | None = None,
        file: str | None = None,
    ) -> None:
        self.message = message
        self.op = op
        self.param = param
        self.line = line
        self.column = column
        self.file = file
        super().__init__(self._render())

    def _render(self) -> str:
        parts = []
        if self.line is not None:
            loc = f"{self.file or '<mil>'}:{self.line}"
            if self.column is not None:
                loc += f":{self.column}"
            parts.append(loc)
        if self.op is not None:
            parts.append(f"op {self.op!r}" + (f" parameter {self.param!r}" if self.param else ""))
        elif self.param is not None:
            parts.append(f"parameter {self.param!r}")
        prefix = ": ".join(parts)
        return f"{prefix}: {self.message}" if prefix else self.message


class WeightFileError(AnekitError, ValueError):
    """A weight.bin (MILBlob) file or BLOBFILE reference that is wrong: names file and offset."""

    def __init__(self, message: str, *, file: str | None = None, offset: int | None = None) -> None:
        self.message = message
        self.file = file
        self.offset = offset
        where = file or "<weights>"
        if offset is not None:
            where += f" @ offset {offset}"
        super().__init__(f"{where}: {message}")


class BackendUnavailable(AnekitError):
    """The requested backend does not exist or cannot run on this machine."""

    def __init__(
        self, message: str, *, backend: str | None = None, available: tuple[str, ...] = ()
    ) -> None:
        self.backend = backend
        self.available = tuple(available)
        if available:
            message += f" (available here: {', '.join(available)})"
        super().__init__(message)


class CompileError(AnekitError):
    """The backend's compiler rejected a program; carries the framework's error domain and code."""

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        domain: str | None = None,
        code: int | None = None,
        user_info: dict | None = None,
    ) -> None:
        self.line = line
        self.domain = domain
        self.code = code
        self.user_info = user_info  # the NSError's userInfo, as plain Python values
        prefix = f"MIL line {line}: " if line is not None else ""
        suffix = f" [{domain} {code}]" if domain is not None else ""
        super().__init__(f"{prefix}{message}{suffix}")


class EvaluationError(AnekitError):
    """Running a compiled kernel failed (framework error, worker crash, bad output)."""

    def __init__(
        self,
        message: str,
        *,
        domain: str | None = None,
        code: int | None = None,
        user_info: dict | None = None,
    ) -> None:
        self.domain = domain
        self.code = code
        self.user_info = user_info  # the NSError's userInfo, as plain Python values
        suffix = f" [{domain} {code}]" if domain is not None else ""
        super().__init__(f"{message}{suffix}")


class CompileBudgetExhausted(CompileError):
    """This process is about to exceed the ANE's per-process compile limit."""

    def __init__(self, used: int, limit: int) -> None:
        self.used = used
        self.limit = limit
        super().__init__(
            f"compile budget exhausted: {used} compiles in this process, limit {limit}; "
            "use anekit.compile(..., isolate=True) to host kernels in a recycled worker"
        )


class CheckpointError(AnekitError, ValueError):
    """A training checkpoint that is missing, corrupt or does not match the model."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class TrainingDiverged(AnekitError):
    """Training made a parameter inf or NaN (a learning rate far too high): the run stops unsaved."""

    def __init__(self, message: str, *, step: int) -> None:
        self.step = step
        super().__init__(message)


class DistributedError(AnekitError):
    """A data-parallel run failed: an engine missing, a rank dead, hung or diverged, ranks disagreeing."""

    def __init__(self, message: str, *, rank: int | None = None) -> None:
        self.rank = rank  # the rank at fault, when one is known
        super().__init__(message)


class ConversionError(AnekitError, ValueError):
    """A model that cannot be converted, or converts wrongly: names every node, op and source line.

    ``problems`` holds one ``(node, op, source)`` triple per offending graph node, so a
    model with several unsupported ops reports all of them at once.
    """

    def __init__(
        self,
        message: str,
        *,
        problems: tuple[tuple[str, str, str], ...] = (),
        output: str | None = None,
    ) -> None:
        self.message = message
        self.problems = tuple(problems)
        self.output = output
        lines = [message]
        for node, op, source in self.problems:
            lines.append(f"  {op} (node {node!r})" + (f" at {source}" if source else ""))
        super().__init__("\n".join(lines))


class NumericsOverflow(ConversionError):
    """A converted program that would overflow on the engine and cannot be rewritten to fit.

    Names the op (``op``, ``op_type``), its MIL source line (``line``), where it came from in
    the user's model (``source``) and the bound its values reached (``bound``).
    """

    def __init__(
        self,
        message: str,
        *,
        op: str,
        op_type: str,
        line: int | None,
        source: str,
        bound: str,
    ) -> None:
        self.op, self.op_type, self.line, self.source, self.bound = op, op_type, line, source, bound
        where = f"MIL line {line}" if line is not None else "no MIL line"
        super().__init__(
            f"{message}: {op_type} {op!r} ({where}), {bound}",
            problems=((op, op_type, source),),
        )


class InspectError(AnekitError, ValueError):
    """A compiled binary (hwx, E5, FlatBuffer) that cannot be read: names the offset."""

    def __init__(self, message: str, *, offset: int | None = None, file: str | None = None) -> None:
        self.offset = offset
        self.file = file
        where = file or "<binary>"
        if offset is not None:
            where += f" @ 0x{offset:x}"
        super().__init__(f"{where}: {message}")


class UsageError(AnekitError, ValueError):
    """A bad argument or input: a path that is missing or of the wrong kind, a malformed flag value.

    The command line prints it as ``anekit COMMAND: error: ...`` and exits 2.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.message = message
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class KernelClosed(UsageError):
    """A kernel (or one of its buffer sets) was used after ``close()`` began.

    ``close()`` waits for the calls already in flight; any call that starts later raises
    this, like Python's ``ValueError`` for a closed file.
    """

    def __init__(self, kernel: str) -> None:
        self.kernel = kernel
        super().__init__(f"{kernel} is closed; compile the program again to run it")


class UnknownName(UsageError, KeyError):
    """A name a kernel or buffer set does not have (an input or output): lists the names there
    are. Also a ``KeyError``, as a lookup by a missing name is."""

    def __str__(self) -> str:  # KeyError would quote the message
        return Exception.__str__(self)


# What the user reads for the errors a path can give; others keep the system's wording.
_OS_REASONS = {
    errno.ENOENT: "no such file or directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EISDIR: "is a directory; expected a file",
    errno.ENOTDIR: "a component of the path is not a directory",
    errno.ENOSPC: "no space left on the device",
    errno.EROFS: "the file system is read-only",
    errno.ENAMETOOLONG: "the file name is too long",
}


def os_reason(err: OSError) -> str:
    """A short phrase for an OSError, without the ``[Errno N]`` prefix (the path is not in it)."""
    if err.errno in _OS_REASONS:
        return _OS_REASONS[err.errno]
    return (err.strerror or type(err).__name__).lower()


class ModelError(AnekitError, ValueError):
    """A language-model directory or file that cannot be loaded: names the file and the tensor."""

    def __init__(self, message: str, *, path: str | None = None, tensor: str | None = None) -> None:
        self.path = path
        self.tensor = tensor
        where = path or "<model>"
        if tensor is not None:
            where += f": tensor {tensor!r}"
        super().__init__(f"{where}: {message}")


class ModelClosed(UsageError):
    """A language model (or one of its sessions) was used after ``close()``."""


class SessionReused(UsageError):
    """A generator whose KV cache a later generation of the same session has taken over."""


class GarbageValues(AnekitError, ArithmeticError):
    """A model's values became garbage (non-finite, saturated, or logits without variance).

    Raised instead of sampling from them: names the token position and the first layer (or
    op) where the values went wrong, so a broken model never emits tokens silently.
    """

    def __init__(self, message: str, *, position: int, where: str) -> None:
        self.position = position
        self.where = where
        super().__init__(f"position {position}, {where}: {message}")
