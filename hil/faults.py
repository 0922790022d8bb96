"""Fault injection on the link and the robot's sensors, seeded and reproducible.

`FaultyLink` sits between the simulated robot's application and the wire (hil/robot.Link):
state messages pass it on their way out, commands on their way in, so both directions of the
robot's link are covered without a relay. Per message it draws, from a generator seeded by
(plan seed, robot instance, direction, topic), a fixed vector of uniforms, so the n-th message
of a topic meets the same fate in every run whatever the timing:

- drop: with probability 1 - prod(1 - rate) over the active drop faults;
- delay: the sum of the active delays, plus uniform jitter in +-jitter_s; a topic's messages
  keep their order (a message is never released before the one sent before it);
- reorder: with the fault's probability a message is held `hold_s` longer and exempt from the
  ordering, so later ones overtake it;
- duplicate: with the fault's probability the message goes out (or is obeyed) twice.

Each drop, duplicate and reorder is reported to the observer with the message's identity, for
the report's accounting. `SensorFaults` edits the signals the robot publishes (bias, noise,
frozen values, NaN bursts); `clock_offset` is the robot's clock error after its jumps.
"""

from __future__ import annotations

import heapq
import itertools
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from simreal.hil.config import (
    ClockJump,
    Delay,
    Drop,
    Duplicate,
    FaultPlan,
    NanBurst,
    Reorder,
    SensorBias,
    SensorFreeze,
    SensorNoise,
)
from simreal.hil.record import identity

DUPLICATE_GAP_S = 0.001  # a duplicate follows its original by this much


class _Direction:
    """One direction of the link: fates, and the queue of messages not yet due."""

    def __init__(self, name: str, faults: Sequence[Any], seed: int, instance: int,
                 report: Callable[..., None], scenario_time: Callable[[], float],
                 clock: Callable[[], float] = time.monotonic):
        self.name, self.faults, self.clock = name, list(faults), clock
        self.seed, self.instance = seed, instance
        self.report, self.scenario_time = report, scenario_time
        self._rng: dict[str, np.random.Generator] = {}
        self._last_release: dict[str, float] = {}
        self._queue: list[tuple[float, int, str, Any]] = []
        self._order = itertools.count()
        self.counts = {"dropped": 0, "duplicated": 0, "reordered": 0, "delayed": 0}

    def _draw(self, topic: str) -> np.ndarray:
        rng = self._rng.get(topic)
        if rng is None:
            key = [self.seed, self.instance, zlib.crc32(self.name.encode()),
                   zlib.crc32(topic.encode())]
            rng = self._rng[topic] = np.random.default_rng(key)
        return rng.random(4)  # drop, duplicate, reorder, jitter: always all four

    def schedule(self, topic: str, item: Any, msg: Any, data: bytes | None) -> int:
        """Queue `item` by its fate; returns how many copies were queued (0: dropped)."""
        u = self._draw(topic)
        t = self.scenario_time()
        active = [f for f in self.faults if f.applies(self.name, topic, t)]
        if not active:
            self._push(topic, self.clock(), item, keep_order=True)
            return 1
        keep = 1.0
        delay = jitter = 0.0
        p_dup = p_reorder = 0.0
        hold = 0.0
        for f in active:
            if isinstance(f, Drop):
                keep *= 1.0 - f.rate
            elif isinstance(f, Delay):
                delay += f.delay_s
                jitter += f.jitter_s
            elif isinstance(f, Duplicate):
                p_dup = 1.0 - (1.0 - p_dup) * (1.0 - f.probability)
            elif isinstance(f, Reorder):
                p_reorder = 1.0 - (1.0 - p_reorder) * (1.0 - f.probability)
                hold = max(hold, f.hold_s)
        if u[0] >= keep:
            self.counts["dropped"] += 1
            self.report("link_drop", topic=topic, key=identity(msg, data), direction=self.name)
            return 0
        release = self.clock() + max(0.0, delay + jitter * (2.0 * u[3] - 1.0))
        if delay or jitter:
            self.counts["delayed"] += 1
        reordered = u[2] < p_reorder
        if reordered:
            self.counts["reordered"] += 1
            self.report("link_reorder", topic=topic, key=identity(msg, data),
                        direction=self.name, hold_s=hold)
            self._push(topic, release + hold, item, keep_order=False)
        else:
            release = self._push(topic, release, item, keep_order=True)
        if u[1] < p_dup:
            self.counts["duplicated"] += 1
            self.report("link_duplicate", topic=topic, key=identity(msg, data),
                        direction=self.name)
            self._push(topic, release + DUPLICATE_GAP_S, item, keep_order=True)
            return 2
        return 1

    def _push(self, topic: str, release: float, item: Any, keep_order: bool) -> float:
        if keep_order:
            release = max(release, self._last_release.get(topic, 0.0))
            self._last_release[topic] = release
        heapq.heappush(self._queue, (release, next(self._order), topic, item))
        return release

    def due(self) -> list[Any]:
        now = self.clock()
        out = []
        while self._queue and self._queue[0][0] <= now:
            out.append(heapq.heappop(self._queue)[3])
        return out

    def pending(self) -> list[tuple[str, Any]]:
        """(topic, item) of every message not yet due, in release order."""
        return [(topic, item) for _, _, topic, item in sorted(self._queue)]


