"""A fixed-rate control loop on an absolute schedule.

Deadlines are `start + k * period`, never `last wake-up + period`, so lateness in one cycle
does not shift the rest (no drift). A cycle that overruns its deadline is counted, and the
schedule skips to the next deadline still ahead. Each cycle's latency (work time) and wake-up
jitter go into histograms. The garbage collector is disabled inside the loop and run between
cycles only when there is slack. CPU affinity and SCHED_FIFO are applied where the OS permits,
with a warning where it does not.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger("simreal.loop")

# histogram bin edges in microseconds: 1 us to ~1 s, 10 bins per decade
EDGES_US = np.logspace(0, 6, 61)


@dataclass
class Histogram:
    counts: np.ndarray = field(default_factory=lambda: np.zeros(len(EDGES_US) + 1, np.int64))
    samples: list[float] = field(default_factory=list)  # kept for exact percentiles
    max_samples: int = 100_000

    def add(self, us: float) -> None:
        self.counts[np.searchsorted(EDGES_US, us)] += 1
        if len(self.samples) < self.max_samples:
            self.samples.append(us)

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.samples, q)) if self.samples else float("nan")


@dataclass
class LoopStats:
    cycles: int = 0
    deadline_misses: int = 0
    latency: Histogram = field(default_factory=Histogram)
    jitter: Histogram = field(default_factory=Histogram)

    def summary(self) -> dict[str, float]:
        return {"cycles": self.cycles, "deadline_misses": self.deadline_misses,
                "latency_p50_us": self.latency.percentile(50),
                "latency_p99_us": self.latency.percentile(99),
                "jitter_p50_us": self.jitter.percentile(50),
                "jitter_p99_us": self.jitter.percentile(99),
                "jitter_max_us": max(self.jitter.samples, default=float("nan"))}


def set_realtime(cpu: int | None = None, fifo_priority: int | None = None) -> list[str]:
    """Pin to a CPU and/or use SCHED_FIFO; returns warnings for what was not permitted."""
    warnings = []
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except (OSError, AttributeError) as exc:
            warnings.append(f"CPU affinity {cpu} not applied: {exc}")
    if fifo_priority is not None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(fifo_priority))
        except (OSError, AttributeError) as exc:
            warnings.append(f"SCHED_FIFO priority {fifo_priority} not applied: {exc}")
    for w in warnings:
        log.warning(w)
    return warnings


def run_loop(cycle: Callable[[int], bool], rate_hz: float, max_cycles: int | None = None,
             clock: Callable[[], float] = time.perf_counter,
             sleep: Callable[[float], None] = time.sleep) -> LoopStats:
    """Call `cycle(k)` at rate_hz until it returns False or max_cycles have run."""
    period = 1.0 / rate_hz
    stats = LoopStats()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = clock()
        k = 0
        while max_cycles is None or stats.cycles < max_cycles:
            deadline = start + k * period
            now = clock()
            if deadline > now:
                sleep(deadline - now)
            woke = clock()
            stats.jitter.add(max(0.0, woke - deadline) * 1e6)
            keep_going = cycle(stats.cycles)
            done = clock()
            stats.latency.add((done - woke) * 1e6)
            stats.cycles += 1
            next_deadline = start + (k + 1) * period
            if done > next_deadline:  # overran: count it and skip to the next future slot
                stats.deadline_misses += 1
                k = int((done - start) / period) + 1
            else:
                k += 1
                if next_deadline - done > 0.5 * period:
                    gc.collect(0)  # the young generation only, in the slack
            if not keep_going:
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    return stats
