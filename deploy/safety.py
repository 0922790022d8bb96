"""The safety layer every command passes through on the robot side.

Generic over what a command is (rotor-speed fractions, joint position targets): it sees a
vector per control period and the facts about the robot's state that decide the mode.

Modes: SOFT_START (ramp from the measured command-space pose to the policy over soft_start_s)
-> RUN; DAMP (stale input for watchdog_periods periods, or a tilt beyond max_tilt_rad) sends
the robot's damping command; ESTOP latches until `reset_estop()`. A watchdog DAMP clears by
itself when fresh input returns (through a new soft start); a tilt DAMP and an ESTOP do not.
Every mode change is recorded with its reason; NaN/Inf commands are replaced by the last safe
command and counted. With `hold="collective"` (rotor speeds) the replacement is the last
command's mean on every rotor: its collective thrust without the differential part, which,
with no state to correct it (a burst of corrupted readings), spins a quadrotor further each
period it is held.

Clamps, in order: per-cycle bounds the caller derives from the measured state (a joint's
torque limit under PD); the static command limits (`low`, `high`: joint position range, rotor
speed 0..1), which win where the two disagree; the soft-start ramp, from the measured pose
brought inside the range; the rate limit per period (`rate_limit` per command, e.g. joint
velocity limits, and the scalar `max_rate`), which moves between two in-range commands. So
no command leaves the range, even with the joint past it. Each clamp that changed a command
is counted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

import numpy as np
from pydantic import Field

from simreal.core.config import StrictModel

log = logging.getLogger("simreal.safety")


def _any(mask: np.ndarray) -> bool:
    """mask.any() for a robot's dozen commands: count_nonzero is one C call, ndarray.any()
    goes through Python-level wrappers (~1 us more per call, several calls per cycle)."""
    return np.count_nonzero(mask) > 0


class Mode(StrEnum):
    SOFT_START = "soft_start"
    RUN = "run"
    DAMP = "damp"
    ESTOP = "estop"


class SafetyConfig(StrictModel):
    watchdog_periods: int = Field(default=5, ge=1)
    soft_start_s: float = Field(default=1.0, ge=0)
    max_rate: float | None = Field(default=None, gt=0, description="command units per second")
    max_tilt_rad: float = Field(default=1.0, gt=0)


@dataclass
class ModeChange:
    cycle: int
    old: Mode
    new: Mode
    reason: str


@dataclass
class SafetyLayer:
    low: np.ndarray  # per-command bounds
    high: np.ndarray
    damping: np.ndarray  # the command the robot gets in DAMP and ESTOP
    rate_hz: float
    cfg: SafetyConfig = field(default_factory=SafetyConfig)
    rate_limit: np.ndarray | None = None  # per command, units per second
    hold: Literal["last", "collective"] = "last"  # a non-finite command's replacement

    def __post_init__(self) -> None:
        self.mode = Mode.SOFT_START
        self.cycle = 0
        self.nonfinite_events = 0
        self.changes: list[ModeChange] = []
        self._stale = 0
        self._ramp_from: np.ndarray | None = None
        self._ramp_cycles = 0
        self._last = np.array(self.damping, dtype=np.float64)
        self._tilt_latched = False
        self.clamp_events = {"limits": 0, "bounds": 0, "rate": 0}
        step = np.full(len(np.atleast_1d(self.low)), np.inf)
        if self.rate_limit is not None:
            step = np.minimum(step, np.asarray(self.rate_limit, dtype=np.float64) / self.rate_hz)
        if self.cfg.max_rate is not None:
            step = np.minimum(step, self.cfg.max_rate / self.rate_hz)
        self._max_step = step if np.isfinite(step).any() else None

    # --- inputs ---------------------------------------------------------------------------
    def estop(self, reason: str = "e-stop input") -> None:
        self._set(Mode.ESTOP, reason)

    def hold_damping(self, reason: str) -> None:
        """DAMP until an e-stop-style reset (shutdown, an operator's request)."""
        if self.mode is not Mode.ESTOP:
            self._tilt_latched = True
            self._set(Mode.DAMP, reason)

    def reset_estop(self) -> None:
        if self.mode is Mode.ESTOP:
            self._tilt_latched = False
            self._begin_soft_start("e-stop reset")

    # --- one control period ---------------------------------------------------------------
    def step(self, command: np.ndarray, fresh: bool, tilt_rad: float,
             measured: np.ndarray | None = None,
             bounds: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """The command to send this period, given the policy's command and the state facts.

        `measured` is the robot's current pose in command space (e.g. joint positions), the
        start of a soft-start ramp; None ramps from the damping command. `bounds` are extra
        (low, high) limits for this period only.
        """
        self.cycle += 1
        self._stale = 0 if fresh else self._stale + 1
        if self.mode is not Mode.ESTOP:
            if tilt_rad > self.cfg.max_tilt_rad and not self._tilt_latched:
                self._tilt_latched = True
                self._set(Mode.DAMP, f"tilt {tilt_rad:.2f} rad > {self.cfg.max_tilt_rad} rad")
            elif self._stale >= self.cfg.watchdog_periods and self.mode is not Mode.DAMP:
                self._set(Mode.DAMP, f"no fresh state for {self._stale} control periods")
            elif (self.mode is Mode.DAMP and not self._tilt_latched and fresh):
                self._begin_soft_start("fresh state again", measured)
        if self.mode in (Mode.DAMP, Mode.ESTOP):
            out = np.array(self.damping, dtype=np.float64)
            self._last = out
            return out

        command = np.asarray(command, dtype=np.float64)
        if np.count_nonzero(np.isfinite(command)) != command.size:
            self.nonfinite_events += 1
            log.warning("non-finite command at cycle %d; holding the last safe one%s",
                        self.cycle, " (its collective)" if self.hold == "collective" else "")
            if self.hold == "collective":
                self._last = np.full_like(self._last, self._last.mean())
            return self._last.copy()
        out = command
        if bounds is not None and not (_any(np.isnan(bounds[0])) or _any(np.isnan(bounds[1]))):
            out = self._clamp("bounds", out, bounds[0], bounds[1])  # +-inf: no bound there
        # the range last: a joint a little past its range (a finger pressed open) moving fast
        # gives torque bounds wholly outside it, and a target outside the range is never sent
        out = self._clamp("limits", out, self.low, self.high)
        if self.mode is Mode.SOFT_START:
            out = self._ramp(out, measured)
        if self._max_step is not None:
            out = self._clamp("rate", out, self._last - self._max_step,
                              self._last + self._max_step)
        self._last = out
        return out.copy()

    def _clamp(self, rule: str, x: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        out = np.minimum(np.maximum(x, low), high)  # np.clip's result, at a third of its cost
        if _any(out != x):
            self.clamp_events[rule] += 1
        return out

    # --- internals ------------------------------------------------------------------------
    def _begin_soft_start(self, reason: str, measured: np.ndarray | None = None) -> None:
        # the ramp starts inside the range (the pose may be a little past it), so that the rate
        # limit, which counts from the ramp's start, cannot hold a command outside the range
        self._ramp_from = None if measured is None else self._inside(measured)
        if self._ramp_from is not None:
            self._last = self._ramp_from.copy()  # the rate limit counts from the ramp's start
        self._ramp_cycles = 0
        self._set(Mode.SOFT_START, reason)

    def _ramp(self, target: np.ndarray, measured: np.ndarray | None) -> np.ndarray:
        if self._ramp_from is None:
            self._ramp_from = self._inside(measured if measured is not None else self.damping)
            self._last = self._ramp_from.copy()  # the rate limit counts from the ramp's start
        total = max(1, round(self.cfg.soft_start_s * self.rate_hz))
        self._ramp_cycles += 1
        w = min(1.0, self._ramp_cycles / total)
        if w >= 1.0:
            self._set(Mode.RUN, "soft start complete")
        return np.clip((1 - w) * self._ramp_from + w * target, self.low, self.high)

    def _inside(self, pose: np.ndarray) -> np.ndarray:
        return np.minimum(np.maximum(np.asarray(pose, dtype=np.float64), self.low), self.high)

    def _set(self, mode: Mode, reason: str) -> None:
        if mode is self.mode:
            return
        self.changes.append(ModeChange(self.cycle, self.mode, mode, reason))
        log.info("mode %s -> %s at cycle %d: %s", self.mode.value, mode.value, self.cycle,
                 reason)
        self.mode = mode
