"""Seeded batched samplers for initial states, commands and randomization."""

from __future__ import annotations

import math

import torch

from simreal.core.spatial import quat_mul


def uniform(n: int, low: float, high: float, gen: torch.Generator, dim: int | None = None
            ) -> torch.Tensor:
    shape = (n,) if dim is None else (n, dim)
    return low + (high - low) * torch.rand(shape, generator=gen)


def in_ball(n: int, radius: float, gen: torch.Generator) -> torch.Tensor:
    """Points uniform in a 3-D ball of the given radius."""
    direction = torch.nn.functional.normalize(torch.randn(n, 3, generator=gen), dim=-1)
    r = radius * torch.rand(n, 1, generator=gen) ** (1.0 / 3.0)
    return direction * r


def yaw_quat(yaw: torch.Tensor) -> torch.Tensor:
    """Quaternions (..., 4) turning by `yaw` rad about the vertical."""
    zero = torch.zeros_like(yaw)
    return torch.stack([torch.cos(yaw / 2), zero, zero, torch.sin(yaw / 2)], dim=-1)


def tilt_quat(tilt: torch.Tensor, axis_angle: torch.Tensor) -> torch.Tensor:
    """Quaternions (..., 4) tilting by `tilt` rad about the horizontal axis at `axis_angle`."""
    s = torch.sin(tilt / 2)
    return torch.stack([torch.cos(tilt / 2), s * torch.cos(axis_angle), s * torch.sin(axis_angle),
                        torch.zeros_like(tilt)], dim=-1)


def tilted_quat(n: int, max_tilt: float, gen: torch.Generator) -> torch.Tensor:
    """Random yaw, then a tilt of up to max_tilt rad about a random horizontal axis (w, x, y, z)."""
    yaw = uniform(n, -math.pi, math.pi, gen)
    tilt = uniform(n, 0.0, max_tilt, gen)
    axis_angle = uniform(n, -math.pi, math.pi, gen)
    return quat_mul(tilt_quat(tilt, axis_angle), yaw_quat(yaw))
