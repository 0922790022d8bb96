"""Physics backends by name: what a task asks for instead of importing a backend class.

A backend steps `num_envs` copies of one MJCF and exposes, as torch tensors on its device that
share memory with the simulator (zero copy), what tasks touch:

- state and inputs: `qpos`, `qvel`, `ctrl`, `xfrc_applied` (num_envs, ...), written in place;
- outputs: `sensordata` (num_envs, nsensordata), read after `step()`;
- `model_field(name)`: a per-environment (num_envs, ...) view of an MjModel field, written in
  place to randomize physical parameters;
- `model` (the compiled host `mujoco.MjModel`, for names and ids), `num_envs`, `device`,
  `sensor_slice(name)`, `sensor(name)`, `body_id(name)`;
- `step(nstep)`, `reset(ids)` (back to the model's defaults), `forward(ids, forces)` (sensors
  of `ids` recomputed at their current state; the other envs' sensors are left as they were),
  `set_const(ids)` (derived model constants after per-env writes of masses or inertias: the
  `mujoco` backend's mass matrix ignores those writes until it runs).

Backends:

- `mujoco`: MuJoCo's C engine, `mujoco.batch.Batch` on a native thread pool (float64; CPU).
- `mjwarp`: MuJoCo Warp (`pip install 'simreal[gpu]'`), every environment a world of one
  batched Warp model, on an NVIDIA GPU (`cuda`) or, slowly, Warp's CPU device (float32).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol

import mujoco
import torch

from simreal.sim.backend import BackendError

# name -> "module:Class", imported on use (MuJoCo Warp and Warp load only when asked for)
BACKENDS: dict[str, str] = {
    "mujoco": "simreal.sim.backend:MujocoBackend",
    "mjwarp": "simreal.sim.backend_mjwarp:MjWarpBackend",
}


class Backend(Protocol):
    """The interface tasks use (see the module docstring)."""

    name: str
    model: mujoco.MjModel
    num_envs: int
    device: torch.device
    qpos: torch.Tensor
    qvel: torch.Tensor
    ctrl: torch.Tensor
    xfrc_applied: torch.Tensor
    sensordata: torch.Tensor

    def model_field(self, field: str) -> torch.Tensor: ...
    def sensor_slice(self, name: str) -> slice: ...
    def sensor(self, name: str) -> torch.Tensor: ...
    def body_id(self, name: str) -> int: ...
    def step(self, nstep: int) -> None: ...
    # step(nstep) returning each substep's sensordata, (num_envs, nstep, nsensordata): what a
    # task needs to give the actor readings older than the last physics step
    def step_recording(self, nstep: int) -> torch.Tensor: ...
    def reset(self, ids: torch.Tensor) -> None: ...
    def forward(self, ids: torch.Tensor, forces: bool = False) -> None: ...
    def set_const(self, ids: torch.Tensor) -> None: ...


def backend_names() -> list[str]:
    return list(BACKENDS)


def backend_class(name: str) -> type:
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    module, _, attr = BACKENDS[name].partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise BackendError(f"backend {name!r} cannot load: {exc}; install it with "
                           f"pip install 'simreal[gpu]'") from None


def check_device(backend: str, device: str | torch.device) -> torch.device:
    """The torch device of `device`, refused where the backend cannot run on it."""
    if backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise BackendError(f"device {device!r}: {exc}") from None
    if backend == "mujoco" and dev.type != "cpu":
        raise BackendError(f"backend 'mujoco' runs on the CPU only, not {device!r}; "
                           "use --backend mjwarp for a GPU")
    if dev.type not in ("cpu", "cuda"):
        raise BackendError(f"device {device!r}: only cpu and cuda are supported")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BackendError(f"device {device!r}: this torch build sees no CUDA device "
                           f"(torch {torch.__version__}); install a CUDA build of torch")
    if dev.type == "cuda" and dev.index is None:  # one spelling, so devices compare equal
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def make_backend(name: str, mjcf_path: str | Path, num_envs: int,
                 device: str | torch.device = "cpu", model: mujoco.MjModel | None = None,
                 nthread: int | None = None, **options: Any) -> Backend:
    """Backend `name` stepping `num_envs` copies of `mjcf_path` (or of `model`, compiled from
    it with additions such as a terrain) on `device`. `nthread` is the `mujoco` backend's
    thread count; `options` are the backend's own (e.g. mjwarp's `graph`, `nconmax`)."""
    cls = backend_class(name)
    dev = check_device(name, device)
    if name == "mujoco":
        if options:
            raise BackendError(f"backend 'mujoco' takes no options {sorted(options)}")
        return cls(mjcf_path, num_envs, nthread, model=model)
    return cls(mjcf_path, num_envs, device=dev, model=model, **options)
