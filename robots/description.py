"""The robot description: a typed view of robot.yaml, checked against its MJCF.

This module imports neither torch nor mujoco, so the deploy runtime on a robot computer reads
the same description the simulator does. The MJCF is cross-checked as XML here; compiling it is
the simulator's job (sim/backend.py), which reports MuJoCo's own error with the file name.
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from simreal.core.config import ConfigError, FrozenModel, load_yaml_model


class RobotError(ConfigError):
    """A robot description that cannot be used; the message names the file and the field."""


_Strict = FrozenModel


class Control(_Strict):
    rate_hz: float = Field(gt=0)
    physics_dt: float = Field(gt=0)

    @property
    def decimation(self) -> int:
        return round(1.0 / (self.rate_hz * self.physics_dt))

    @model_validator(mode="after")
    def _integer_decimation(self) -> Control:
        ratio = 1.0 / (self.rate_hz * self.physics_dt)
        if ratio < 1 or abs(ratio - round(ratio)) > 1e-6:
            raise ValueError(
                f"1/(rate_hz*physics_dt) = {ratio:g} must be a whole number of physics steps"
            )
        return self


class Rotor(_Strict):
    actuator: str
    spin: Literal["cw", "ccw"]


class RotorModel(_Strict):
    thrust_coefficient: float = Field(gt=0, description="N/RPM^2")
    torque_coefficient: float = Field(gt=0, description="N m/RPM^2")
    max_thrust: float = Field(gt=0, description="N per rotor")
    time_constant: float = Field(gt=0, description="s, first-order motor lag")

    @property
    def max_rpm(self) -> float:
        return (self.max_thrust / self.thrust_coefficient) ** 0.5


class Joint(_Strict):
    name: str
    actuator: str
    default: float = 0.0
    kp: float | None = Field(default=None, ge=0)
    kd: float | None = Field(default=None, ge=0)
    torque_limit: float | None = Field(default=None, gt=0)
    velocity_limit: float | None = Field(default=None, gt=0)
    # the joint's encoder and torque estimate, as MJCF sensors (jointpos, jointvel, actuatorfrc)
    position_sensor: str | None = None
    velocity_sensor: str | None = None
    torque_sensor: str | None = None
    # this joint's nominal passive dynamics where they differ from `physics.joint_*.nominal`
    # (a calibrated robot's fitted values); the MJCF's joint must hold the same
    damping: float | None = Field(default=None, ge=0)
    frictionloss: float | None = Field(default=None, ge=0)
    armature: float | None = Field(default=None, ge=0)


class Foot(_Strict):
    """A legged robot's foot: its site, its contact-force sensor and its position sensor."""

    name: str
    site: str
    contact_sensor: str
    position_sensor: str | None = None
    geom: str | None = None  # its collision geom: needed by physics.foot_friction, foot_solimp


class Contacts(_Strict):
    """Touch sensors on bodies other than the feet: contact there ends an episode or costs."""

    terminate: list[str] = []
    penalize: list[str] = []


class Uncertain(_Strict):
    """A physical parameter known only within a range: the MJCF holds `nominal`, training draws
    a value from `range` per episode (uniform)."""

    nominal: float
    range: tuple[float, float]

    @model_validator(mode="after")
    def _nominal_in_range(self) -> Uncertain:
        lo, hi = self.range
        if not lo <= hi:
            raise ValueError(f"range: low {lo:g} above high {hi:g}")
        if not lo <= self.nominal <= hi:
            raise ValueError(f"nominal {self.nominal:g} outside range [{lo:g}, {hi:g}]")
        return self


class UncertainVector(_Strict):
    """A vector parameter known only within a segment: the MJCF holds `nominal`, training draws
    one point t ~ U(0, 1) of the segment `range[0] + t (range[1] - range[0])` per episode (its
    components vary together: e.g. a contact from stiff to soft)."""

    nominal: list[float] = Field(min_length=1)
    range: tuple[list[float], list[float]]

    @model_validator(mode="after")
    def _nominal_in_box(self) -> UncertainVector:
        a, b = self.range
        if not len(a) == len(b) == len(self.nominal):
            raise ValueError(f"nominal and the range's ends need one length, not "
                             f"{len(self.nominal)}, {len(a)}, {len(b)}")
        for i, (x, lo, hi) in enumerate(zip(self.nominal, a, b, strict=True)):
            if not min(lo, hi) <= x <= max(lo, hi):
                raise ValueError(f"nominal[{i}] {x:g} outside the range's [{min(lo, hi):g}, "
                                 f"{max(lo, hi):g}]")
        return self


