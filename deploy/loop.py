"""A fixed-rate control loop on an absolute schedule.

Deadlines are `start + k * period`, never `last wake-up + period`, so lateness in one cycle
does not shift the rest (no drift). A cycle that overruns its deadline is counted, and the
schedule skips to the next deadline still ahead. Each cycle's latency (work time) and wake-up
jitter go into histograms. The garbage collector is disabled inside the loop and run between
cycles only when there is slack. CPU affinity and SCHED_FIFO are applied where the OS permits,
with a warning where it does not, as is a PM QoS request that keeps CPUs out of slow idle
states (`cpu_latency_request`).

Waking on time, without real-time privileges (Linux; elsewhere plain `time.sleep`):
- the thread sleeps until each deadline itself (`clock_nanosleep` on CLOCK_MONOTONIC with
  TIMER_ABSTIME), so a preemption between reading the clock and falling asleep does not
  push the wake-up back, as it does with a relative sleep;
- `wakeup_hints()`: timer slack 1 ns (by default the kernel may fire a sleeper's timer up to
  50 us late, to batch wake-ups) and a 100 us scheduler slice (`sched_setattr`): under
  EEVDF (Linux 6.12+) a waking thread that asks for a short slice preempts the running one
  instead of waiting for its slice (0.7 ms x (1 + log2 CPUs) by default) to end. Measured at
  50 Hz on 2 busy cores (two training runs): wake-up lateness p99 2.7-4.0 ms with the
  default slice, 0.2-0.8 ms with 100 us. `slice_threads` gives the same slice to other
  threads of the process (a DDS receive thread, which wakes a loop waiting on data);
- an optional spin: sleep until `spin_s` before the deadline, then poll the clock, which takes
  the remaining wake-up latency out on an idle machine. Keep it shorter than the slice.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import gc
import itertools
import logging
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
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


CPU_LATENCY_DEVICE = "/dev/cpu_dma_latency"


@contextmanager
def cpu_latency_request(max_us: int | None,
                        device: str | None = None) -> Iterator[list[str]]:
    """Ask the kernel (PM QoS) to keep every CPU out of idle states that take longer than
    `max_us` to leave, while inside; yields warnings for what was not permitted.

    Linux holds the request as long as the file stays open, and drops it when the process
    exits, even on a crash. Why: an idle CPU that halts (a deep C-state, or a VM's vCPU
    handed back to the host) wakes late and with cold caches; measured on this project's
    2-vCPU VM, a state-to-command exchange after 5 ms idle took about twice as long without
    the request (bench/deploy_latency.py). It costs power: the CPUs poll instead of halting.
    Writing the device needs root (or a udev rule granting the node's user)."""
    warnings: list[str] = []
    fd = None
    device = device or CPU_LATENCY_DEVICE
    if max_us is not None:
        try:
            fd = os.open(device, os.O_WRONLY)
            os.write(fd, int(max_us).to_bytes(4, sys.byteorder, signed=True))
            log.info("PM QoS: CPU wake-up latency held at or under %d us", max_us)
        except OSError as exc:
            if fd is not None:
                os.close(fd)
                fd = None
            warnings.append(f"CPU wake-up latency request ({max_us} us) not applied: {exc} "
                            "(root, or write access to the device, is needed)")
            log.warning(warnings[-1])
    try:
        yield warnings
    finally:
        if fd is not None:
            os.close(fd)


def pin_process(cpu: int) -> bool:
    """Pin the calling thread, and the threads it starts from now on, to `cpu`; False where
    not permitted (set_realtime, called after, reports it)."""
    try:
        os.sched_setaffinity(0, {cpu})
    except (OSError, AttributeError):
        return False
    return True


def set_realtime(cpu: int | None = None, fifo_priority: int | None = None) -> list[str]:
    """Pin to a CPU and/or use SCHED_FIFO; returns warnings for what was not permitted."""
    warnings = []
    if cpu is not None and not pin_process(cpu):
        warnings.append(f"CPU affinity {cpu} not applied: not permitted or no such CPU")
    if fifo_priority is not None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(fifo_priority))
        except (OSError, AttributeError) as exc:
            warnings.append(f"SCHED_FIFO priority {fifo_priority} not applied: {exc}")
    for w in warnings:
        log.warning(w)
    return warnings


