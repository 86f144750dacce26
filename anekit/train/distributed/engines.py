"""The two engines behind :class:`Communicator`: MLX distributed and torch.distributed with Gloo.

Both are optional (the ``dist`` extra) and imported only here, when a run asks for one;
a missing or unusable engine is a DistributedError saying what to install.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np

from anekit import config
from anekit.errors import DistributedError
from anekit.train.distributed import ENGINES, Communicator
from anekit.train.distributed.watchdog import Watchdog

# Joining waits for every rank to start (import, load data, compile): at least this long.
JOIN_SECONDS = 60.0
INSTALL = "pip install 'anekit[dist]' (mlx on macOS, mlx[cpu] on Linux, torch==2.13.0)"


class MlxCommunicator(Communicator):
    """``mlx.core.distributed``: the group ``mlx.launch`` (or ``anekit train --nproc``) set up."""

    engine = "mlx"

    def __init__(self, group, mx, **kwargs) -> None:
        super().__init__(group.rank(), group.size(), **kwargs)
        self._group, self._mx = group, mx

    def _sum(self, flat: np.ndarray) -> np.ndarray:
        mx = self._mx
        total = mx.distributed.all_sum(mx.array(flat), group=self._group, stream=mx.cpu)
        return np.asarray(total)


class TorchCommunicator(Communicator):
    """``torch.distributed`` with the Gloo backend, set up from torchrun's variables."""

    engine = "torch"

    def __init__(self, dist, torch, **kwargs) -> None:
        super().__init__(dist.get_rank(), dist.get_world_size(), **kwargs)
        self._dist, self._torch = dist, torch

    def _sum(self, flat: np.ndarray) -> np.ndarray:
        self._dist.all_reduce(self._torch.from_numpy(flat))  # in place: the tensor shares flat
        return flat

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()
        super().close()


def connect(engine: str, timeout: float, bucket_bytes: int) -> Communicator:
    """Join the group the launcher's environment describes, on ``engine`` (``mlx`` or ``torch``).

    Raises DistributedError when the engine is not installed or not usable here, or when
    no launcher set this process up (start it with mlx.launch, torchrun or --nproc).
    """
    if engine not in ENGINES:
        raise DistributedError(f"unknown engine {engine!r}; expected one of {list(ENGINES)}")
    try:
        launched = config.launched_rank(engine)
    except ValueError as e:
        raise DistributedError(f"the launcher's environment: {e}") from e
    if launched is None:
        launcher = "mlx.launch" if engine == "mlx" else "torchrun"
        names = "$MLX_RANK" if engine == "mlx" else "$RANK and $WORLD_SIZE"
        raise DistributedError(
            f"--distributed {engine}: {names} not set; start the ranks with {launcher} "
            "or let anekit start them on this machine with --nproc N"
        )
    rank, world = launched
    if world == 1:  # one rank: nothing to exchange, no engine needed
        supervisor = config.supervisor_pid()
        watchdog = None if supervisor is None else Watchdog(rank, timeout, "none", supervisor)
        return Communicator(rank, world, bucket_bytes, watchdog)
    join = max(timeout, JOIN_SECONDS)
    watchdog = Watchdog(rank, join, "another rank", config.supervisor_pid())
    watchdog.arm(f"joining the {engine} group")
    try:
        comm = (_mlx if engine == "mlx" else _torch)(join, bucket_bytes, watchdog)
    except BaseException:
        watchdog.stop()
        raise
    watchdog.disarm()
    watchdog.timeout, watchdog.peers = timeout, comm.peers()
    return comm


def _mlx(timeout: float, bucket_bytes: int, watchdog: Watchdog) -> Communicator:
    try:
        import mlx.core as mx
    except ImportError as e:
        raise DistributedError(f"--distributed mlx needs MLX ({e}): {INSTALL}") from e
    if not mx.distributed.is_available():
        raise DistributedError(
            f"--distributed mlx: this MLX ({mx.__version__}) has no distributed backend: {INSTALL}"
        )
    try:
        group = mx.distributed.init(strict=True, backend=config.mlx_backend())
    except (RuntimeError, ValueError) as e:
        raise DistributedError(f"--distributed mlx: cannot join the group: {e}") from e
    return MlxCommunicator(group, mx, bucket_bytes=bucket_bytes, watchdog=watchdog)


def _torch(timeout: float, bucket_bytes: int, watchdog: Watchdog) -> Communicator:
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        raise DistributedError(f"--distributed torch needs PyTorch ({e}): {INSTALL}") from e
    if not dist.is_available() or not dist.is_gloo_available():
        raise DistributedError(
            f"--distributed torch: this PyTorch ({torch.__version__}) was built without "
            f"torch.distributed or Gloo: {INSTALL}"
        )
    try:
        dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=timeout))
    except (RuntimeError, ValueError) as e:
        raise DistributedError(f"--distributed torch: cannot join the group: {e}") from e
    return TorchCommunicator(dist, torch, bucket_bytes=bucket_bytes, watchdog=watchdog)
