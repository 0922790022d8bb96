"""Calibration experiments: what the robot is commanded, period by period.

An experiment runs at the robot's control rate. Each period it gets the latest state signals
(deploy's names: joint_pos, orientation, ...) and scenario time t (s, 0 at its first command)
and returns the command: legged robots per-joint position targets with the gains (`q`, `kp`,
`kd`, policy order, sent as Unitree LowCmd); quadrotors rotor speed fractions (`rotor_speed`).
It also names its phases (the report marks them; `still` phases give the IMU biases) and how a
simulated robot is set up for it (hung in the air, or standing).

- `go2-air`: the robot hung with its legs in the air (a gantry; the simulated robot's base is
  held). A 6 s still period (IMU biases), then each joint is pressed against one mechanical
  stop (the encoder offset), chirped (0.3-6 Hz, hips sweeping up, thighs down, calves up, all
  legs at once) at the robot's PD gains, swept by a slow sine at low gain (friction), then
  stepped at high gain so that every driver saturates (torque limits).
- `go2-ground`: standing on flat ground: a still period (IMU biases), then small joint chirps.
- `quad-hover`: on the pad, still (gyro bias); take-off, hover under a geometric controller
  (Lee et al. 2010) that runs in the recorder on the odometry, and excitation added to its
  output: collective thrust steps, roll, pitch and yaw torque doublets.

`scale` shortens every phase but the still periods and the first settling (tests use short
logs). Safety on a real robot: hang the go2 from a
gantry for go2-air (legs swing to their stops and step at high gain); fly quad-hover tethered
or in a cage, with the e-stop at hand.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from simreal.core.spatial import quat_to_matrix
from simreal.robots import Robot

GRAVITY = 9.81
STILL_S = 1.5  # s at rest for the IMU biases (not scaled: their precision is noise / sqrt(n))


class ExperimentError(ValueError):
    """An experiment that does not fit the robot (or an unknown name)."""


@dataclass(frozen=True)
class Phase:
    name: str
    start: float
    end: float


class Experiment(ABC):
    name = ""
    kind = ""  # robot kind
    interfaces: tuple[str, ...] = ()
    description = ""

    def __init__(self, robot: Robot, scale: float = 1.0):
        if robot.spec.kind != self.kind:
            raise ExperimentError(f"experiment {self.name!r} is for {self.kind} robots; "
                                  f"{robot.name} is {robot.spec.kind}")
        if not scale > 0:
            raise ExperimentError(f"scale must be positive, got {scale}")
        self.robot, self.scale = robot, float(scale)
        self.rate_hz = robot.spec.control.rate_hz
        self.phases = self._phases()
        self.duration_s = self.phases[-1].end

    @abstractmethod
    def _phases(self) -> list[Phase]: ...

    @abstractmethod
    def command(self, t: float, signals: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The command of the period starting at scenario time t."""

    def sim_config(self) -> dict[str, Any]:
        """Settings of a simulated robot for this experiment (hil/robot.RobotSimConfig)."""
        return {}

    def phase_at(self, t: float) -> str | None:
        for p in self.phases:
            if p.start <= t < p.end:
                return p.name
        return None

    def windows(self, name: str) -> list[tuple[float, float]]:
        return [(p.start, p.end) for p in self.phases if p.name == name]

    def meta(self) -> dict[str, Any]:
        return {"experiment": self.name, "scale": self.scale, "robot": self.robot.name,
                "duration_s": self.duration_s, "rate_hz": self.rate_hz,
                "phases": [[p.name, p.start, p.end] for p in self.phases]}


def _sequence(spec: list[tuple[str, float]], scale: float, start: float = 0.0) -> list[Phase]:
    out, t = [], start
    for name, dur in spec:
        out.append(Phase(name, t, t + dur * scale))
        t += dur * scale
    return out


def _chirp(t: float, duration: float, f0: float, f1: float) -> float:
    """A logarithmic sweep from f0 to f1 Hz over `duration`, sin(phase), at time t into it."""
    k = math.log(f1 / f0) / duration
    return math.sin(2 * math.pi * f0 * (math.exp(k * t) - 1.0) / k)


# --- go2 ---------------------------------------------------------------------------------------
class _JointExperiment(Experiment):
    kind = "legged"
    interfaces = ("native",)

    def __init__(self, robot: Robot, scale: float = 1.0):
        super().__init__(robot, scale)
        joints = robot.spec.joints
        self.default = np.array([j.default for j in joints])
        self.kp = np.array([j.kp for j in joints])
        self.kd = np.array([j.kd for j in joints])
        self.parts = [next((p for p in ("hip", "thigh", "calf") if p in j.name), "other")
                      for j in joints]
        self.ranges = _joint_ranges(robot)

    def _hold(self) -> dict[str, np.ndarray]:
        return {"q": self.default.copy(), "kp": self.kp.copy(), "kd": self.kd.copy()}


