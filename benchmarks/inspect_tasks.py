"""hwx task-descriptor parsing scales linearly: time per MiB at three sizes of adversarial __text.

The input is one descriptor of one-word register blocks, the most blocks a size can hold;
the old scan asked "only zeros left?" at every block (``any(data[pos:end])``), which made
it quadratic (1 MiB: 11.6 s, against 1.2 s now, on the shared 2-core machine). Prints the
min and median of 3 runs per size and the ratio of the largest size's time to the
smallest's, scaled by their size ratio (1.0 is linear, 16 would be quadratic).
"""

from __future__ import annotations

import struct
import time

from anekit.inspect.tasks import HEADER_WORDS, parse_tasks

SIZES = (2**16, 2**18, 2**20)


def adversarial_text(size: int) -> bytes:
    """A descriptor header, then ``(size - 40) / 8`` blocks of one data word each."""
    header = bytes(4 * HEADER_WORDS)
    return header + struct.pack("<II", 0, 1) * ((size - len(header)) // 8)


def main() -> None:
    mins = {}
    for size in SIZES:
        data = adversarial_text(size)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            parse_tasks(data)
            times.append(time.perf_counter() - start)
        mins[size] = min(times)
        print(f"{size:>8} bytes: min {min(times):.3f} s, median {sorted(times)[1]:.3f} s")
    small, large = SIZES[0], SIZES[-1]
    growth = (mins[large] / mins[small]) / (large / small)
    print(f"time growth per size growth, {small} -> {large} bytes: {growth:.2f} (1 = linear)")


if __name__ == "__main__":
    main()
