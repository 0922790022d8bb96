"""Command feedback: a slow integral loop the runtime closes around a walking policy.

A policy's speed for a given velocity command is what its gait gives on the dynamics it was
trained on; on another robot (stiffer joints, other feet, a delayed link) the same command
walks or turns at another rate (docs/SIM2SIM.md, "Which way the rows miss"). The runtime
measures what the robot does and trims the command it hands the policy until the measured
velocity matches the user's command:

    v_f  <- v_f + a (v_measured - v_f)               first-order low-pass, a = dt / (filter_s + dt)
    c    <- clip(c + gain dt (command - v_f), +-limit)    (yaw_limit for the yaw rate)
    seen  = clip(command + c, trained range)          and c = seen - command (no wind-up)

per axis named in the contract's `command_feedback` (deploy/contract.py): the yaw rate from
the gyro (exact on any robot), forward and lateral speed from leg odometry (robots/legs.py,
which reads the legs' joint states and torques: its scale varies with the feet and joints).
A state without joint torques (many drivers leave JointState.effort empty) cannot tell the
loaded legs: that period the speed trim holds and only the yaw trim moves.
The same code runs in `simreal eval`, sim2sim, HIL and on the robot.
"""

from __future__ import annotations

import numpy as np

from simreal.deploy.contract import AXES, CommandFeedback, CommandRange
from simreal.deploy.terms import Signals
from simreal.robots.legs import leg_odometry_velocity


class FeedbackLoop:
    """The integral trim of one velocity command for a batch of rows (module docstring)."""

    def __init__(self, spec: CommandFeedback, command_range: CommandRange, dt: float,
                 batch: int = 1):
        self.spec = spec
        self.axes = np.array([AXES.index(a) for a in spec.axes])
        self.alpha = dt / (spec.filter_s + dt)
        self.step = spec.gain * dt
        self.low = np.asarray(command_range.low, dtype=np.float64)
        self.high = np.asarray(command_range.high, dtype=np.float64)
        self.filtered = np.zeros((batch, 3))
        self.correction = np.zeros((batch, 3))
        self._fresh = np.ones(batch, dtype=bool)  # no measurement yet: start the filter there
        self._linear = bool({"vx", "vy"} & set(spec.axes))
        self._needs_effort = self._linear and spec.legs.stance_torque is not None
        self.limit = np.array([spec.limit, spec.limit, spec.yaw_limit])[self.axes]
        keep = self.axes == 2
        self.yaw_axes, self.yaw_limit = self.axes[keep], self.limit[keep]

    def measure(self, signals: Signals) -> tuple[np.ndarray, bool]:
        """(batch, 3): forward, lateral (m/s, base frame) and yaw rate (rad/s); and whether
        the speeds were measured."""
        gyro = np.asarray(signals["angular_velocity"], dtype=np.float64).reshape(-1, 3)
        out = np.zeros((gyro.shape[0], 3))
        out[:, 2] = gyro[:, 2]
        speed = self._linear and not (self._needs_effort and signals.get("joint_effort") is None)
        if speed:
            v = leg_odometry_velocity(self.spec.legs, signals["joint_pos"], signals["joint_vel"],
                                      signals["angular_velocity"], signals["orientation"],
                                      signals.get("joint_effort"))
            out[:, :2] = np.asarray(v, dtype=np.float64).reshape(-1, 3)[:, :2]
        return out, speed

    def __call__(self, command: np.ndarray, signals: Signals) -> np.ndarray:
        """The command the policy sees this period, from the user's and this period's
        measurement; same shape and dtype as `command`."""
        cmd = np.asarray(command, dtype=np.float64).reshape(-1, 3)
        measured, speed = self.measure(signals)
        ax, lim = (self.axes, self.limit) if speed else (self.yaw_axes, self.yaw_limit)
        if not speed:  # no speed this period: the filter keeps its speeds, the trim its value
            measured[:, :2] = self.filtered[:, :2]
        fresh = self._fresh
        self.filtered[fresh] = measured[fresh]
        self.filtered[~fresh] += self.alpha * (measured[~fresh] - self.filtered[~fresh])
        self._fresh[:] = False
        error = cmd[:, ax] - self.filtered[:, ax]
        self.correction[:, ax] = np.clip(self.correction[:, ax] + self.step * error, -lim, lim)
        seen = np.clip(cmd + self.correction, self.low, self.high)
        self.correction[:, ax] = seen[:, ax] - cmd[:, ax]  # what the range let through
        return seen.reshape(np.shape(command)).astype(np.asarray(command).dtype)

    def reset(self, mask: np.ndarray | None = None) -> None:
        rows = slice(None) if mask is None else mask
        self.filtered[rows] = 0.0
        self.correction[rows] = 0.0
        self._fresh[rows] = True
