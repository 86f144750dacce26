"""Data-parallel training on existing engines: one small interface over MLX distributed and Gloo.

A :class:`Communicator` sums lists of float32 arrays across ranks in buckets (one engine
call per bucket, never one per tensor), broadcasts arrays from a root, and waits at a
barrier; it knows its rank and the world size. Two engines implement it
(:mod:`anekit.train.distributed.engines`): ``mlx.core.distributed`` (ring over TCP, JACCL
over Thunderbolt 5 RDMA, MPI: whatever MLX was launched with) and ``torch.distributed``
with Gloo. Every collective runs under a :class:`~anekit.train.distributed.watchdog.Watchdog`:
neither engine bounds how long a collective may wait for a dead or hung peer, so that
bound is ours.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from anekit.errors import DistributedError
from anekit.train.distributed.watchdog import Watchdog

ENGINES = ("mlx", "torch")
# PyTorch DistributedDataParallel's default bucket (bucket_cap_mb=25)
DEFAULT_BUCKET_MB = 25.0
# Long enough for a step of a large model on a slow rank; tests pass a few seconds.
DEFAULT_TIMEOUT = 300.0


class Communicator:
    """Collectives of one rank among ``world_size``; this base class is the single-process one."""

    engine = "none"

    def __init__(
        self,
        rank: int = 0,
        world_size: int = 1,
        bucket_bytes: int = int(DEFAULT_BUCKET_MB * 2**20),
        watchdog: Watchdog | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise DistributedError(f"rank {rank} is outside a world of {world_size}", rank=rank)
        if bucket_bytes < 4:
            raise DistributedError(
                f"the bucket size must hold a float32; found {bucket_bytes} bytes"
            )
        self.rank = rank
        self.world_size = world_size
        self.bucket_elements = bucket_bytes // 4
        self.watchdog = watchdog
        self.calls = 0  # engine calls made (one per bucket)
        self.seconds = 0.0  # time spent in them, waiting for peers included

    # -- the interface ------------------------------------------------------------------------
    def all_reduce(self, arrays: list[np.ndarray], what: str = "all_reduce") -> None:
        """Sum every float32 array in place across the ranks, in buckets of ``bucket_bytes``."""
        for a in arrays:
            if a.dtype != np.float32 or not a.flags.c_contiguous or not a.flags.writeable:
                raise DistributedError(
                    f"{what}: expected writable contiguous float32 arrays, found {a.dtype} "
                    f"of shape {list(a.shape)}"
                )
        if self.world_size == 1:
            return
        for pieces in buckets([a.reshape(-1) for a in arrays], self.bucket_elements):
            if len(pieces) == 1:  # a slice of one array: reduced where it lies
                self._reduce_into(pieces[0], what)
                continue
            packed = np.concatenate(pieces)
            self._reduce_into(packed, what)
            offset = 0
            for piece in pieces:
                piece[...] = packed[offset : offset + piece.size]
                offset += piece.size

    def broadcast(self, arrays: list[np.ndarray], root: int = 0, what: str = "broadcast") -> None:
        """Give every rank ``root``'s values of ``arrays`` (any dtype whose size is whole int32s), in place.

        Done as a sum of the arrays' bits as int32, zeros on every rank but the root:
        exact for any value (a float sum would turn -0.0 into 0.0), and the one collective
        both engines share.
        """
        for a in arrays:
            if a.nbytes % 4 or not a.flags.c_contiguous or not a.flags.writeable:
                raise DistributedError(
                    f"{what}: expected writable contiguous arrays of whole 32-bit words, found "
                    f"{a.dtype} of shape {list(a.shape)}"
                )
            if self.world_size == 1:
                continue
            words = a.reshape(-1).view(np.int32)
            if self.rank != root:
                words[...] = 0
            for start in range(0, words.size, self.bucket_elements):
                self._reduce_into(words[start : start + self.bucket_elements], what)

    def barrier(self, what: str = "barrier") -> None:
        """Return once every rank has reached this call."""
        if self.world_size > 1:
            self._reduce_into(np.zeros(1, np.int32), what)

    def close(self) -> None:
        """Leave the group and stop the watchdog."""
        if self.watchdog is not None:
            self.watchdog.stop()

    # -- built on the interface ---------------------------------------------------------------
    def broadcast_json(self, value: Any, root: int = 0) -> Any:
        """``root``'s JSON value, on every rank."""
        data = json.dumps(value).encode() if self.rank == root else b""
        size = np.array([len(data)], np.int64)
        self.broadcast([size], root, "broadcast of the run's settings")
        buf = np.zeros(-(-int(size[0]) // 4) * 4, np.uint8)
        buf[: len(data)] = np.frombuffer(data, np.uint8)
        self.broadcast([buf], root, "broadcast of the run's settings")
        return json.loads(buf[: int(size[0])].tobytes().decode())

    def check_equal(self, data: bytes | np.ndarray, what: str) -> None:
        """DistributedError on every rank when ``data`` (this rank's) differs from rank 0's.

        Only a CRC-32 travels: four bytes per rank, cheap enough for every parameter.
        """
        mine = np.array([zlib.crc32(data) - 2**31], np.int32)
        reference = mine.copy()
        self.broadcast([reference], 0, f"broadcast of {what}")
        differs = np.zeros(self.world_size, np.float32)
        differs[self.rank] = float(reference[0] != mine[0])
        self.all_reduce([differs], f"comparison of {what}")
        bad = [int(r) for r in np.flatnonzero(differs)]
        if bad:
            ranks = ", ".join(map(str, bad))
            raise DistributedError(f"{what} on rank(s) {ranks} differ from rank 0's", rank=bad[0])

    # -- what an engine provides --------------------------------------------------------------
    def _reduce_into(self, flat: np.ndarray, what: str) -> None:
        """Sum the contiguous 1-D ``flat`` across ranks in place, under the watchdog."""
        import time

        start = time.perf_counter()
        if self.watchdog is not None:
            self.watchdog.arm(what)
        try:
            result = self._sum(flat)
        except (RuntimeError, OSError, ValueError) as e:  # the engine saw a peer go away
            raise DistributedError(
                f"rank {self.rank}: {what} failed: {self.peers()} died or left ({e})",
                rank=self.rank,
            ) from e
        finally:
            if self.watchdog is not None:
                self.watchdog.disarm()
        if result is not flat:
            flat[...] = result
        self.calls += 1
        self.seconds += time.perf_counter() - start

    def _sum(self, flat: np.ndarray) -> np.ndarray:
        """The engine's sum of ``flat`` across ranks (in place, or a new array)."""
        raise DistributedError(f"the {self.engine!r} communicator has no collectives")

    def peers(self) -> str:
        """The other ranks, named: a dead or hung one is among them."""
        others = [r for r in range(self.world_size) if r != self.rank]
        return f"rank {others[0]}" if len(others) == 1 else f"one of ranks {others}"


def buckets(arrays: list[np.ndarray], size: int) -> Iterator[list[np.ndarray]]:
    """Consecutive pieces of the 1-D ``arrays`` grouped into buckets of at most ``size`` elements.

    An array larger than a bucket is cut into bucket-sized slices; small arrays share one.
    """
    pieces: list[np.ndarray] = []
    room = size
    for a in arrays:
        start = 0
        while start < a.size:
            take = min(room, a.size - start)
            pieces.append(a[start : start + take])
            start += take
            room -= take
            if room == 0:
                yield pieces
                pieces, room = [], size
    if pieces:
        yield pieces
