"""HIL scenarios and fault plans: YAML validated into typed objects (unknown keys are errors).

A scenario says what the run does and what it must show:

    name: walk-forward
    duration_s: 14             # scenario time, from the robot's first command
    interface: native          # generic | native (both the robot and the node)
    realtime_priority: 20      # SCHED_FIFO for the robot's and node's loops (null: none)
    robot: {state_rate_hz: 100}        # the simulated robot (hil/robot.RobotSimConfig)
      # an arm-lift policy reads the object's pose: the robot publishes it as a camera-based
      # estimator would, robot: {object_pose: {rate_hz: 30, latency_s: [0.03, 0.06]}}
    node: {trigger: timer}             # the deploy node (deploy.node.NodeConfig)
    commands:                  # timed user commands, held until the next one
      - {at_s: 1.0, velocity: [0.5, 0.0, 0.0]}   # cmd_vel: forward, lateral m/s, yaw rate
      - {at_s: 0.0, position: [0.0, 0.0, 1.0]}   # target_position setpoint (m, world)
      - {at_s: 0.0, pose: [0.5, 0.0, 0.3, 0, 1, 0, 0]}  # an arm's target_pose: m, (w, x, y, z)
      - {at_s: 0.0, lift_height: 0.2}            # an arm-lift policy's /lift_height, m
      - {at_s: 2.0, figure_eight: {center: [0, 0, 1], size: [1.0, 0.5], period_s: 5}}
        # a moving reference (/reference, nav_msgs/Odometry, every harness tick ~100 Hz)
      - {at_s: 9.0, estop: true}                 # /simreal/estop; estop_reset: true resets
    pushes:                    # on the simulated robot's base, world frame
      - {at_s: 8.0, velocity: [0.3, 0.0, 0.0]}   # a change of velocity, m/s
      - {at_s: 9.0, force: [0, 5, 0], duration_s: 0.2}  # N
    expect:                    # what the report checks, beside its standing checks
      hover: {from_s: 6, to_s: 10, max_error_m: 0.1}
      velocity: {from_s: 3, to_s: 13, max_mean_error: 0.15}
      reach: {from_s: 3, to_s: 4, max_position_error_m: 0.01, max_angle_deg: 5}  # an arm's tool
      track: {from_s: 7, to_s: 12, max_mean_error_m: 0.1}  # to the moving reference
      lift: {from_s: 6, to_s: 8, max_height_error_m: 0.03}  # the object at the commanded height
      # standing checks, with their defaults (activity: null for a robot meant to stay still)
      activity: {left_soft_start: true, lift_off: true, min_travel_m: null}
      commands: {max_nonfinite: 0, min_received_fraction: 0.5}

A fault plan says what goes wrong, seeded:

    seed: 7
    faults:
      - {kind: drop, rate: 0.3, direction: state}          # direction: state|command|both
      - {kind: delay, delay_s: 0.02, jitter_s: 0.005}      # uniform jitter, order kept
      - {kind: reorder, probability: 0.1, hold_s: 0.02}    # held back, overtaken
      - {kind: duplicate, probability: 0.05}
      - {kind: sensor_bias, signal: angular_velocity, value: [0.05, 0, 0]}
      - {kind: sensor_noise, signal: joint_vel, std: 0.5}
      - {kind: sensor_freeze, signal: joint_pos, from_s: 4, to_s: 4.2}
      - {kind: nan_burst, signal: joint_pos, from_s: 4, to_s: 4.1}
      - {kind: clock_jump, at_s: 3, jump_s: 10}            # the robot's stamps jump
      - {kind: node_crash, at_s: 6, restart_after_s: 1.0}  # SIGKILL; null: no restart
      - {kind: robot_restart, at_s: 6, downtime_s: 0.5, resume: initial}  # or snapshot

Link and sensor faults act in a window `from_s`..`to_s` (default: the whole run); `topics`
narrows a link fault to some ROS topic names. Errors name the file and the field; NaN and
infinities are refused (the strict config base), and `simreal hil` refuses a command outside
the range the policy was trained on (hil/harness.py `prepare`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from simreal.core.config import ConfigError, FrozenModel, load_yaml_model, validate_model
from simreal.core.trajectories import figure_eight
from simreal.deploy.node import NodeConfig
from simreal.hil.perception import ObjectPoseConfig
from simreal.hil.robot import RobotSimConfig


class HilConfigError(ConfigError):
    """A scenario or fault plan that cannot be used; the message names the file and field."""


_Strict = FrozenModel


Vec3 = tuple[float, float, float]
Pose = tuple[float, float, float, float, float, float, float]


# --- scenario ---------------------------------------------------------------------------------
class FigureEight(_Strict):
    """A figure-eight reference (core/trajectories.py): `size` m wide (x) and tall (y) about
    `center`, one lap per `period_s`, starting `phase_deg` into the lap."""

    center: Vec3 = (0.0, 0.0, 1.0)
    size: tuple[float, float] = (1.0, 0.5)
    period_s: float = Field(default=5.0, gt=0)
    phase_deg: float = 0.0

    def at(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position, velocity), (len(t), 3) each, `t` s after the command."""
        offset, velocity = figure_eight(np.asarray(t, dtype=np.float64), self.size[0],
                                        self.size[1], 2 * np.pi / self.period_s,
                                        np.radians(self.phase_deg), 0.0)
        return np.asarray(self.center) + offset, velocity


