"""Replaying a log's commands in MuJoCo, for many parameter variants at once.

Each variant (a row of parameter values, calibration/params.py) is one simulation of a
`mujoco.batch.Batch`: its model fields are expanded per simulation and written from the row, so
one batched run gives the base trajectory and every finite-difference perturbation of a
Jacobian. The physics step is the HIL robot's (joint robots: at most 2 ms, the motor drivers'
PD rate); the model's own actuator delay is zeroed and the `latency` parameter shifts the
logged command times instead, each physics step getting the time-average of the shifted
command over the step (so the trajectory depends smoothly on the latency).

Timing convention, as the HIL robot and MuJoCo have it: a command logged at t drives the steps
from t (+ latency) on; a state logged at t is what the sensors read after the step ending at t
(mj_step computes sensors at the start of its step).

- `JointReplay` (legged robots): one run over the whole log from the robot's rest pose (the
  mean of the states logged before the first command), held there until the first command
  reaches the drivers; when the log opens with a still period, from the end of it (the mean
  pose of its last 0.2 s). A hung robot's base is held as the HIL robot holds it
  (hil/robot.HOLD_ARMATURE). Compared: joint positions, velocities and torque estimates,
  from the end of the `settle` and `still` phases on: a joint at rest within its friction
  creeps in MuJoCo's soft friction constraint at a speed set by the solver, so where it rests
  after a still period is the simulator's detail, not the robot's (1-2 mrad on the hips).
- `JointSegmentReplay`: the same by multiple shooting (segments started from logged joint
  states), the fit's first stage (calibration/fit.py: fit_staged).
- `RotorReplay` (quadrotors): multiple shooting. A free-flying vehicle diverges from any
  replay within seconds, so the flight is cut into short segments, each started from the
  logged state (position, orientation, velocity, body rates) with the rotor speeds of the
  motor model run over the whole command history; all segments of all variants are one batch.
  Compared: world linear velocity and body angular velocity.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
from mujoco import batch as mjbatch
from scipy.signal import lfilter

from simreal.calibration.logs import ExperimentLog, LogError
from simreal.calibration.params import ParamSet
from simreal.hil.robot import HOLD_ARMATURE, LEGGED_PD_DT
from simreal.robots import Robot
from simreal.sim.mjcf import compile_model

NTHREAD = 2
REST_AVERAGE_S = 0.2  # s: JointReplay's start pose, averaged over the end of a rest
SOLVER_TOLERANCE, SOLVER_LS_TOLERANCE = 1e-15, 1e-6  # JointReplay: see there


def shifted_average(times: np.ndarray, values: np.ndarray, shift: float, dt: float,
                    nstep: int) -> np.ndarray:
    """(nstep, k): per physics step [k dt, (k+1) dt), the time-average of the piecewise-constant
    command that holds values[i] from times[i] + shift on (values[0] before the first)."""
    b = times + shift
    grid = np.arange(nstep + 1) * dt
    # integral of the command from 0 to each grid point
    seg = np.diff(b)  # durations of each command (the last one: open-ended)
    cum = np.concatenate([np.zeros((1, values.shape[1])),
                          np.cumsum(values[:-1] * seg[:, None], axis=0)])
    idx = np.clip(np.searchsorted(b, grid, side="right") - 1, 0, len(b) - 1)
    before = grid < b[0]
    integral = cum[idx] + values[idx] * (grid - b[idx])[:, None]
    integral[before] = values[0] * (grid[before] - b[0])[:, None]
    return np.diff(integral, axis=0) / dt


@dataclass
class Rows:
    """What a replay compares: residual rows' signal group and (legged) leg."""

    group: np.ndarray  # signal group index per row
    names: list[str]  # group names
    leg: np.ndarray  # leg per row (-1: none)


class _Replay:
    log: ExperimentLog
    robot: Robot
    pset: ParamSet
    model: mujoco.MjModel
    rows: Rows
    measured: np.ndarray  # (nrows,)

    def simulate(self, x: np.ndarray) -> np.ndarray:
        """(nvar, nrows) simulated values for parameter rows x (nvar, nparam)."""
        raise NotImplementedError

    def _batch(self, x: np.ndarray, copies: int = 1) -> mjbatch.Batch:
        """One simulation per parameter row of x, each repeated `copies` times in a row (the
        segments of multiple shooting), with the rows written into the model."""
        b = mjbatch.Batch(self.model, nsim=len(x) * copies, nthread=NTHREAD)
        fields = {f: b.expand(f) for f in self.pset.fields()}
        self.pset.write_model(fields, np.repeat(x, copies, axis=0))
        return b

    def initial_guess(self, x: np.ndarray) -> np.ndarray:
        """A start for the fit better than the nominal values, where the log shows one."""
        return x

    def residuals(self, x: np.ndarray, sigma: np.ndarray) -> np.ndarray:
        """(nvar, nrows) whitened residuals: (simulated - logged) / sigma of the row's group."""
        return (self.simulate(x) - self.measured[None]) / sigma[self.rows.group][None]