# --- Linux: waking on time -------------------------------------------------------------------
_CLOCK_MONOTONIC, _TIMER_ABSTIME = 1, 1
_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30
_SCHED_OTHER = 0
_SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
_SYS_SCHED_GETATTR = {"x86_64": 315, "aarch64": 275}
WAKEUP_SLICE_US = 100.0  # the shortest slice Linux accepts


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _SchedAttr(ctypes.Structure):  # struct sched_attr, version 1 (56 bytes)
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32),
                ("flags", ctypes.c_uint64), ("nice", ctypes.c_int32),
                ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64)]


def _load_libc() -> ctypes.CDLL | None:
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()


def _make_sleep_until() -> Callable[[float], None] | None:
    """sleep_until(t), t in time.perf_counter's seconds (CLOCK_MONOTONIC on Linux), or None."""
    if _LIBC is None or not hasattr(_LIBC, "clock_nanosleep") or \
            time.get_clock_info("perf_counter").implementation != \
            "clock_gettime(CLOCK_MONOTONIC)":
        return None
    nanosleep = _LIBC.clock_nanosleep
    nanosleep.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Timespec), ctypes.c_void_p]
    nanosleep.restype = ctypes.c_int

    def sleep_until(t: float) -> None:
        sec = int(t)
        ts = _Timespec(sec, min(999_999_999, int((t - sec) * 1e9)))
        while nanosleep(_CLOCK_MONOTONIC, _TIMER_ABSTIME, ctypes.byref(ts), None) == errno.EINTR:
            pass  # a signal: its Python handler runs here, then sleep on to the same deadline

    return sleep_until


sleep_until = _make_sleep_until()


def _sched_attr(syscalls: dict[str, int]) -> int | None:
    return None if _LIBC is None else syscalls.get(platform.machine())


def _get_attr(tid: int) -> _SchedAttr | None:
    nr = _sched_attr(_SYS_SCHED_GETATTR)
    attr = _SchedAttr()
    if nr is None or _LIBC.syscall(nr, tid, ctypes.byref(attr), ctypes.sizeof(attr), 0) != 0:
        return None
    return attr


def _set_slice(tid: int, old: _SchedAttr, slice_ns: int) -> bool:
    nr = _sched_attr(_SYS_SCHED_SETATTR)
    new = _SchedAttr(ctypes.sizeof(_SchedAttr), _SCHED_OTHER, 0, old.nice, 0, slice_ns, 0, 0)
    return nr is not None and _LIBC.syscall(nr, tid, ctypes.byref(new), 0) == 0


def process_threads() -> dict[int, str]:
    """This process's threads: name (as the OS shows it) by thread id; empty off Linux."""
    out = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[int(tid)] = f.read().strip()
    except OSError:
        pass
    return out


def slice_threads(tids: list[int], slice_us: float = WAKEUP_SLICE_US) -> list[int]:
    """Give other threads of this process (a middleware's receive threads: they wake first
    when a message arrives, then wake the waiting loop) the short scheduler slice of
    `wakeup_hints`, for the rest of their life; returns the ids it was applied to. Normal
    (not real-time) threads only; best effort, Linux only."""
    done = []
    for tid in tids:
        old = _get_attr(tid)
        if old is not None and old.policy == _SCHED_OTHER and \
                _set_slice(tid, old, int(slice_us * 1000)):
            done.append(tid)
    return done


@contextmanager
def wakeup_hints(slice_us: float | None = WAKEUP_SLICE_US) -> Iterator[list[str]]:
    """Timer slack 1 ns and a `slice_us` scheduler slice for the calling thread while inside
    (restored after); yields what was applied. Best effort: Linux only, and the slice only for
    a normal (not real-time) thread; older kernels accept the slice and ignore it."""
    applied: list[str] = []
    if _LIBC is None:
        yield applied
        return
    old_slack = _LIBC.prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0)
    if old_slack >= 0 and _LIBC.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0) == 0:
        applied.append("timer slack 1 ns")
    old = _get_attr(0) if slice_us else None
    sliced = old is not None and old.policy == _SCHED_OTHER and \
        _set_slice(0, old, int(slice_us * 1000))
    if sliced:
        applied.append(f"scheduler slice {slice_us:g} us")
    log.debug("wake-up hints: %s", ", ".join(applied) or "none")
    try:
        yield applied
    finally:
        if sliced:
            _set_slice(0, old, old.runtime)
        if old_slack >= 0:
            _LIBC.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(old_slack), 0, 0, 0)


