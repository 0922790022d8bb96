"""A perception stand-in: the object's pose as a camera-based estimator publishes it.

A real arm-lift setup has a camera and a pose estimator beside the arm's drivers; it publishes
geometry_msgs/PoseStamped `/object_pose` in the robot's base frame (deploy/arm.py). In HIL the
simulated robot plays that part when its scenario gives `robot.object_pose`: frames are
captured at `rate_hz` on the robot's clock, each from the object's true pose plus noise
(per-axis Gaussian position noise; the quaternion perturbed per component and renormalized, as
the lift task's estimator model does), stamped at capture (an image's exposure time), and
published `latency_s` later (uniform per frame: image transfer and inference), in capture
order. The lift task trains with 1-3 control periods (20-60 ms) of such delay.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
from pydantic import Field, model_validator

from simreal.core.config import StrictModel
from simreal.core.spatial import quat_conjugate, quat_mul, rotate_inverse
from simreal.deploy import messages as m
from simreal.deploy.arm import pose_stamped


class ObjectPoseConfig(StrictModel):
    """The estimator's timing and noise (a HIL scenario's `robot.object_pose`)."""

    rate_hz: float = Field(default=30.0, gt=0, description="frames per second")
    latency_s: tuple[float, float] = Field(
        default=(0.03, 0.06), description="capture to publication, s: uniform per frame")
    position_noise_m: float = Field(default=0.002, ge=0, description="std per axis, m")
    orientation_noise: float = Field(default=0.01, ge=0, description="std per quaternion "
                                     "component, before renormalizing")
    seed: int = 0

    @model_validator(mode="after")
    def _latency(self) -> ObjectPoseConfig:
        lo, hi = self.latency_s
        if not 0 <= lo <= hi:
            raise ValueError(f"latency_s: [{lo:g}, {hi:g}] must be 0 <= low <= high")
        return self


class ObjectPoseCamera:
    """Frames of the object's pose, due for publication at their capture time plus latency."""

    def __init__(self, cfg: ObjectPoseConfig):
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.period = 1.0 / cfg.rate_hz
        self.next_capture: float | None = None
        self.pending: deque[tuple[float, m.PoseStamped]] = deque()
        self.captured = 0

    def due(self, now: float) -> bool:
        """A frame is to be captured at `now` (s, the robot's monotonic clock)."""
        return self.next_capture is None or now >= self.next_capture

    def capture(self, now: float, stamp: float, position: np.ndarray,
                orientation: np.ndarray) -> None:
        """One frame of the true pose (base frame) at `now`, stamped `stamp` (wall, s)."""
        c, rng = self.cfg, self.rng
        pos = np.asarray(position, dtype=np.float64) + c.position_noise_m * rng.standard_normal(3)
        quat = np.asarray(orientation, dtype=np.float64) + \
            c.orientation_noise * rng.standard_normal(4)
        quat /= np.linalg.norm(quat)
        lo, hi = c.latency_s
        ready = now + rng.uniform(lo, hi)
        if self.pending:  # one pipeline: frames leave in capture order
            ready = max(ready, self.pending[-1][0])
        self.pending.append((ready, pose_stamped(pos, quat, stamp)))
        self.captured += 1
        start = now if self.next_capture is None else self.next_capture
        # the next frame on the camera's own schedule (skipping frames if far behind)
        self.next_capture = start + self.period * max(1, math.ceil((now - start) / self.period
                                                                    + 1e-9))

    def ready(self, now: float) -> list[m.PoseStamped]:
        """The frames whose latency has passed, oldest first."""
        out = []
        while self.pending and self.pending[0][0] <= now:
            out.append(self.pending.popleft()[1])
        return out


def in_base_frame(position: np.ndarray, orientation: np.ndarray, base_position: np.ndarray,
                  base_orientation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An object's world pose in the frame of a base at (base_position, base_orientation)."""
    pos = rotate_inverse(base_orientation, np.asarray(position) - base_position)
    quat = quat_mul(quat_conjugate(base_orientation), np.asarray(orientation))
    return np.asarray(pos), np.asarray(quat)
