"""The `mujoco` backend: N copies of one MJCF stepped by MuJoCo's C engine on native threads.

Built on `mujoco.batch.Batch` (MuJoCo >= 4.0): every simulation is a row of state that a C
thread pool loads, steps and stores back, with the GIL released; results are bit-identical at
any thread count. State and sensor arrays are exposed as torch tensors that share memory with
the batch (zero-copy), so a task writes `ctrl` or `qpos` in place and reads `sensordata` after
`step()`. Per-simulation physical parameters (masses, inertias, friction, ...) are expanded
model fields, written the same way: no model rebuild on randomization.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import mujoco
import numpy as np
import torch
from mujoco import batch as mjbatch

from simreal.sim.mjcf import BackendError, compile_model  # noqa: F401 (re-exported)


class ModelLookup:
    """Names to indices in `self.model` (an MjModel), for every backend."""

    model: mujoco.MjModel
    sensordata: torch.Tensor

    def sensor_slice(self, name: str) -> slice:
        """Where one named sensor's readings lie in a sensordata row."""
        sid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SENSOR, name)
        if sid < 0:
            raise BackendError(f"model has no sensor {name!r}")
        adr, dim = int(self.model.sensor_adr[sid]), int(self.model.sensor_dim[sid])
        return slice(adr, adr + dim)

    def sensor(self, name: str) -> torch.Tensor:
        """A (num_envs, dim) view of one named sensor's readings."""
        return self.sensordata[:, self.sensor_slice(name)]

    def body_id(self, name: str) -> int:
        bid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, name)
        if bid < 0:
            raise BackendError(f"model has no body {name!r}")
        return bid


class MujocoBackend(ModelLookup):
    name = "mujoco"

    def __init__(self, mjcf_path: str | Path, num_envs: int, nthread: int | None = None,
                 model: mujoco.MjModel | None = None):
        """`model`, when given, is a model compiled from `mjcf_path` with additions (a
        terrain, say); otherwise the file is compiled."""
        self.model = model if model is not None else compile_model(mjcf_path)
        self.num_envs = num_envs
        nthread = nthread or min(os.cpu_count() or 1, 8)
        self.batch = mjbatch.Batch(self.model, nsim=num_envs, nthread=nthread)
        self.device = torch.device("cpu")
        # live views, shared with the C side
        self.qpos = self._view("qpos")
        self.qvel = self._view("qvel")
        self.ctrl = self._view("ctrl")
        self.xfrc_applied = self._view("xfrc_applied")
        self.sensordata = self._view("sensordata")
        self._records: dict[int, dict[str, np.ndarray]] = {}
        self.batch.forward(stage=mujoco.mjtStage.mjSTAGE_VEL)  # sensors valid from the start

    def _view(self, field: str) -> torch.Tensor:
        with warnings.catch_warnings():  # outputs such as sensordata are read-only arrays
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(self.batch.bind(field))

    def model_field(self, field: str) -> torch.Tensor:
        """A per-simulation (num_envs, ...) view of an MjModel field, e.g. body_mass."""
        return torch.from_numpy(self.batch.expand(field))

    def step(self, nstep: int) -> None:
        """Advance every simulation by nstep physics steps.

        Sensors are left as mj_step leaves them, computed at the start of the last substep
        (one physics step, 5 ms for the crazyflie, old), as `mujoco.rollout` also returns them.
        Recomputing them at the new state (stage mjSTAGE_VEL) costs about half the physics
        again for a small model (measured), and a one-physics-step sensor delay is well
        inside what a real robot's estimator adds.
        """
        self.batch.step(nstep=nstep, stage=mujoco.mjtStage.mjSTAGE_NONE)

    def step_recording(self, nstep: int) -> torch.Tensor:
        """step(nstep), returning every substep's sensordata as step(1) would leave it after
        each, (num_envs, nstep, nsensordata) float64 (a buffer the next call overwrites).
        One `Batch.rollout` call: stepping one substep per call instead costs each substep a
        load and store of every simulation's state (measured on go2-flat, 1024 envs: ~20%
        more CPU per control step)."""
        out = self._records.get(nstep)
        if out is None:
            out = self._records[nstep] = {"sensordata": np.empty(
                (self.num_envs, nstep, self.model.nsensordata))}
        self.batch.rollout(nstep, record=("sensordata",), out=out)
        return torch.from_numpy(out["sensordata"])

    def reset(self, ids: torch.Tensor) -> None:
        """Back to the model's defaults, before the task writes its initial state."""
        self.batch.reset(ids=_np_ids(ids), stage=mujoco.mjtStage.mjSTAGE_NONE)

    def set_const(self, ids: torch.Tensor) -> None:
        """Recompute the model constants of `ids` derived from their (expanded) fields.

        MuJoCo's C engine reads some of them instead of the fields: after a per-env write of
        body_mass or body_inertia, until this runs, its mass matrix keeps the compiled values
        while gravity follows the new masses (measured: a free body with its mass scaled 1.1
        falls at 1.1 g; a torque on a body with its inertia scaled 1.1 spins it up as if
        unscaled)."""
        self.batch.set_const(ids=_np_ids(ids))

    def forward(self, ids: torch.Tensor, forces: bool = False) -> None:
        """Recompute sensors of `ids` after their state was written; `forces` runs the
        acceleration stage too, for sensors of forces (touch, actuatorfrc, accelerometer)."""
        stage = mujoco.mjtStage.mjSTAGE_ACC if forces else mujoco.mjtStage.mjSTAGE_VEL
        self.batch.forward(ids=_np_ids(ids), stage=stage)


def _np_ids(ids: torch.Tensor) -> np.ndarray:
    return ids.detach().cpu().numpy().astype(np.int32)