def _joint_ranges(robot: Robot) -> np.ndarray:
    """(n, 2) joint ranges of the MJCF (deploy's reading of it: classes and units resolved)."""
    from simreal.deploy.limits import joint_ranges

    ranges = joint_ranges(robot)
    out = []
    for j in robot.spec.joints:
        r = ranges.get(j.name)
        if r is None:
            raise ExperimentError(f"{robot.mjcf_path}: joint {j.name!r} has no range; the "
                                  "experiment moves joints within their ranges")
        out.append(r)
    return np.array(out, dtype=np.float64)


class Go2Air(_JointExperiment):
    name = "go2-air"
    description = ("hung, legs in the air: joints against a stop (offsets), chirps at the PD "
                   "gains, a low-gain sweep (friction), high-gain steps (torque limits)")
    CHIRP_AMPLITUDE = {"hip": 0.25, "thigh": 0.35, "calf": 0.35, "other": 0.2}  # rad
    STEP = 0.35  # rad
    STEP_KP, STEP_KD = 100.0, 2.0
    # the robot's gains pressing 0.2 rad past the stop: at most 4 N m beyond what holds the leg
    # against gravity, so that every joint rests on its stop (at kp 10 and 0.05 rad, gravity
    # held the thighs and some hips off theirs, and their offsets went unseen)
    STOP_KP, STOP_PUSH = 20.0, 0.2  # N m/rad, rad beyond the stop
    # a slow sine at low gain: friction (F) shows as a lag of F / kp in the angle, 5-30 mrad
    # against 2 mrad of encoder noise, at every reversal
    SWEEP_KP, SWEEP_HZ = 10.0, 1.5  # N m/rad, Hz
    SWEEP_AMPLITUDE = {"hip": 0.15, "thigh": 0.2, "calf": 0.2, "other": 0.15}  # rad
    STILL_S = 6.0  # s: the gyro bias's standard error is noise / sqrt(samples)

    def _phases(self) -> list[Phase]:
        # settle is not scaled: the fit skips it (a simulated robot's driver starts from an
        # empty command history); gains change only while the targets rest (gain_up,
        # gain_down), so a delay that applies gains and targets apart changes nothing
        head = [Phase("settle", 0.0, 0.5), Phase("still", 0.5, 0.5 + self.STILL_S)]
        body = _sequence([("to_stop", 1.0), ("stop", 1.0), ("from_stop", 1.0), ("chirp", 8.0),
                          ("sweep", 4.0)], self.scale, head[-1].end)
        t = body[-1].end
        tail = [Phase("gain_up", t, t + 0.1)]
        tail += _sequence([("steps", 4.0)], self.scale, t + 0.1)
        t = tail[-1].end
        tail += [Phase("gain_down", t, t + 0.3), Phase("hold", t + 0.3, t + 0.6)]
        return head + body + tail

    def sim_config(self) -> dict[str, Any]:
        return {"hold_base": True, "initial_position": (0.0, 0.0, 1.0)}

    def _stop_target(self) -> np.ndarray:
        """Per joint: a little beyond the stop nearest to the default pose... except thighs,
        which go to their lower stop (leg forward), and calves to their upper (leg stretched)."""
        lo, hi = self.ranges[:, 0], self.ranges[:, 1]
        out = np.where(self.default - lo < hi - self.default, lo - self.STOP_PUSH,
                       hi + self.STOP_PUSH)
        for j, part in enumerate(self.parts):
            if part == "calf":
                out[j] = hi[j] + self.STOP_PUSH
            elif part == "thigh":
                out[j] = lo[j] - self.STOP_PUSH
        return out

    def command(self, t: float, signals: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cmd = self._hold()
        phase = self.phase_at(t)
        p = {ph.name: ph for ph in self.phases}
        if phase in ("to_stop", "stop", "from_stop"):
            ph = p[phase]
            u = (t - ph.start) / (ph.end - ph.start)
            w = {"to_stop": u, "stop": 1.0, "from_stop": 1.0 - u}[phase]
            w = 0.5 - 0.5 * math.cos(math.pi * w)  # smooth ramp
            cmd["q"] = self.default + w * (self._stop_target() - self.default)
            cmd["kp"] = np.full_like(self.kp, self.STOP_KP)
        elif phase == "chirp":
            ph = p["chirp"]
            tc, dur = t - ph.start, ph.end - ph.start
            fade = min(1.0, max(0.0, min(tc, dur - 0.05 - tc) / 0.3))  # rests at the ends
            up, down = _chirp(tc, dur, 0.3, 6.0), _chirp(dur - tc, dur, 0.3, 6.0)
            for j, part in enumerate(self.parts):
                s = down if part == "thigh" else up
                cmd["q"][j] += fade * self.CHIRP_AMPLITUDE[part] * s
        elif phase == "sweep":
            ph = p["sweep"]
            tc, dur = t - ph.start, ph.end - ph.start
            fade = min(1.0, max(0.0, min(tc, dur - 0.05 - tc) / 0.2))
            wave = math.sin(2 * math.pi * self.SWEEP_HZ * tc)
            for j, part in enumerate(self.parts):
                cmd["q"][j] += fade * self.SWEEP_AMPLITUDE[part] * wave
            cmd["kp"] = np.full_like(self.kp, self.SWEEP_KP)
        elif phase in ("gain_up", "gain_down"):
            cmd["kp"] = np.full_like(self.kp, self.STEP_KP)
            cmd["kd"] = np.full_like(self.kd, self.STEP_KD)
        elif phase == "steps":
            ph = p["steps"]
            period = 0.4 * self.scale ** 0.5
            delay = {"hip": 0.0, "thigh": 0.33, "calf": 0.66, "other": 0.5}
            for j, part in enumerate(self.parts):
                k = math.floor((t - ph.start) / period - delay[part])
                if k >= 0:
                    cmd["q"][j] += self.STEP * (1.0 if k % 2 == 0 else -1.0)
            cmd["kp"] = np.full_like(self.kp, self.STEP_KP)
            cmd["kd"] = np.full_like(self.kd, self.STEP_KD)
        return cmd


class Go2Ground(_JointExperiment):
    name = "go2-ground"
    description = "standing on flat ground: still (IMU biases), then small joint chirps"
    AMPLITUDE = 0.08  # rad

    def _phases(self) -> list[Phase]:
        head = [Phase("settle", 0.0, 1.5), Phase("still", 1.5, 1.5 + 2 * STILL_S)]
        return head + _sequence([("chirp", 5.0), ("hold", 0.5)], self.scale, head[-1].end)

    def command(self, t: float, signals: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cmd = self._hold()
        ph = next(p for p in self.phases if p.name == "chirp")
        if ph.start <= t < ph.end:
            tc, dur = t - ph.start, ph.end - ph.start
            fade = min(1.0, tc / 0.3, (dur - tc) / 0.3)
            cmd["q"] = cmd["q"] + fade * self.AMPLITUDE * _chirp(tc, dur, 0.5, 4.0)
        return cmd


# --- quadrotor ---------------------------------------------------------------------------------
def rotor_geometry(robot: Robot) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rotor positions (n, 3) in the body frame, their yaw-torque gear (N m per N of thrust)
    and the base body's diagonal inertia, read from the MJCF as XML (no MuJoCo needed: the
    recorder runs where the robot's computer is)."""
    root = ET.parse(robot.mjcf_path).getroot()
    sites = {s.get("name"): s for s in root.iter("site")}
    acts = {a.get("name"): a for sec in root.iter("actuator") for a in sec}
    pos, yaw = [], []
    for r in robot.spec.rotors:
        act = acts.get(r.actuator)
        if act is None or act.get("site") not in sites:
            raise ExperimentError(f"{robot.mjcf_path}: rotor actuator {r.actuator!r} needs a "
                                  "site")
        pos.append([float(v) for v in sites[act.get("site")].get("pos", "0 0 0").split()])
        gear = [float(v) for v in act.get("gear", "1 0 0 0 0 0").split()] + [0.0] * 6
        yaw.append(gear[5])
    inertia = None
    for body in root.iter("body"):
        if body.get("name") == robot.spec.base_body:
            inertial = body.find("inertial")
            if inertial is not None and inertial.get("diaginertia"):
                inertia = np.array([float(v) for v in inertial.get("diaginertia").split()])
    if inertia is None:
        raise ExperimentError(f"{robot.mjcf_path}: base body {robot.spec.base_body!r} needs an "
                              "<inertial diaginertia=...>")
    return np.array(pos), np.array(yaw), inertia


class QuadHover(Experiment):
    name = "quad-hover"
    kind = "quadrotor"
    interfaces = ("generic", "native")
    description = ("still on the pad (gyro bias), take-off, hover with thrust steps and roll, "
                   "pitch, yaw torque doublets added to a geometric controller's output")
    CLIMB = 0.5  # m above the pad
    THRUST_STEP = 0.15  # of the hover thrust
    ANGULAR_STEP = (40.0, 40.0, 15.0)  # rad/s^2 roll, pitch, yaw
    DOUBLET_S = 0.15

    def __init__(self, robot: Robot, scale: float = 1.0):
        super().__init__(robot, scale)
        spec = robot.spec
        self.mass = spec.mass
        self.max_thrust = spec.rotor_model.max_thrust
        pos, yaw, self.inertia = rotor_geometry(robot)
        self.mix = np.vstack([np.ones(len(pos)), pos[:, 1], -pos[:, 0], yaw])  # T, tx, ty, tz
        self.unmix = np.linalg.pinv(self.mix)
        self.pad: np.ndarray | None = None
        self.integral = 0.0
        self._last_t: float | None = None

    def _phases(self) -> list[Phase]:
        head = [Phase("pad", 0.0, 0.2), Phase("still", 0.2, 0.2 + STILL_S)]
        return head + _sequence([("takeoff", 2.0), ("excite", 8.0), ("hover", 1.0)], self.scale,
                                head[-1].end)

    def _excitation(self, t: float) -> tuple[float, np.ndarray]:
        """Collective thrust (fraction of hover) and angular acceleration (rad/s^2) added to
        the controller: a cycle of thrust step up, down, roll, pitch and yaw doublets."""
        ph = next(p for p in self.phases if p.name == "excite")
        if not ph.start <= t < ph.end:
            return 0.0, np.zeros(3)
        cycle = 6 * 2 * self.DOUBLET_S + 0.6
        tc = (t - ph.start) % cycle
        slot, u = divmod(tc, 2 * self.DOUBLET_S)
        sign = 1.0 if u < self.DOUBLET_S else -1.0
        ang = np.zeros(3)
        if slot == 0:
            return self.THRUST_STEP * sign, ang
        if slot == 1:
            return -self.THRUST_STEP * sign * 0.7, ang
        if 2 <= slot <= 4:
            ang[int(slot) - 2] = self.ANGULAR_STEP[int(slot) - 2] * sign
            return 0.0, ang
        if slot == 5:
            ang[2] = -self.ANGULAR_STEP[2] * sign
        return 0.0, ang

    def command(self, t: float, signals: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(self.robot.spec.rotors)
        if "position" not in signals:
            return {"rotor_speed": np.zeros(n)}
        if self.pad is None:
            self.pad = np.array(signals["position"], dtype=np.float64)
        if self.phase_at(t) in ("pad", "still"):
            return {"rotor_speed": np.zeros(n)}
        dt = 1.0 / self.rate_hz if self._last_t is None else t - self._last_t
        self._last_t = t
        p, v = signals["position"], signals["linear_velocity"]
        q = np.asarray(signals["orientation"], dtype=np.float64)
        rot = quat_to_matrix(q / np.linalg.norm(q))  # an estimator's quaternion: normalized
        omega = np.asarray(signals["angular_velocity"], dtype=np.float64)
        target = self.pad + np.array([0.0, 0.0, self.CLIMB])
        err = target - p
        self.integral = float(np.clip(self.integral + err[2] * dt, -0.5, 0.5))
        acc = 4.0 * err - 2.8 * v + np.array([0.0, 0.0, 2.0 * self.integral + GRAVITY])
        b3 = rot[:, 2]
        dthrust, dang = self._excitation(t)
        thrust = self.mass * max(float(acc @ b3), 0.2 * GRAVITY) + \
            dthrust * self.mass * GRAVITY
        z_d = acc / np.linalg.norm(acc)
        y_c = np.array([0.0, 1.0, 0.0])  # yaw 0
        x_d = np.cross(y_c, z_d)
        x_d /= np.linalg.norm(x_d)
        r_d = np.column_stack([x_d, np.cross(z_d, x_d), z_d])
        e = r_d.T @ rot - rot.T @ r_d
        e_r = 0.5 * np.array([e[2, 1], e[0, 2], e[1, 0]])
        alpha = -225.0 * e_r - 21.0 * omega + dang
        torque = self.inertia * alpha
        per_rotor = np.clip(self.unmix @ np.concatenate([[thrust], torque]), 0.0,
                            self.max_thrust)
        return {"rotor_speed": np.sqrt(per_rotor / self.max_thrust)}


EXPERIMENTS: dict[str, type[Experiment]] = {c.name: c for c in (Go2Air, Go2Ground, QuadHover)}


def make_experiment(name: str, robot: Robot, scale: float = 1.0) -> Experiment:
    if name not in EXPERIMENTS:
        raise ExperimentError(f"unknown experiment {name!r}; known: "
                              f"{', '.join(sorted(EXPERIMENTS))}")
    return EXPERIMENTS[name](robot, scale)
