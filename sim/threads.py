"""Torch's thread count for a task's step: the one place that sets it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def single_torch_thread() -> Iterator[None]:
    """Torch work of an env step runs on one thread: its ops are small (N x 12 and the like),
    where a parallel region costs more than it saves, and on a shared machine each one can
    wait a scheduler tick for its second thread (measured: a (1024, 16) @ (16, 9) matmul at
    32 us on one thread, 52 us on two, and ~10 ms in the step while other jobs ran)."""
    before = torch.get_num_threads()
    if before != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if before != 1:
            torch.set_num_threads(before)