COMMAND_KINDS = ("velocity", "position", "pose", "lift_height", "figure_eight", "estop",
                 "estop_reset")


class Command(_Strict):
    at_s: float = Field(ge=0)
    velocity: Vec3 | None = Field(default=None, description="cmd_vel: vx, vy m/s, yaw rate")
    position: Vec3 | None = Field(default=None, description="target_position, m (world)")
    pose: Pose | None = Field(default=None, description="an arm's target_pose: x, y, z (m, "
                              "base frame), then the tool's quaternion w, x, y, z")
    figure_eight: FigureEight | None = Field(
        default=None, description="a moving reference for a tracking policy: target_position "
        "and target_velocity on /reference")
    lift_height: float | None = Field(default=None, description="an arm-lift policy's "
                                      "/lift_height: the object's centre above the table, m")
    estop: bool | None = None
    estop_reset: bool | None = None

    @model_validator(mode="after")
    def _one(self) -> Command:
        given = [k for k in COMMAND_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(COMMAND_KINDS)} (got "
                             f"{given or 'none'})")
        if self.pose is not None and abs(sum(x * x for x in self.pose[3:]) - 1.0) > 1e-3:
            raise ValueError(f"pose: quaternion {list(self.pose[3:])} is not unit length")
        return self


class Push(_Strict):
    at_s: float = Field(ge=0)
    velocity: Vec3 | None = Field(default=None, description="change of base velocity, m/s")
    force: Vec3 | None = Field(default=None, description="N, world frame")
    duration_s: float = Field(default=0.1, gt=0)

    @model_validator(mode="after")
    def _one(self) -> Push:
        if (self.velocity is None) == (self.force is None):
            raise ValueError("give exactly one of velocity, force")
        return self


class Window(_Strict):
    from_s: float = Field(ge=0)
    to_s: float

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.to_s <= self.from_s:
            raise ValueError(f"to_s {self.to_s} must be after from_s {self.from_s}")
        return self


class HoverCheck(Window):
    max_error_m: float = Field(gt=0)


class VelocityCheck(Window):
    max_mean_error: float = Field(gt=0, description="m/s, mean |command - base velocity| (xy)")


class ReachCheck(Window):
    max_position_error_m: float = Field(gt=0, description="tool to the commanded pose")
    max_angle_deg: float = Field(gt=0)


class TrackCheck(Window):
    max_mean_error_m: float = Field(gt=0, description="mean distance to the reference")
    max_error_m: float | None = Field(default=None, gt=0, description="largest distance")


class LiftCheck(Window):
    max_height_error_m: float = Field(gt=0, description="the object's centre (ground truth) "
                                      "to the commanded height, at every sample")


