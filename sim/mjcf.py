"""Compiling a robot's MJCF, without torch: the HIL robot process and calibration need only
MuJoCo, and importing torch costs a process start ~2.5 s on 2 cores."""

from __future__ import annotations

from pathlib import Path

import mujoco


class BackendError(RuntimeError):
    pass


def compile_model(mjcf_path: str | Path) -> mujoco.MjModel:
    """Compile an MJCF file, naming the file in MuJoCo's error."""
    try:
        return mujoco.MjModel.from_xml_path(str(mjcf_path))
    except ValueError as exc:
        raise BackendError(f"{mjcf_path}: MuJoCo cannot compile it: {exc}") from None