def _fitted_window(log: ExperimentLog, skip: tuple[str, ...]) -> tuple[float, float]:
    """Scenario times the fit compares: from the end of the skipped leading phases to the end
    of the experiment (or of the commands)."""
    phases = log.meta.get("phases") or []
    start = 0.0
    for name, a, b in phases:
        if name in skip and a <= start + 1e-9:
            start = float(b)
    end = float(log.meta.get("duration_s") or log.commands.t[-1])
    return start, end


class JointReplay(_Replay):
    SIGNALS = ("joint_pos", "joint_vel", "joint_effort")

    def __init__(self, log: ExperimentLog, robot: Robot, pset_kinds: tuple[str, ...] | None,
                 physics_dt: float | None = None, hold_base: bool | None = None,
                 skip_phases: tuple[str, ...] = ("settle", "still")):
        self.log, self.robot = log, robot
        model = compile_model(robot.mjcf_path)
        self.dt = physics_dt or min(float(model.opt.timestep), LEGGED_PD_DT)
        model.opt.timestep = self.dt
        model.actuator_delay[:] = 0.0  # the latency parameter shifts the commands instead
        # joint friction and stops are constraints: solved to MuJoCo's default tolerance their
        # forces carry solver noise that makes finite differences of the replay meaningless
        # (forward and backward differences of opposite sign); solved exactly, they agree
        model.opt.tolerance, model.opt.ls_tolerance = SOLVER_TOLERANCE, SOLVER_LS_TOLERANCE
        self.pset = ParamSet(robot, model, pset_kinds)
        spec = robot.spec
        base = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, spec.base_body)
        jnt = int(model.body_jntadr[base])
        self.root_q, self.root_v = int(model.jnt_qposadr[jnt]), int(model.jnt_dofadr[jnt])
        sim_cfg = log.meta.get("sim") or {}
        self.hold = bool(sim_cfg.get("hold_base", log.experiment == "go2-air")
                         if hold_base is None else hold_base)
        if not self.hold:
            raise LogError(f"{log.path}: replaying a legged robot on the ground is not built; "
                           "its joint parameters come from a hung experiment (go2-air)")
        model.dof_armature[self.root_v:self.root_v + 6] += HOLD_ARMATURE
        # hung: the legs never reach the ground (the HIL robot hangs it 1 m up), so no contacts
        model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
        self.pset.base_fields["dof_armature"] = model.dof_armature.copy()
        self.model = model
        self.act = self.pset._act
        sens = {}
        for key, attr in (("joint_pos", "position_sensor"), ("joint_vel", "velocity_sensor"),
                          ("joint_effort", "torque_sensor")):
            ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, getattr(j, attr))
                   for j in spec.joints]
            sens[key] = np.array([model.sensor_adr[i] for i in ids])
        # the logged states compared: after the settle phase, within the commands
        t0, t1 = _fitted_window(log, skip_phases)
        st = log.states[next(k for k, s in log.states.items() if "joint_pos" in s.values)]
        keep = (st.t >= t0) & (st.t <= t1)
        self.sample_t = st.t[keep]
        self.sample_step = np.maximum(1, np.round(self.sample_t / self.dt).astype(int))
        self.nstep = int(self.sample_step[-1])
        nj = len(spec.joints)
        signals = [s for s in self.SIGNALS if s in st.values]
        self.cols = np.concatenate([sens[s] for s in signals])
        self.measured = np.concatenate([st.values[s][keep] for s in signals], axis=1).ravel()
        self.sample_values = self.measured.reshape(len(self.sample_t), -1)  # (sample, row)
        per = len(signals) * nj
        group = np.repeat(np.arange(len(signals)), nj)
        legs = np.array([p.group if p.group is not None else -1 for p in self.pset.params])
        joint_leg = np.full(nj, -1)
        for p, g in zip(self.pset.params, legs, strict=True):
            if p.index >= 0:
                joint_leg[p.index] = g
        self.rows = Rows(np.tile(group, len(self.sample_t)), list(signals),
                         np.tile(np.tile(joint_leg, len(signals)), len(self.sample_t)))
        self.per_sample = per
        # the start: at rest, in the pose logged before the first command, or, when the fit
        # skips a still period, at its end in the mean pose of its last REST_AVERAGE_S (the
        # robot rests there; a run through it would only add the friction creep)
        pre = st.t < 0
        self.q_init = (st.values["joint_pos"][pre].mean(0) if pre.any()
                       else st.values["joint_pos"][0])
        self.k0 = 0
        still = [b for a, b in log.phases("still") if abs(b - t0) < 1e-9]
        rest = (st.t >= t0 - REST_AVERAGE_S) & (st.t < t0)
        if still and rest.sum() >= 2:
            self.q_init = st.values["joint_pos"][rest].mean(0)
            self.k0 = int(round(t0 / self.dt))
        orient = log.signal("orientation")
        pre_o = orient.t < 0
        quat = (orient.values["orientation"][pre_o].mean(0) if pre_o.any()
                else orient.values["orientation"][0])
        self.base_quat = quat / np.linalg.norm(quat)
        self.qadr = self.pset._qadr
        self.vadr = self.pset._dof

    def initial_guess(self, x: np.ndarray) -> np.ndarray:
        """A start for the fit, from what the log shows directly: each encoder offset as the
        mean difference of logged and replayed angles while the joint rests on its stop (the
        stop moves with the offset), each torque limit as the level the torque estimate
        saturates at during the high-gain steps."""
        x = x.copy()
        ps, nj = self.pset, len(self.robot.spec.joints)
        per = self.sample_values
        stop = self.log.phases("stop")
        if stop and any(p.kind == "offset" for p in ps.params):
            a, b = stop[0]
            m = (self.sample_t > a + 0.3 * (b - a)) & (self.sample_t < b - 0.1 * (b - a))
            if m.any():
                sim = JointReplay.simulate(self, x[None])[0].reshape(len(self.sample_t), -1)
                shift = (per[m, :nj] - sim[m, :nj]).mean(0)
                for p_i, p in enumerate(ps.params):
                    if p.kind == "offset":
                        x[p_i] = np.clip(x[p_i] + shift[p.index], p.lower, p.upper)
        steps = self.log.phases("steps")
        if steps and "joint_effort" in self.rows.names:
            g = self.rows.names.index("joint_effort")
            a, b = steps[0]
            m = (self.sample_t >= a) & (self.sample_t < b)
            effort = np.abs(per[m, g * nj:(g + 1) * nj])
            for p_i, p in enumerate(ps.params):
                if p.kind == "torque_limit" and len(effort):
                    col = effort[:, p.index]
                    top = col[col > 0.97 * col.max()]
                    x[p_i] = np.clip(top.mean(), p.lower, p.upper)
        return x

    def _schedule(self, latency: float) -> dict[str, np.ndarray]:
        c = self.log.commands
        out = {}
        for key in ("q", "kp", "kd", "dq", "tau"):
            out[key] = shifted_average(c.t, c.values[key], latency, self.dt, self.nstep)
        return out

    def simulate(self, x: np.ndarray) -> np.ndarray:
        nvar = len(x)
        b = self._batch(x)
        gain, bias = b.expand("actuator_gainprm"), b.expand("actuator_biasprm")
        qpos, qvel, ctrl = b.bind("qpos"), b.bind("qvel"), b.bind("ctrl")
        sensordata = b.bind("sensordata")
        qpos[:, self.root_q:self.root_q + 3] = (0.0, 0.0, 1.0)
        qpos[:, self.root_q + 3:self.root_q + 7] = self.base_quat
        qpos[:, self.qadr] = self.q_init
        qvel[:] = 0.0
        b.set_const()
        b.forward(stage=mujoco.mjtStage.mjSTAGE_VEL)
        lat = self.pset.latency(x)
        uniq, which = np.unique(lat, return_inverse=True)
        sched = [self._schedule(float(v)) for v in uniq]
        q = np.stack([sched[w]["q"] for w in which])  # (nvar, nstep, nj)
        kp = np.stack([sched[w]["kp"] for w in which])
        kd = np.stack([sched[w]["kd"] for w in which])
        ff = np.stack([sched[w]["kd"] * sched[w]["dq"] + sched[w]["tau"] for w in which])
        gains = np.concatenate([kp, kd, ff], axis=2)
        changed = np.ones(self.nstep, dtype=bool)
        changed[1:] = np.any(np.abs(np.diff(np.concatenate([q, gains], axis=2), axis=1)) > 0,
                             axis=(0, 2))
        reads = np.zeros(self.nstep + 1, dtype=bool)
        reads[self.sample_step] = True
        # the robot rests in its logged pose until the first command reaches its drivers
        first_cmd = np.ceil((self.log.commands.t[0] + lat) / self.dt - 1e-6).astype(int)
        first_cmd = np.clip(first_cmd, 0, self.nstep - 1)
        changed[first_cmd] = True
        out = np.empty((nvar, len(self.sample_step), len(self.cols)))
        sample_of = {s: i for i, s in enumerate(self.sample_step)}
        strength = self.pset.strength(x)[:, None, :]  # the drivers' torque scale
        kp, kd, ff = kp * strength, kd * strength, ff * strength
        a = self.act
        k = self.k0
        while k < self.nstep:
            # steps from k on with the same commands and no sample to read in between
            n = 1
            while k + n < self.nstep and not changed[k + n] and not reads[k + n]:
                n += 1
            ctrl[:, a] = q[:, k]
            gain[:, a, 0] = kp[:, k]
            bias[:, a, 0] = ff[:, k]
            bias[:, a, 1] = -kp[:, k]
            bias[:, a, 2] = -kd[:, k]
            b.step(nstep=n, stage=mujoco.mjtStage.mjSTAGE_NONE)
            k += n
            qpos[:, self.root_q:self.root_q + 3] = (0.0, 0.0, 1.0)
            qpos[:, self.root_q + 3:self.root_q + 7] = self.base_quat
            qvel[:, self.root_v:self.root_v + 6] = 0.0
            resting = first_cmd >= k
            if resting.any():
                qpos[np.ix_(resting, self.qadr)] = self.q_init
                qvel[np.ix_(resting, self.vadr)] = 0.0
            if reads[k]:
                out[:, sample_of[k]] = sensordata[:, self.cols]
        return out.reshape(nvar, -1)