class ActivityCheck(_Strict):
    """The robot did something: the checks `left_soft_start` and `moved`. A scenario in which
    the robot is meant to stay still (an e-stop from the start) gives `activity: null`."""

    left_soft_start: bool = Field(
        default=True, description="a node process reached RUN: the policy's own commands "
        "drove the robot after the soft start (a policy whose commands are all non-finite "
        "never gets there)")
    lift_off: bool = Field(
        default=True, description="a quadrotor left its pad: the simulated robot's rotor "
        "thrust exceeded its weight (against a real robot: the node commanded such thrust); "
        "other robots: not used")
    min_travel_m: float | None = Field(
        default=None, ge=0, description="the base (an arm's tool) got at least this far from "
        "where it started, at some point (ground truth); default 0.01 m for an arm, not "
        "checked for other robots")


class CommandsCheck(_Strict):
    """What the node sent: the checks `finite_commands` and `commands_received`."""

    max_nonfinite: int = Field(
        default=0, ge=0, description="non-finite command vectors allowed: the policy's outputs "
        "while the state was finite (the node's count; it holds the last safe command "
        "instead), and commands on the wire (PX4's all-NaN \"stop\" excepted)")
    min_received_fraction: float = Field(
        default=0.5, ge=0, le=1, description="commands the robot received over those due: the "
        "control rate times the time a node and a robot were both up in the scenario (30% "
        "loss both ways measured 0.68-0.72)")


class Expect(_Strict):
    hover: HoverCheck | None = None
    velocity: VelocityCheck | None = None
    reach: ReachCheck | None = None
    track: TrackCheck | None = None
    lift: LiftCheck | None = None
    activity: ActivityCheck | None = ActivityCheck()
    commands: CommandsCheck = CommandsCheck()