def run_loop(cycle: Callable[[int], bool], rate_hz: float, max_cycles: int | None = None,
             clock: Callable[[], float] = time.perf_counter,
             sleep: Callable[[float], None] | None = None, spin_s: float = 0.0,
             hints: bool = True) -> LoopStats:
    """Call `cycle(k)` at rate_hz until it returns False or max_cycles have run.

    `spin_s`: sleep until that long before each deadline, then poll the clock: the OS wakes a
    sleeper late (scheduling); polling the last stretch costs spin_s of CPU per period and
    takes most of that lateness out. `sleep` (relative seconds) is for a simulated clock; by
    default the thread sleeps until the deadline itself (`sleep_until`) where it can.
    `hints`: `wakeup_hints()` for the loop's thread.
    """
    until = sleep_until if sleep is None and clock is time.perf_counter else None
    relative = sleep or time.sleep
    period = 1.0 / rate_hz
    stats = LoopStats()
    with wakeup_hints() if hints else nullcontext():
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            start = clock()
            k = 0
            while max_cycles is None or stats.cycles < max_cycles:
                deadline = start + k * period
                now = clock()
                if deadline - now > spin_s:
                    if until is not None:
                        until(deadline - spin_s)
                    else:
                        relative(deadline - now - spin_s)
                woke = clock()
                while spin_s > 0 and woke < deadline:
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


def run_triggered(cycle: Callable[[int], bool], wait: Callable[[float], bool], timeout_s: float,
                  max_cycles: int | None = None,
                  clock: Callable[[], float] = time.perf_counter,
                  hints: bool = True, warm: Sequence[Callable[[], None]] = (),
                  prewarm_s: float = 0.0) -> LoopStats:
    """Call `cycle(k)` as soon as `wait` reports input, or after `timeout_s` without any (the
    cycle then sees stale input): the robot's messages pace the loop (lock-step). Latency is
    recorded per cycle; jitter does not apply; a timed-out wait counts as a deadline miss.
    `hints`: `wakeup_hints()` for the loop's thread (a short slice wakes it sooner on input).
    `warm`, `prewarm_s`: the next input is expected one period (`timeout_s`) after the last;
    from `prewarm_s` before then, run the `warm` steps in turn and poll between them instead
    of blocking (the cycle then finds its code and data in the caches)."""
    stats = LoopStats()
    with wakeup_hints() if hints else nullcontext():
        gc_was_enabled = gc.isenabled()
        gc.disable()
        woke = clock()
        try:
            while max_cycles is None or stats.cycles < max_cycles:
                if not warm or prewarm_s <= 0:
                    got = wait(timeout_s)
                else:
                    got = _warm_wait(wait, warm, clock, woke + timeout_s - prewarm_s,
                                     clock() + timeout_s)
                if not got:
                    stats.deadline_misses += 1
                start = woke = clock()
                keep_going = cycle(stats.cycles)
                stats.latency.add((clock() - start) * 1e6)
                stats.cycles += 1
                if stats.cycles % 64 == 0:
                    gc.collect(0)
                if not keep_going:
                    break
        finally:
            if gc_was_enabled:
                gc.enable()
    return stats


def _warm_wait(wait: Callable[[float], bool], warm: Sequence[Callable[[], None]],
               clock: Callable[[], float], warm_from: float, deadline: float) -> bool:
    """Block until `warm_from`, then run the `warm` steps in turn with a non-blocking poll
    after each, until input or `deadline`; True on input."""
    if wait(max(0.0, min(warm_from, deadline) - clock())):
        return True
    for step in itertools.cycle(warm):
        if clock() >= deadline:
            return False
        step()
        if wait(0.0):
            return True
    return False