class RotorReplay(_Replay):
    SIGNALS = ("linear_velocity", "angular_velocity")

    def __init__(self, log: ExperimentLog, robot: Robot, pset_kinds: tuple[str, ...] | None,
                 physics_dt: float | None = None, segment_s: float = 0.3,
                 gyro_bias: np.ndarray | None = None, skip_phases: tuple[str, ...] = (
                     "pad", "still", "takeoff")):
        self.log, self.robot = log, robot
        model = compile_model(robot.mjcf_path)
        self.dt = physics_dt or float(model.opt.timestep)
        model.opt.timestep = self.dt
        model.actuator_delay[:] = 0.0
        self.model = model
        self.pset = ParamSet(robot, model, pset_kinds)
        spec = robot.spec
        base = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, spec.base_body)
        jnt = int(model.body_jntadr[base])
        self.root_q, self.root_v = int(model.jnt_qposadr[jnt]), int(model.jnt_dofadr[jnt])
        self.act = self.pset._act
        self.max_thrust = spec.rotor_model.max_thrust
        st = log.states[next(iter(log.states))]
        v = dict(st.values)
        if gyro_bias is not None:
            v["angular_velocity"] = v["angular_velocity"] - gyro_bias
        self.t = st.t
        self.state = v
        # segments: after lift-off and the skipped phases
        t0, t1 = _fitted_window(log, skip_phases)
        pre = st.t < 0
        pad_z = v["position"][pre, 2].mean() if pre.any() else v["position"][0, 2]
        flying = np.nonzero(v["position"][:, 2] > pad_z + 0.01)[0]
        if not len(flying):
            raise LogError(f"{log.path}: the vehicle never left its pad")
        t0 = max(t0, st.t[flying[0]] + 0.2)
        sensors = {}
        names = {"linear_velocity": spec.sensors.get("linear_velocity"),
                 "angular_velocity": spec.sensors.get("angular_velocity")}
        for key, name in names.items():
            sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, name or "")
            if sid < 0:
                raise LogError(f"{robot.mjcf_path}: no {key} sensor for the replay")
            sensors[key] = np.arange(model.sensor_adr[sid], model.sensor_adr[sid] + 3)
        self.cols = np.concatenate([sensors[s] for s in self.SIGNALS])
        step = np.round(st.t / self.dt).astype(int)
        seg_steps = max(2, round(segment_s / self.dt))
        starts, samples = [], []
        i = int(np.searchsorted(st.t, t0))
        while i < len(st.t) and st.t[i] + segment_s <= t1:
            end = step[i] + seg_steps
            inside = [j for j in range(i + 1, len(st.t)) if step[i] < step[j] <= end]
            if inside:
                starts.append(i)
                samples.append(inside)
            i = inside[-1] + 1 if inside else i + 1
        if not starts:
            raise LogError(f"{log.path}: no flight segment of {segment_s} s to replay")
        self.starts = np.array(starts)
        self.samples = samples
        self.seg_steps = seg_steps
        self.step = step
        self.nstep = int(step[max(s[-1] for s in samples)]) + 1
        meas = [np.concatenate([v[s][j] for s in self.SIGNALS]) for seg in samples
                for j in seg]
        self.measured = np.concatenate(meas)
        group = np.repeat(np.arange(len(self.SIGNALS)), 3)
        nrows_per = len(self.cols)
        count = sum(len(s) for s in samples)
        self.rows = Rows(np.tile(group, count), list(self.SIGNALS),
                         np.full(count * nrows_per, -1))

    def _thrust(self, x: np.ndarray) -> np.ndarray:
        """(nvar, nstep, nrotor) thrust of every physics step, from the motor model run over
        the logged commands (as sim/rotors.py: exact first-order lag per step)."""
        c = self.log.commands
        tau = self.pset.motor_time_constant(x)
        lat = self.pset.latency(x)
        scale = self.pset.thrust_scale(x)
        out = np.empty((len(x), self.nstep, len(self.act)))
        for i in range(len(x)):
            u = shifted_average(c.t, c.values["rotor_speed"], float(lat[i]), self.dt,
                                self.nstep)
            u = np.where(np.arange(self.nstep)[:, None] * self.dt < c.t[0] + lat[i], 0.0, u)
            alpha = 1.0 - np.exp(-self.dt / tau[i])
            speed = lfilter([alpha], [1.0, alpha - 1.0], np.clip(u, 0.0, 1.0), axis=0)
            out[i] = self.max_thrust * scale[i] * speed ** 2
        return out

    def simulate(self, x: np.ndarray) -> np.ndarray:
        nvar, nseg = len(x), len(self.starts)
        nsim = nvar * nseg
        b = self._batch(x, nseg)
        b.set_const()
        qpos, qvel, ctrl = b.bind("qpos"), b.bind("qvel"), b.bind("ctrl")
        sensordata = b.bind("sensordata")
        s = self.state
        i0 = np.tile(self.starts, nvar)
        qpos[:, self.root_q:self.root_q + 3] = s["position"][i0]
        quat = s["orientation"][i0]
        qpos[:, self.root_q + 3:self.root_q + 7] = quat / np.linalg.norm(quat, axis=1)[:, None]
        qvel[:, self.root_v:self.root_v + 3] = s["linear_velocity"][i0]
        qvel[:, self.root_v + 3:self.root_v + 6] = s["angular_velocity"][i0]
        thrust = self._thrust(x)  # (nvar, nstep, nrot)
        var = np.repeat(np.arange(nvar), nseg)
        first = self.step[i0] - 1  # the start state is the one sensed during that step
        out = np.zeros((nsim, self.seg_steps + 1, len(self.cols)))
        for m in range(self.seg_steps + 1):
            k = np.clip(first + m, 0, self.nstep - 1)
            ctrl[:, self.act] = thrust[var, k]
            b.step(nstep=1, stage=mujoco.mjtStage.mjSTAGE_NONE)
            out[:, m] = sensordata[:, self.cols]
        res = []
        for v in range(nvar):
            rows = []
            for g, seg in enumerate(self.samples):
                sim = v * nseg + g
                for j in seg:
                    rows.append(out[sim, self.step[j] - self.step[self.starts[g]]])
            res.append(np.concatenate(rows))
        return np.array(res)