class Physics(_Strict):
    """Physical parameters a real robot differs in, each optional (any robot may carry them;
    a legged task randomizes those given). Joint ones apply to every joint in `joints`
    (a joint's own `damping` etc. overrides the nominal); foot ones to the feet's `geom`s and
    the ground they touch."""

    joint_damping: Uncertain | None = None  # N m s/rad (MuJoCo dof_damping)
    joint_frictionloss: Uncertain | None = None  # N m (dof_frictionloss)
    joint_armature: Uncertain | None = None  # kg m^2 (dof_armature: reflected rotor inertia)
    foot_friction: Uncertain | None = None  # sliding friction coefficient (geom_friction[0])
    foot_solimp: UncertainVector | None = None  # contact softness: solimp (dmin, dmax, width)

    @model_validator(mode="after")
    def _physical(self) -> Physics:
        for name in ("joint_damping", "joint_frictionloss", "joint_armature", "foot_friction"):
            p = getattr(self, name)
            if p is not None and p.range[0] < 0:
                raise ValueError(f"{name}.range: must not be negative")
        if self.foot_friction is not None and self.foot_friction.range[0] <= 0:
            raise ValueError("foot_friction.range: must be positive")
        s = self.foot_solimp
        if s is not None:
            if len(s.nominal) != 3:
                raise ValueError("foot_solimp: (dmin, dmax, width), 3 numbers")
            for end in (s.nominal, *s.range):
                if not (0 < end[0] < 1 and 0 < end[1] < 1 + 1e-12 and end[2] > 0):
                    raise ValueError(f"foot_solimp: {end}: needs 0 < dmin, dmax <= 1 and "
                                     "width > 0")
        return self


class DHRow(_Strict):
    """One modified (Craig) DH row: RotX(alpha) TransX(a) RotZ(theta + q) TransZ(d)."""

    a: float
    d: float
    alpha: float
    theta: float = 0.0


class Kinematics(_Strict):
    """A serial arm's forward kinematics from the base body's frame: one DH row per joint
    (joints[] order), the flange row, and the tool point in the flange frame, where the MJCF's
    `tool_site` is. The deploy runtime computes the tool pose from joint angles with it."""

    dh: list[DHRow] = Field(min_length=1)
    flange: DHRow
    tool_position: tuple[float, float, float] = (0.0, 0.0, 0.0)
    tool_quat: tuple[float, float, float, float] = (1.0, 0.0, 0.0, 0.0)  # w, x, y, z
    tool_site: str


class RobotSpec(_Strict):
    name: str
    kind: Literal["quadrotor", "legged", "arm"]
    mjcf: str
    base_body: str
    control: Control
    mass: float = Field(gt=0)
    sensors: dict[str, str]
    joints: list[Joint] = []
    rotors: list[Rotor] = []
    rotor_model: RotorModel | None = None
    action_scale: float | None = Field(default=None, gt=0, description="rad per action unit")
    feet: list[Foot] = []
    contacts: Contacts = Contacts()
    kinematics: Kinematics | None = None
    physics: Physics = Physics()

    def joint_nominal(self, i: int, field: str) -> float | None:
        """Joint i's nominal `damping`, `frictionloss` or `armature`: its own, else
        physics.joint_<field>'s, else None (the MJCF's, unchecked)."""
        own = getattr(self.joints[i], field)
        if own is not None:
            return own
        p = getattr(self.physics, f"joint_{field}")
        return None if p is None else p.nominal

    @model_validator(mode="after")
    def _actuated(self) -> RobotSpec:
        if self.kind == "quadrotor" and (not self.rotors or self.rotor_model is None):
            raise ValueError("a quadrotor needs 'rotors' and 'rotor_model'")
        if self.kind != "quadrotor" and not self.joints:
            raise ValueError(f"a robot of kind {self.kind!r} needs 'joints'")
        if self.kind == "legged":
            if not self.feet:
                raise ValueError("a legged robot needs 'feet'")
            if self.action_scale is None:
                raise ValueError("a legged robot needs 'action_scale'")
            for i, j in enumerate(self.joints):
                absent = [f for f in ("kp", "kd", "torque_limit", "position_sensor",
                                      "velocity_sensor") if getattr(j, f) is None]
                if absent:
                    raise ValueError(f"joints[{i}] ({j.name}): a legged robot's joint needs "
                                     f"{', '.join(absent)}")
        if self.physics.foot_friction is not None or self.physics.foot_solimp is not None:
            for i, f in enumerate(self.feet):
                if f.geom is None:
                    raise ValueError(f"feet[{i}] ({f.name}): physics.foot_friction and "
                                     "foot_solimp need each foot's 'geom'")
            if not self.feet:
                raise ValueError("physics.foot_friction and foot_solimp need 'feet'")
        if self.kind == "arm":
            if self.kinematics is None:
                raise ValueError("an arm needs 'kinematics'")
            if len(self.kinematics.dh) > len(self.joints):
                raise ValueError(f"kinematics.dh: {len(self.kinematics.dh)} rows for "
                                 f"{len(self.joints)} joints")
        return self


