"""Reference trajectories shared by the simulator (torch) and the HIL harness (numpy).

Written against the array API (core/spatial.namespace), so a training task and a HIL scenario
compute the same reference from the same parameters.
"""

from __future__ import annotations

from typing import Any

from simreal.core.spatial import namespace

Array = Any


def figure_eight(t: Array, size_x: Array, size_y: Array, omega: Array, phase: Array,
                 yaw: Array) -> tuple[Array, Array]:
    """(offset, velocity), (..., 3) each, of a figure-eight in the horizontal plane at times
    t (...,): x = size_x/2 sin(th), y = size_y/2 sin(2 th), th = omega t + phase, then turned
    by `yaw` about the vertical. One lap per 2 pi / omega; the parameters broadcast with t."""
    xp = namespace(t)
    th = omega * t + phase
    half_x, half_y = size_x / 2, size_y / 2
    x, y = half_x * xp.sin(th), half_y * xp.sin(2 * th)
    vx, vy = half_x * omega * xp.cos(th), 2 * half_y * omega * xp.cos(2 * th)
    yaw = yaw + 0 * t  # an array of t's shape, whether yaw was given per env or once
    c, s = xp.cos(yaw), xp.sin(yaw)
    zero = xp.zeros_like(x)
    offset = xp.stack([c * x - s * y, s * x + c * y, zero], axis=-1)
    velocity = xp.stack([c * vx - s * vy, s * vx + c * vy, zero], axis=-1)
    return offset, velocity