class JointSegmentReplay(JointReplay):
    """JointReplay by multiple shooting: the fitted window cut into segments of `segment_s`,
    each started from the logged joint state (angles and velocities, as the encoders read them)
    and run with the logged commands; compared: the samples inside each segment after its
    start. A long single run integrates every parameter error into the state (a joint that
    comes to rest with friction stops wherever its history left it), which gives the least
    squares local minima; restarted segments keep each residual local, close to the inverse
    dynamics' linear regression. The fit's first stage (calibration/fit.py)."""

    def __init__(self, log: ExperimentLog, robot: Robot, pset_kinds: tuple[str, ...] | None,
                 physics_dt: float | None = None, segment_s: float = 0.2, **kw: object):
        super().__init__(log, robot, pset_kinds, physics_dt, **kw)  # type: ignore[arg-type]
        st = log.states[next(k for k, s in log.states.items() if "joint_pos" in s.values)]
        index = {round(float(t) * 1e9): i for i, t in enumerate(st.t)}
        rows = [index[round(float(t) * 1e9)] for t in self.sample_t]
        self.start_q = st.values["joint_pos"][rows]
        self.start_v = st.values["joint_vel"][rows]
        per_seg = max(2, round(segment_s / self.dt))
        starts, members = [], []
        i = 0
        while i < len(self.sample_step) - 1:
            inside = [j for j in range(i + 1, len(self.sample_step))
                      if self.sample_step[j] - self.sample_step[i] <= per_seg]
            if not inside:  # a gap in the log longer than a segment: start after it
                i += 1
                continue
            starts.append(i)
            members.append(inside)
            i = inside[-1]
        self.seg_start = np.array(starts)
        self.seg_members = members
        self.seg_len = max(int(self.sample_step[m[-1]] - self.sample_step[s]) for s, m in
                           zip(starts, members, strict=True)) + 1
        keep = np.concatenate(members)
        self.compared = keep
        nrow = self.per_sample
        self.measured = self.measured.reshape(len(self.sample_t), nrow)[keep].ravel()
        self.rows = Rows(np.tile(self.rows.group[:nrow], len(keep)), self.rows.names,
                         np.tile(self.rows.leg[:nrow], len(keep)))

    def simulate(self, x: np.ndarray) -> np.ndarray:
        nvar, nseg = len(x), len(self.seg_start)
        nsim = nvar * nseg
        b = self._batch(x, nseg)
        gain, bias = b.expand("actuator_gainprm"), b.expand("actuator_biasprm")
        qpos, qvel, ctrl = b.bind("qpos"), b.bind("qvel"), b.bind("ctrl")
        sensordata = b.bind("sensordata")
        var = np.repeat(np.arange(nvar), nseg)
        seg = np.tile(np.arange(nseg), nvar)
        s0 = self.seg_start[seg]
        qpos[:, self.root_q:self.root_q + 3] = (0.0, 0.0, 1.0)
        qpos[:, self.root_q + 3:self.root_q + 7] = self.base_quat
        qpos[:, self.qadr] = self.start_q[s0]
        qvel[:] = 0.0
        qvel[:, self.vadr] = self.start_v[s0]
        b.set_const()
        lat = self.pset.latency(x)
        uniq, which = np.unique(lat, return_inverse=True)
        sched = [self._schedule(float(v)) for v in uniq]
        strength = self.pset.strength(x)
        # the logged state of sample s is the one the step ending at sample_step[s] began with
        first = self.sample_step[s0] - 1
        a = self.act
        out = np.empty((nsim, self.seg_len, len(self.cols)))
        for m in range(self.seg_len):
            k = np.minimum(first + m, self.nstep - 1)
            for u in range(len(uniq)):
                rows = which[var] == u
                sc, kk, st = sched[u], k[rows], strength[var[rows]]
                ctrl[np.ix_(rows, a)] = sc["q"][kk]
                gain[np.ix_(rows, a, [0])] = (st * sc["kp"][kk])[:, :, None]
                bias[np.ix_(rows, a, [0])] = (st * (sc["kd"][kk] * sc["dq"][kk]
                                                    + sc["tau"][kk]))[:, :, None]
                bias[np.ix_(rows, a, [1])] = (-st * sc["kp"][kk])[:, :, None]
                bias[np.ix_(rows, a, [2])] = (-st * sc["kd"][kk])[:, :, None]
            b.step(nstep=1, stage=mujoco.mjtStage.mjSTAGE_NONE)
            qpos[:, self.root_q:self.root_q + 3] = (0.0, 0.0, 1.0)
            qpos[:, self.root_q + 3:self.root_q + 7] = self.base_quat
            qvel[:, self.root_v:self.root_v + 6] = 0.0
            out[:, m] = sensordata[:, self.cols]
        res = np.empty((nvar, len(self.compared), len(self.cols)))
        c = 0
        for g, members in enumerate(self.seg_members):
            off = self.sample_step[members] - self.sample_step[self.seg_start[g]]
            res[:, c:c + len(members)] = out[np.arange(nvar) * nseg + g][:, off]
            c += len(members)
        return res.reshape(nvar, -1)