class Robot:
    """A loaded robot: its spec, its files and the hash the policy contract records."""

    def __init__(self, spec: RobotSpec, directory: Path):
        self.spec = spec
        self.directory = directory
        self.yaml_path = directory / "robot.yaml"
        self.mjcf_path = directory / spec.mjcf

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def actuator_names(self) -> list[str]:
        """Actuators in policy order: action i drives actuator i."""
        if self.spec.rotors:
            return [r.actuator for r in self.spec.rotors]
        return [j.actuator for j in self.spec.joints]

    @property
    def description_hash(self) -> str:
        """sha256 over robot.yaml and the MJCF, so a policy knows which robot it was trained on."""
        h = hashlib.sha256()
        for path in (self.yaml_path, self.mjcf_path):
            h.update(path.name.encode())
            h.update(path.read_bytes())
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"Robot({self.name!r}, {self.directory})"


def load_robot_dir(directory: str | Path) -> Robot:
    """Load and check `directory/robot.yaml` and the MJCF it names."""
    directory = Path(directory)
    yaml_path = directory / "robot.yaml"
    if not yaml_path.is_file():
        raise RobotError(f"{yaml_path}: no such file")
    spec = load_yaml_model(yaml_path, RobotSpec, RobotError)
    robot = Robot(spec, directory)
    _check_against_mjcf(robot)
    return robot


def _names(root: ET.Element, section: str) -> set[str]:
    return {el.get("name", "") for sec in root.iter(section) for el in sec if el.get("name")}


def _check_against_mjcf(robot: Robot) -> None:
    spec, path, ypath = robot.spec, robot.mjcf_path, robot.yaml_path
    if not path.is_file():
        raise RobotError(f"{ypath}: mjcf: file {spec.mjcf!r} not found in {robot.directory}")
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise RobotError(f"{path}: not well-formed XML: {exc}") from None
    actuators = _names(root, "actuator")
    sensors = _names(root, "sensor")
    bodies = {el.get("name") for el in root.iter("body")}
    joints = {el.get("name") for tag in ("joint", "freejoint") for el in root.iter(tag)}

    def missing(field: str, value: str, known: set, what: str) -> None:
        if value not in known:
            raise RobotError(
                f"{ypath}: {field}: {value!r} is not {what} in {path.name} "
                f"(known: {', '.join(sorted(k for k in known if k)) or 'none'})"
            )

    missing("base_body", spec.base_body, bodies, "a body")
    for i, rotor in enumerate(spec.rotors):
        missing(f"rotors[{i}].actuator", rotor.actuator, actuators, "an actuator")
    for i, joint in enumerate(spec.joints):
        missing(f"joints[{i}].name", joint.name, joints, "a joint")
        missing(f"joints[{i}].actuator", joint.actuator, actuators, "an actuator")
        for field in ("position_sensor", "velocity_sensor", "torque_sensor"):
            if getattr(joint, field) is not None:
                missing(f"joints[{i}].{field}", getattr(joint, field), sensors, "a sensor")
    for role, name in spec.sensors.items():
        missing(f"sensors.{role}", name, sensors, "a sensor")
    sites = {el.get("name") for el in root.iter("site")}
    geoms = {el.get("name") for el in root.iter("geom") if el.get("name")}
    for i, foot in enumerate(spec.feet):
        missing(f"feet[{i}].site", foot.site, sites, "a site")
        missing(f"feet[{i}].contact_sensor", foot.contact_sensor, sensors, "a sensor")
        if foot.position_sensor is not None:
            missing(f"feet[{i}].position_sensor", foot.position_sensor, sensors, "a sensor")
        if foot.geom is not None:
            missing(f"feet[{i}].geom", foot.geom, geoms, "a geom")
    for group in ("terminate", "penalize"):
        for i, name in enumerate(getattr(spec.contacts, group)):
            missing(f"contacts.{group}[{i}]", name, sensors, "a sensor")
    if spec.kinematics is not None:
        missing("kinematics.tool_site", spec.kinematics.tool_site, sites, "a site")
    option = root.find("option")
    timestep = float(option.get("timestep", 0.002)) if option is not None else 0.002
    if abs(timestep - spec.control.physics_dt) > 1e-12:
        raise RobotError(
            f"{ypath}: control.physics_dt: {spec.control.physics_dt} differs from the timestep "
            f"{timestep} in {path.name}"
        )