class FaultyLink:
    """The robot's link with the plan's link faults (hil/robot.Link)."""

    def __init__(self, plan: FaultPlan, instance: int, report: Callable[..., None],
                 scenario_time: Callable[[], float],
                 clock: Callable[[], float] = time.monotonic):
        link = plan.of(Drop, Delay, Reorder, Duplicate)
        self.state = _Direction("state", link, plan.seed, instance, report, scenario_time,
                                clock)
        self.command = _Direction("command", link, plan.seed, instance, report, scenario_time,
                                  clock)
        self._inbox: dict[str, list[Any]] = {}

    def send(self, topic: str, msg: Any, data: bytes, write: Callable[[Any], None]) -> None:
        self.state.schedule(topic, (write, msg), msg, data)
        self.pump()

    def pump(self) -> None:
        for write, msg in self.state.due():
            write(msg)

    def receive(self, topic: str, msgs: list[Any]) -> list[Any]:
        for msg in msgs:
            self.command.schedule(topic, (topic, msg), msg, None)
        for t, msg in self.command.due():
            self._inbox.setdefault(t, []).append(msg)
        return self._inbox.pop(topic, [])

    def counts(self) -> dict[str, dict[str, int]]:
        return {"state": dict(self.state.counts), "command": dict(self.command.counts)}

    def report_pending(self) -> int:
        """At the robot's stop: report each message still held in the link (delayed, held
        back, a duplicate's second copy), which neither the wire nor the robot's application
        got; returns how many. Commands taken in the same period but not yet handed over are
        among them."""
        n = 0
        for topic, (_, msg) in self.state.pending():
            self.state.report("link_pending", topic=topic, key=identity(msg),
                              direction="state")
            n += 1
        for t, (_, msg) in self.command.pending():
            self.command.report("link_pending", topic=t, key=identity(msg),
                                direction="command")
            n += 1
        for t, msgs in self._inbox.items():  # handed over by the link, never taken
            for msg in msgs:
                self.command.report("link_pending", topic=t, key=identity(msg),
                                    direction="command")
                n += 1
        return n


class SensorFaults:
    """Edits the robot's published signals at scenario time t (bias, noise, freeze, NaN)."""

    def __init__(self, plan: FaultPlan, instance: int = 0):
        self.faults = plan.of(SensorBias, SensorNoise, SensorFreeze, NanBurst)
        self.rng = np.random.default_rng([plan.seed, instance, 0x5E45])
        self._frozen: dict[int, np.ndarray] = {}
        self.applied = {type(f).__name__: 0 for f in self.faults}

    def __call__(self, signals: dict[str, np.ndarray], t: float) -> dict[str, np.ndarray]:
        if not self.faults:
            return signals
        out = dict(signals)
        for i, f in enumerate(self.faults):
            if f.signal not in out:
                continue
            if not f.active(t):
                self._frozen.pop(i, None)
                continue
            x = np.array(out[f.signal], dtype=np.float64)
            idx = slice(None) if f.index is None else np.array(f.index)
            if isinstance(f, SensorBias):
                x[idx] = x[idx] + np.asarray(f.value)
            elif isinstance(f, SensorNoise):
                x[idx] = x[idx] + self.rng.normal(0.0, f.std, size=np.shape(x[idx]))
            elif isinstance(f, SensorFreeze):
                frozen = self._frozen.setdefault(i, x.copy())
                x[idx] = frozen[idx]
            elif isinstance(f, NanBurst):
                x[idx] = np.nan
            self.applied[type(f).__name__] += 1
            out[f.signal] = x
        return out


def clock_offset(plan: FaultPlan) -> Callable[[float], float]:
    """Seconds the robot's clock is off at scenario time t, after the plan's jumps."""
    jumps = sorted((f.at_s, f.jump_s) for f in plan.of(ClockJump))

    def offset(t: float) -> float:
        return sum(j for at, j in jumps if t >= at)

    return offset


def check_signals(plan: FaultPlan, provided: Sequence[str], dims: dict[str, int],
                  where: str) -> None:
    """Sensor faults must name signals the robot's interface publishes, with valid indices and
    value sizes."""
    problems = []
    for i, f in enumerate(plan.faults):
        if not isinstance(f, SensorBias | SensorNoise | SensorFreeze | NanBurst):
            continue
        if f.signal not in provided:
            problems.append(f"faults[{i}].signal: {f.signal!r} is not a signal this "
                            f"interface publishes (known: {', '.join(sorted(provided))})")
            continue
        n = dims.get(f.signal)
        if n is None:
            continue
        if f.index is not None and any(not 0 <= k < n for k in f.index):
            problems.append(f"faults[{i}].index: {f.index} outside 0..{n - 1}")
        if isinstance(f, SensorBias):
            size = n if f.index is None else len(f.index)
            if len(f.value) not in (1, size):
                problems.append(f"faults[{i}].value: {len(f.value)} values for {size} "
                                "components")
    if problems:
        from simreal.hil.config import HilConfigError

        raise HilConfigError(f"{where}: " + "; ".join(problems))