class Scenario(_Strict):
    name: str = "scenario"
    duration_s: float = Field(gt=0)
    interface: Literal["generic", "native"] = "generic"
    realtime_priority: int | None = Field(
        default=20, ge=1, le=99, description="SCHED_FIFO priority of the robot's and the "
        "node's loops, as on a robot computer (a warning where the OS refuses); null: none")
    robot: RobotSimConfig = RobotSimConfig()
    node: dict[str, Any] = Field(default_factory=dict, description="deploy NodeConfig")
    commands: list[Command] = []
    pushes: list[Push] = []
    expect: Expect = Expect()

    @field_validator("node")
    @classmethod
    def _node(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "interface" in value:
            raise ValueError("give interface at the top level of the scenario (it sets both "
                             "the robot and the node)")
        try:
            NodeConfig.model_validate(value)
        except ValidationError as exc:
            raise ValueError("; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                                       for e in exc.errors())) from None
        return value

    @model_validator(mode="after")
    def _times(self) -> Scenario:
        late = [f"{what}[{i}].at_s" for what, items in (("commands", self.commands),
                                                         ("pushes", self.pushes))
                for i, c in enumerate(items) if c.at_s > self.duration_s]
        if late:
            raise ValueError(f"{', '.join(late)} after duration_s {self.duration_s}")
        return self

    def node_config(self) -> NodeConfig:
        node = {"fifo_priority": self.realtime_priority, **self.node}
        return NodeConfig.model_validate({**node, "interface": self.interface})


def default_scenario(kind: str, target: Vec3 = (0.0, 0.0, 1.0),
                     control_rate_hz: float = 100.0, pose: Pose | None = None,
                     track: bool = False, lift_height: float | None = None) -> Scenario:
    """What `simreal hil` runs without --scenario: a hover at the trained target (with
    `track`, a tracking policy: then a figure-eight about it), a walk forward at 0.5 m/s, an
    arm's reach to `pose` and held there, or (with `lift_height`) a lift of the object."""
    if kind == "arm" and lift_height is not None:
        return lift_scenario(lift_height, control_rate_hz)
    if kind == "arm":
        if pose is None:
            raise ValueError("an arm's default scenario needs a target pose")
        # lock-step as the hover; the node's soft start takes the first 2 s
        return Scenario(name="reach", duration_s=5.0,
                        robot=RobotSimConfig(state_rate_hz=control_rate_hz),
                        node={"trigger": "state"},
                        commands=[Command(at_s=0.0, pose=pose)],
                        expect=Expect(reach=ReachCheck(from_s=3.5, to_s=5.0,
                                                       max_position_error_m=0.01,
                                                       max_angle_deg=5.0)))
    if kind == "quadrotor" and track:
        return track_scenario(target, control_rate_hz)
    if kind == "quadrotor":
        # lock-step: the node computes on each odometry message, as a PX4 offboard controller
        # usually does (the hover policy was trained without command latency; at a fixed rate
        # the state waits for the next period, about one more period of delay)
        return Scenario(name="hover", duration_s=10.0,
                        robot=RobotSimConfig(state_rate_hz=control_rate_hz),
                        node={"trigger": "state"},
                        commands=[Command(at_s=0.0, position=target)],
                        expect=Expect(hover=HoverCheck(from_s=6.0, to_s=10.0,
                                                       max_error_m=0.1)))
    return Scenario(name="walk", duration_s=14.0,
                    commands=[Command(at_s=0.0, velocity=(0.0, 0.0, 0.0)),
                              Command(at_s=1.0, velocity=(0.5, 0.0, 0.0))],
                    expect=Expect(velocity=VelocityCheck(from_s=4.0, to_s=14.0,
                                                         max_mean_error=0.15)))


def lift_scenario(height: float, control_rate_hz: float) -> Scenario:
    """Grasp the cube from the table and hold it at `height`: lock-step, the cube's pose from
    the perception stand-in at 30 Hz with 30-60 ms of latency. The node's soft start takes the
    first 2 s; the lift task's episodes last 5 s, so the hold is checked over 6-8 s."""
    return Scenario(name="lift", duration_s=8.0,
                    robot=RobotSimConfig(state_rate_hz=control_rate_hz,
                                         object_pose=ObjectPoseConfig()),
                    node={"trigger": "state"},
                    commands=[Command(at_s=0.0, lift_height=height)],
                    expect=Expect(lift=LiftCheck(from_s=6.0, to_s=8.0,
                                                 max_height_error_m=0.03)))


def track_scenario(center: Vec3, control_rate_hz: float) -> Scenario:
    """Take off from a pad 0.5 m below `center` to hover there, then fly the evaluation's
    figure-eight (1 m x 0.5 m, 5 s a lap) from 4 s; the second lap is checked."""
    pad = (center[0], center[1], center[2] - 0.5)
    return Scenario(name="track", duration_s=14.0,
                    robot=RobotSimConfig(state_rate_hz=control_rate_hz, initial_position=pad),
                    node={"trigger": "state"},
                    commands=[Command(at_s=0.0, position=center),
                              Command(at_s=4.0, figure_eight=FigureEight(center=center))],
                    expect=Expect(track=TrackCheck(from_s=9.0, to_s=14.0,
                                                   max_mean_error_m=0.1)))


# --- faults -----------------------------------------------------------------------------------
class _Timed(_Strict):
    from_s: float = Field(default=0.0, ge=0)
    to_s: float | None = None

    @model_validator(mode="after")
    def _ordered(self) -> _Timed:
        if self.to_s is not None and self.to_s <= self.from_s:
            raise ValueError(f"to_s {self.to_s} must be after from_s {self.from_s}")
        return self

    def active(self, t: float) -> bool:
        return t >= self.from_s and (self.to_s is None or t < self.to_s)


class _LinkFault(_Timed):
    direction: Literal["state", "command", "both"] = "both"
    topics: list[str] | None = Field(default=None, description="ROS topic names (default all)")

    def applies(self, direction: str, topic: str, t: float) -> bool:
        return (self.direction in (direction, "both") and self.active(t) and
                (self.topics is None or topic in self.topics))


class Drop(_LinkFault):
    kind: Literal["drop"]
    rate: float = Field(ge=0, le=1)


class Delay(_LinkFault):
    kind: Literal["delay"]
    delay_s: float = Field(ge=0)
    jitter_s: float = Field(default=0.0, ge=0, description="uniform in +-jitter_s")


class Reorder(_LinkFault):
    kind: Literal["reorder"]
    probability: float = Field(ge=0, le=1)
    hold_s: float = Field(default=0.02, gt=0, description="extra delay of a held message")


class Duplicate(_LinkFault):
    kind: Literal["duplicate"]
    probability: float = Field(ge=0, le=1)


class _SensorFault(_Timed):
    signal: str
    index: list[int] | None = Field(default=None, description="components (default all)")


class SensorBias(_SensorFault):
    kind: Literal["sensor_bias"]
    value: list[float] = Field(min_length=1, description="one value, or one per component")


class SensorNoise(_SensorFault):
    kind: Literal["sensor_noise"]
    std: float = Field(gt=0)


class SensorFreeze(_SensorFault):
    kind: Literal["sensor_freeze"]


class NanBurst(_SensorFault):
    kind: Literal["nan_burst"]


class ClockJump(_Strict):
    kind: Literal["clock_jump"]
    at_s: float = Field(ge=0)
    jump_s: float


class NodeCrash(_Strict):
    kind: Literal["node_crash"]
    at_s: float = Field(ge=0)
    restart_after_s: float | None = Field(default=None, gt=0)


class RobotRestart(_Strict):
    kind: Literal["robot_restart"]
    at_s: float = Field(ge=0)
    downtime_s: float = Field(default=0.5, ge=0)
    resume: Literal["initial", "snapshot"] = "initial"


Fault = Annotated[Drop | Delay | Reorder | Duplicate | SensorBias | SensorNoise | SensorFreeze
                  | NanBurst | ClockJump | NodeCrash | RobotRestart,
                  Field(discriminator="kind")]
LINK_FAULTS = (Drop, Delay, Reorder, Duplicate)
SENSOR_FAULTS = (SensorBias, SensorNoise, SensorFreeze, NanBurst)


class FaultPlan(_Strict):
    seed: int = 0
    faults: list[Fault] = []

    def of(self, *kinds: type) -> list[Any]:
        return [f for f in self.faults if isinstance(f, kinds)]


# --- loading ------------------------------------------------------------------------------------
# the union member pydantic names in a fault's error path: the fault's kind, already clear
FAULT_KINDS = frozenset({"drop", "delay", "reorder", "duplicate", "sensor_bias", "sensor_noise",
                         "sensor_freeze", "nan_burst", "clock_jump", "node_crash",
                         "robot_restart"})


def _load(path: str | Path, model: type[BaseModel]) -> Any:
    return load_yaml_model(path, model, HilConfigError, tags=FAULT_KINDS)


def validate(raw: dict[str, Any], model: type[BaseModel], where: str) -> Any:
    return validate_model(raw, model, where, HilConfigError, tags=FAULT_KINDS)


def load_scenario(path: str | Path) -> Scenario:
    scenario = _load(path, Scenario)
    if scenario.name == "scenario":
        scenario = scenario.model_copy(update={"name": Path(path).stem})
    return scenario


def load_faults(path: str | Path) -> FaultPlan:
    return _load(path, FaultPlan)


def reference_at(scenario: Scenario, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The moving reference's (position, velocity) in force at each scenario time (NaN before
    the first one, and where a position command replaced it)."""
    pos, vel = np.full((len(t), 3), np.nan), np.full((len(t), 3), np.nan)
    for c in sorted(scenario.commands, key=lambda c: c.at_s):
        if c.position is not None:
            later = t >= c.at_s
            pos[later], vel[later] = np.nan, np.nan
        elif c.figure_eight is not None:
            later = t >= c.at_s
            pos[later], vel[later] = c.figure_eight.at(t[later] - c.at_s)
    return pos, vel


def command_at(scenario: Scenario, what: str, t: np.ndarray) -> np.ndarray:
    """The scenario's command (velocity, position, pose or lift_height: a column) in force at
    each scenario time."""
    cmds = sorted(((c.at_s, np.atleast_1d(getattr(c, what))) for c in scenario.commands
                   if getattr(c, what) is not None), key=lambda x: x[0])
    out = np.full((len(t), len(cmds[0][1]) if cmds else 3), np.nan)
    for at, v in cmds:
        out[t >= at] = v
    return out
