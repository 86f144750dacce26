"""Environment variables anekit reads (all of them, here and nowhere else), and the machine's memory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV_BACKEND = "ANEKIT_BACKEND"
ENV_CACHE_DIR = "ANEKIT_CACHE_DIR"


def env_backend() -> str | None:
    """The backend named by ``$ANEKIT_BACKEND``, or None when unset or empty."""
    value = os.environ.get(ENV_BACKEND, "").strip()
    return value or None


ENV_NUMERICS = "ANEKIT_NUMERICS"


def env_numerics() -> str | None:
    """The numerics profile named by ``$ANEKIT_NUMERICS`` ("ideal", a chip, a file), or None."""
    value = os.environ.get(ENV_NUMERICS, "").strip()
    return value or None


def cache_dir() -> Path:
    """Where anekit keeps what it caches between runs (self-check verdicts, compiled models).

    ``$ANEKIT_CACHE_DIR``, else ``~/Library/Caches/anekit`` on macOS, else
    ``$XDG_CACHE_HOME/anekit`` (``~/.cache/anekit``).
    """
    named = os.environ.get(ENV_CACHE_DIR, "").strip()
    if named:
        return Path(named)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "anekit"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "anekit"


# Where the system does not say (sysconf is POSIX; Windows has neither name).
FALLBACK_PHYSICAL_MEMORY = 8 * 2**30


def physical_memory() -> int:
    """This machine's physical memory in bytes (8 GiB assumed where the system does not say).

    Not an environment variable, but the other fact about the machine that bounds what
    anekit may allocate for an input before it allocates it.
    """
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return FALLBACK_PHYSICAL_MEMORY


def read_limit() -> int:
    """The most bytes anekit reads whole from one input file: half of physical memory.

    A larger file would leave no room to decode it; files that need not be read whole
    (training tokens) are memory-mapped instead.
    """
    return physical_memory() // 2


# The launchers' variables: mlx.launch (ring: MLX_RANK and MLX_HOSTFILE, a JSON list of each
# rank's "ip:port" addresses; JACCL and NCCL also MLX_WORLD_SIZE) and torchrun (RANK,
# WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). `anekit train --nproc` sets the same ones.
MLX_RANK, MLX_HOSTFILE, MLX_WORLD_SIZE = "MLX_RANK", "MLX_HOSTFILE", "MLX_WORLD_SIZE"
TORCH_RANK, TORCH_WORLD_SIZE = "RANK", "WORLD_SIZE"
TORCH_MASTER_ADDR, TORCH_MASTER_PORT = "MASTER_ADDR", "MASTER_PORT"
GLOO_SOCKET_IFNAME = "GLOO_SOCKET_IFNAME"
# Set by `anekit train --nproc` for its ranks: the supervisor's pid (a rank whose supervisor
# died exits instead of training on alone).
ENV_SUPERVISOR = "ANEKIT_DIST_SUPERVISOR"
# BLAS and OpenMP thread counts the supervisor gives each local rank unless they are set.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


def launched_rank(engine: str) -> tuple[int, int | None] | None:
    """(rank, world size or None) from ``engine``'s launcher environment; None when not launched.

    The MLX ring backend's world size is the length of its hostfile, which MLX reads;
    None here means "ask the group". Raises ValueError for a variable that is not an integer.
    """
    names = (MLX_RANK, MLX_WORLD_SIZE) if engine == "mlx" else (TORCH_RANK, TORCH_WORLD_SIZE)
    rank, size = (os.environ.get(name, "").strip() for name in names)
    if not rank:
        return None
    try:
        return int(rank), int(size) if size else None
    except ValueError:
        raise ValueError(f"${names[0]}={rank!r}, ${names[1]}={size!r}: expected integers") from None


def supervisor_pid() -> int | None:
    """The pid of the `anekit train --nproc` process that started this rank, if one did."""
    value = os.environ.get(ENV_SUPERVISOR, "").strip()
    return int(value) if value.isdigit() else None


def mlx_backend() -> str:
    """The MLX distributed backend the launcher's variables ask for: jaccl, ring, or any."""
    if os.environ.get("MLX_JACCL_COORDINATOR") or os.environ.get("MLX_IBV_DEVICES"):
        return "jaccl"
    return "ring" if os.environ.get(MLX_HOSTFILE) else "any"
