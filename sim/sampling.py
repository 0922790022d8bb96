"""Seeded batched samplers for initial states and randomization."""

from __future__ import annotations

import math

import torch


def uniform(n: int, low: float, high: float, gen: torch.Generator, dim: int | None = None
            ) -> torch.Tensor:
    shape = (n,) if dim is None else (n, dim)
    return low + (high - low) * torch.rand(shape, generator=gen)


def in_ball(n: int, radius: float, gen: torch.Generator) -> torch.Tensor:
    """Points uniform in a 3-D ball of the given radius."""
    direction = torch.nn.functional.normalize(torch.randn(n, 3, generator=gen), dim=-1)
    r = radius * torch.rand(n, 1, generator=gen) ** (1.0 / 3.0)
    return direction * r


def tilted_quat(n: int, max_tilt: float, gen: torch.Generator) -> torch.Tensor:
    """Random yaw, then a tilt of up to max_tilt rad about a random horizontal axis (w, x, y, z)."""
    yaw = uniform(n, -math.pi, math.pi, gen)
    tilt = uniform(n, 0.0, max_tilt, gen)
    axis_angle = uniform(n, -math.pi, math.pi, gen)
    q_yaw = torch.stack([torch.cos(yaw / 2), 0 * yaw, 0 * yaw, torch.sin(yaw / 2)], dim=-1)
    s = torch.sin(tilt / 2)
    q_tilt = torch.stack(
        [torch.cos(tilt / 2), s * torch.cos(axis_angle), s * torch.sin(axis_angle), 0 * tilt], -1
    )
    return quat_mul(q_tilt, q_yaw)


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack([
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    ], dim=-1)
