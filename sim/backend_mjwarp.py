"""The `mjwarp` backend: MuJoCo Warp, every environment a world of one batched Warp model.

The same MJCF and the same task code as the `mujoco` backend (sim/backends.py describes the
interface): `qpos`, `qvel`, `ctrl`, `xfrc_applied` and `sensordata` are `warp.to_torch` views
of MuJoCo Warp's arrays, on the GPU with `device="cuda"` (zero copy: a task writes them in
place and reads them after `step()`, no host transfer), or on Warp's CPU device (slow: Warp
runs a CPU kernel on one thread; it is there so that tests run without a GPU).

What differs from the `mujoco` backend, and why:

- Precision: MuJoCo Warp computes in float32 (MuJoCo's C engine in float64), so the views are
  float32; tasks' float64 writes are cast on assignment. States agree to float32 rounding and
  drift apart as float32 does, fastest through contacts (tests/test_mjwarp.py states the
  tolerances measured on quadrotor-hover and go2-flat).
- Per-environment model fields: `model_field(name)` gives the field with one row per world.
  MuJoCo Warp indexes every field whose leading dimension is batchable by
  `world % rows`; the first call replaces the shared (1, ...) array with a (num_envs, ...)
  copy, as `Batch.expand` does. Batchable are the Model fields whose MuJoCo Warp type starts
  with `*` (159 in mujoco-warp 4.0: masses, inertias, CoMs, friction, solref/solimp, joint
  damping, armature and ranges, actuator gains, biases, force ranges and delays, gravity,
  timestep, ...); other fields (sizes, ids, mesh data) raise. Masses, inertias and armature
  act at once (MuJoCo Warp's dynamics read them; the `mujoco` backend needs `set_const` for
  that); `set_const(ids)` recomputes the derived constants MuJoCo Warp also reads per world
  (inverse weights, subtree masses, actuator_acc0) on the host with MuJoCo's mj_setConst.
- `forward(ids)` runs MuJoCo Warp's forward dynamics on every world (it has no per-world
  mask) and then restores the sensors of the envs not in `ids`, so the other envs observe what
  `step()` left them, exactly as the `mujoco` backend's per-simulation forward does. Forward
  does not write the state the next step reads (qpos, qvel, act, ctrl, warm starts).
- `reset(ids)` is MuJoCo Warp's `reset_data` with a per-world mask (qpos0, zero velocities,
  controls, applied forces, time, warm starts and actuator history).
- CUDA graphs (`graph=True`, the default on CUDA): `step(n)`, `forward` and `reset` are
  captured once (per distinct n) and replayed, one launch instead of hundreds of kernel
  launches per control step. They are captured on a stream of their own (CUDA cannot capture
  torch's legacy default stream) and launched on torch's current CUDA stream as of the
  backend's creation, so torch's writes before a step and reads after it are ordered with it
  without a host sync. The reset mask is a fixed array rewritten in place. Replacing a model
  array (`model_field` on a new field) invalidates the graphs, captured again on next use.
  Warp also records graphs on its CPU device (`graph=True` there, off by default): the tests
  check the captured path against the eager one on the CPU.
- Contact buffers are preallocated (`nconmax` contacts and `njmax` constraint rows per world):
  unless given, enough for every moving geom on the ground at once (`contact_capacity`: 40
  contacts and 190 rows for the Go2, where MuJoCo Warp's own guess, 48 and 64, overflows
  once it lies on its trunk) or MuJoCo Warp's guess if larger (a heightfield);
  `overflow()` reports worlds that ran out.

Compiled kernels are cached on disk by Warp (`$WARP_CACHE_PATH`, else ~/.cache/warp): the
first run compiles for tens of seconds to minutes, later ones load in seconds.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import torch

from simreal.sim.backend import BackendError, ModelLookup, compile_model


def load_warp() -> tuple[Any, Any]:
    """(warp, mujoco_warp), Warp initialized quietly; a clear error where not installed."""
    try:
        import warp as wp
    except ImportError:
        raise BackendError("backend 'mjwarp' needs warp-lang and mujoco-warp: "
                           "pip install 'simreal[gpu]'") from None
    wp.config.quiet = True
    wp.init()
    try:
        import mujoco_warp as mjw
    except ImportError:
        raise BackendError("backend 'mjwarp' needs mujoco-warp: "
                           "pip install 'simreal[gpu]'") from None
    return wp, mjw


# most contacts MuJoCo makes between a geom of this type and a plane (its collision functions)
_PLANE_CONTACTS = {mujoco.mjtGeom.mjGEOM_SPHERE: 1, mujoco.mjtGeom.mjGEOM_ELLIPSOID: 1,
                   mujoco.mjtGeom.mjGEOM_CAPSULE: 2, mujoco.mjtGeom.mjGEOM_CYLINDER: 4,
                   mujoco.mjtGeom.mjGEOM_BOX: 4}


def contact_capacity(model: mujoco.MjModel) -> tuple[int, int]:
    """(contacts, constraint rows) per world that hold every moving collidable geom touching
    the ground at once, plus a friction-loss row per dof (frictionloss may be randomized
    above its compiled 0), every limit and equality row: MuJoCo Warp's
    defaults (48 and 64 for the Go2) hold a robot on its feet but overflow, dropping
    constraints, once it falls on its trunk and legs."""
    moving = [g for g in range(model.ngeom) if model.body_weldid[model.geom_bodyid[g]] != 0
              and (model.geom_contype[g] or model.geom_conaffinity[g])]
    contacts = sum(_PLANE_CONTACTS.get(int(model.geom_type[g]), 4) for g in moving)
    condim = int(model.geom_condim.max()) if model.ngeom else 1
    elliptic = model.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC
    rows_per_contact = condim if (elliptic or condim == 1) else 2 * (condim - 1)
    # every dof's friction-loss row: a task may randomize frictionloss above 0 per env
    rows = (contacts * rows_per_contact + int(model.nv)
            + int(model.jnt_limited.sum()) + int(model.tendon_limited.sum()) + 6 * model.neq)
    return contacts, rows


def batchable_fields() -> set[str]:
    """MuJoCo Warp Model fields that can hold one row per world."""
    from mujoco_warp._src import types, warp_util

    out = set()
    for f in dataclasses.fields(types.Model):
        if warp_util.is_array_spec(f.type) and getattr(f.type, "shape", ())[:1] == ("*",):
            out.add(f.name)
    return out


class MjWarpBackend(ModelLookup):
    name = "mjwarp"

    def __init__(self, mjcf_path: str | Path, num_envs: int,
                 device: str | torch.device = "cpu", model: mujoco.MjModel | None = None,
                 graph: bool | None = None, nconmax: int | None = None,
                 njmax: int | None = None):
        wp, mjw = load_warp()
        self._wp, self._mjw = wp, mjw
        self.model = model if model is not None else compile_model(mjcf_path)
        self.num_envs = num_envs
        self.device = torch.device(device)
        if self.device.type == "cuda":
            index = self.device.index if self.device.index is not None else \
                torch.cuda.current_device()
            self.device = torch.device("cuda", index)
            if not wp.is_cuda_available():
                raise BackendError(f"device {device!s}: Warp sees no CUDA device")
            self._wp_device = wp.get_device(f"cuda:{index}")
            # warp's work goes on torch's stream: torch's writes before a step, and reads
            # after it, are ordered with it without synchronizing the host
            self._stream = wp.stream_from_torch(torch.cuda.current_stream(self.device))
            # CUDA cannot capture a graph on torch's default (legacy) stream: graphs are
            # captured on a stream of their own and launched on torch's
            self._capture_stream = wp.Stream(self._wp_device)
        else:
            self._wp_device = wp.get_device("cpu")
            self._stream = self._capture_stream = None
        self.graph = (self.device.type == "cuda") if graph is None else graph
        if nconmax is None or njmax is None:
            contacts, rows = contact_capacity(self.model)
            default_con, default_rows = _mjw_default_sizes(self.model)
            nconmax = nconmax if nconmax is not None else max(contacts, default_con)
            njmax = njmax if njmax is not None else max(rows, default_rows)
        self.nconmax, self.njmax = nconmax, njmax
        try:
            with wp.ScopedDevice(self._wp_device):
                self._m = mjw.put_model(self.model)
                self._d = mjw.make_data(self.model, nworld=num_envs, nconmax=nconmax,
                                        njmax=njmax)
        except (NotImplementedError, ValueError) as exc:
            raise BackendError(f"{mjcf_path}: MuJoCo Warp cannot simulate this model: "
                               f"{exc}") from None
        self._batchable = batchable_fields()
        self._fields: dict[str, torch.Tensor] = {}
        self._graphs: dict[Any, Any] = {}
        self._records: dict[int, torch.Tensor] = {}
        # live views, shared with MuJoCo Warp's arrays
        d = self._d
        self.qpos = wp.to_torch(d.qpos)
        self.qvel = wp.to_torch(d.qvel)
        self.ctrl = wp.to_torch(d.ctrl)
        self.xfrc_applied = wp.to_torch(d.xfrc_applied)  # (n, nbody, 6): force, torque
        self.sensordata = wp.to_torch(d.sensordata)
        self._overflow = wp.to_torch(d.overflow)
        self._mask = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        self._mask_wp = wp.from_torch(self._mask, dtype=wp.bool)
        self._run("forward", lambda: mjw.forward(self._m, self._d))  # sensors valid at start

    # --- what tasks use ---------------------------------------------------------------------
    def model_field(self, field: str) -> torch.Tensor:
        """A per-simulation (num_envs, ...) view of a model field, e.g. body_mass."""
        if field in self._fields:
            return self._fields[field]
        if field not in self._batchable:
            raise BackendError(f"backend 'mjwarp': model field {field!r} cannot vary per "
                               "environment in MuJoCo Warp (see sim/backend_mjwarp.py)")
        wp = self._wp
        shared = getattr(self._m, field)
        if shared.shape[0] != self.num_envs:
            rows = wp.empty((self.num_envs, *shared.shape[1:]), dtype=shared.dtype,
                            device=self._wp_device)
            src = wp.to_torch(shared)
            wp.to_torch(rows).copy_(src[:1].expand(self.num_envs, *src.shape[1:]))
            setattr(self._m, field, rows)
            self._graphs.clear()  # captured graphs hold the old array
            shared = rows
        view = wp.to_torch(shared)
        self._fields[field] = view
        return view

    def step(self, nstep: int) -> None:
        """Advance every world by nstep physics steps; sensors as mj_step leaves them
        (computed at the start of the last substep), as in the `mujoco` backend."""
        mjw, m, d = self._mjw, self._m, self._d

        def steps() -> None:
            for _ in range(nstep):
                mjw.step(m, d)

        self._run(("step", nstep), steps)

    def step_recording(self, nstep: int) -> torch.Tensor:
        """step(nstep), returning every substep's sensordata, (num_envs, nstep, nsensordata)
        (a buffer the next call overwrites), as the `mujoco` backend's does."""
        out = self._records.get(nstep)
        if out is None:
            out = self._records[nstep] = torch.empty(
                self.num_envs, nstep, self.sensordata.shape[1], dtype=self.sensordata.dtype,
                device=self.device)
        for k in range(nstep):
            self.step(1)
            out[:, k] = self.sensordata
        return out

    def reset(self, ids: torch.Tensor) -> None:
        """Worlds `ids` back to the model's defaults (MuJoCo Warp's reset_data, masked)."""
        self._set_mask(ids)
        self._run("reset", lambda: self._mjw.reset_data(self._m, self._d, reset=self._mask_wp))

    def forward(self, ids: torch.Tensor, forces: bool = False) -> None:
        """Sensors of `ids` at their current state (all stages: MuJoCo Warp has no partial
        forward); the other envs' sensors are kept as they were."""
        self._set_mask(ids)
        kept = self.sensordata.clone()
        self._run("forward", lambda: self._mjw.forward(self._m, self._d))
        self.sensordata.copy_(torch.where(self._mask[:, None], self.sensordata, kept))

    # MuJoCo's constants derived from masses, inertias and armature (mj_setConst) that MuJoCo
    # Warp reads per world: the constraint regularization's inverse weights, subtree masses
    # and the actuators' reference accelerations
    DERIVED = ("body_subtreemass", "body_invweight0", "dof_invweight0", "tendon_invweight0",
               "actuator_acc0")

    def set_const(self, ids: torch.Tensor) -> None:
        """Recompute the derived constants of worlds `ids` from their per-world fields, as
        the `mujoco` backend's set_const does: MuJoCo Warp's dynamics read body_mass,
        body_inertia and dof_armature themselves, but its constraint regularization reads the
        inverse weights as compiled until they are recomputed (measured on go2-flat with
        per-env link masses and armature: states 7e-3 apart from the `mujoco` backend's after
        0.5 s without this). MuJoCo's C engine computes them on the host (mj_setConst on a
        scratch model holding the world's fields): a host transfer of the expanded fields'
        rows of `ids`, for resets only; nothing to do while no field is expanded."""
        fields = [f for f in self._fields if f not in self.DERIVED
                  and getattr(self.model, f, None) is not None]
        if not fields or len(ids) == 0:
            return
        if not hasattr(self, "_const_model"):
            import copy

            self._const_model = copy.deepcopy(self.model)
            self._const_data = mujoco.MjData(self._const_model)
        m, d = self._const_model, self._const_data
        ids_dev = ids.to(self.device)
        rows = {f: self._fields[f][ids_dev].cpu().double().numpy() for f in fields}
        derived = [f for f in self.DERIVED if getattr(m, f).size and f in self._batchable]
        out = {f: [] for f in derived}
        for k in range(len(ids)):
            for f in fields:
                getattr(m, f)[...] = rows[f][k].reshape(getattr(m, f).shape)
            mujoco.mj_setConst(m, d)
            for f in derived:
                out[f].append(getattr(m, f).copy())
        for f in derived:
            view = self.model_field(f)
            view[ids_dev] = torch.as_tensor(np.stack(out[f]), dtype=view.dtype,
                                            device=self.device).reshape(len(ids),
                                                                        *view.shape[1:])

    # --- diagnostics ------------------------------------------------------------------------
    def overflow(self) -> torch.Tensor:
        """(num_envs,) bool: worlds whose contact or constraint buffers overflowed (a host
        sync when read: for checks, not for the step loop)."""
        return self._overflow != 0

    # --- internals --------------------------------------------------------------------------
    def _set_mask(self, ids: torch.Tensor) -> None:
        self._mask.zero_()
        self._mask[ids.to(self.device)] = True

    def _scope(self):
        wp = self._wp
        if self._stream is not None:
            return wp.ScopedStream(self._stream)
        return wp.ScopedDevice(self._wp_device)

    def _run(self, key: Any, fn) -> None:
        """Run `fn` (warp launches), through a captured CUDA graph when graphs are on."""
        wp = self._wp
        with self._scope():
            if not self.graph:
                fn()
                return
            graph = self._graphs.get(key)
            if graph is None:  # recorded, not run; the arrays it reads are fixed in place
                if self._capture_stream is not None:
                    with wp.ScopedStream(self._capture_stream), \
                            wp.ScopedCapture(device=self._wp_device) as capture:
                        fn()
                else:  # Warp records CPU graphs too (the tests run this path)
                    with wp.ScopedCapture(device=self._wp_device) as capture:
                        fn()
                graph = self._graphs[key] = capture.graph
            wp.capture_launch(graph, stream=self._stream)


def _mjw_default_sizes(model: mujoco.MjModel) -> tuple[int, int]:
    """MuJoCo Warp's own guesses of nconmax and njmax for the model."""
    from mujoco_warp._src import io

    return io._default_nconmax(model), io._default_njmax(model)
