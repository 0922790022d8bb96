"""The policy contract: everything a runtime must know to feed a policy and use its output.

The trainer writes it into the ONNX file's metadata (key `simreal.contract`, JSON); the deploy
runtime reads it back and refuses to run a policy whose contract disagrees with the robot.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from simreal.core.config import FrozenModel, describe
from simreal.robots import Robot

CONTRACT_KEY = "simreal.contract"
CONTRACT_FORMAT = "simreal.policy_contract/1"


class ContractError(ValueError):
    """A contract that is malformed or disagrees with the robot; the message names each field."""


_Strict = FrozenModel  # unknown keys and non-finite numbers (a NaN offset) are refused


class LegChain(_Strict):
    """One leg for leg odometry (robots/legs.py): its hinge joints from the base down (columns
    in policy order; origin in the parent's frame, m; unit axis; frames parallel to the base's
    at zero angles) and its foot sphere (centre in the last joint's frame, m; radius, m)."""

    joints: list[int] = Field(min_length=1)
    origins: list[tuple[float, float, float]]
    axes: list[tuple[float, float, float]]
    foot: tuple[float, float, float]
    radius: float = Field(ge=0)

    @model_validator(mode="after")
    def _one_per_joint(self) -> LegChain:
        if not len(self.joints) == len(self.origins) == len(self.axes):
            raise ValueError(f"a leg needs one origin and one axis per joint: {len(self.joints)}"
                             f" joints, {len(self.origins)} origins, {len(self.axes)} axes")
        return self


class LegModel(_Strict):
    """The legs a leg-odometry term computes with, and how it judges which feet stand: by load
    (`stance_torque`, N m: each leg weighted softmax(sum of its joints' |torque| / this)), by
    height (`stance_sigma`, m: a foot that much above the lowest counts e^-1 as much), or by
    both (the two exponents add)."""

    chains: list[LegChain] = Field(min_length=1)
    stance_torque: float | None = Field(default=None, gt=0)
    stance_sigma: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_stance_rule(self) -> LegModel:
        if self.stance_torque is None and self.stance_sigma is None:
            raise ValueError("give stance_torque, stance_sigma or both")
        return self


class ObsTerm(_Strict):
    name: str
    dim: int = Field(gt=0)
    scale: float = 1.0
    clip: float = Field(default=100.0, gt=0)
    history: int = Field(default=1, ge=1)
    # if set, the policy sees the term's leaky integral instead of the term: each control
    # period I <- I * exp(-dt / tau) + dt * scale * value, clipped to +-clip, zero at reset
    # (integral action: a steady offset, e.g. from wind or a heavier battery, accumulates)
    integral_time_constant_s: float | None = Field(default=None, gt=0)
    # the legs of a leg-odometry term (leg_odometry_velocity), from the training simulator's
    # model: the deploy runtime computes the term with them, without the MJCF
    legs: LegModel | None = None


class ActionSpec(_Strict):
    """command = offset + scale * clip(action, -clip, clip), per actuator in policy order.

    kind says what the command is: `rotor_speed` is the fraction of maximum rotor speed
    (0..1), `joint_position` a joint position target in rad tracked by PD with kp, kd.
    """

    kind: Literal["rotor_speed", "joint_position"]
    scale: list[float]
    offset: list[float]
    clip: float = Field(gt=0)
    kp: list[float] | None = None
    kd: list[float] | None = None


class CommandRange(_Strict):
    low: list[float]
    high: list[float]


AXES = ("vx", "vy", "wz")  # the velocity command's components, in order


class CommandFeedback(_Strict):
    """The runtime's integral trim of the velocity command (deploy/feedback.py): per axis in
    `axes`, the command the policy sees moves by `gain` (1/s) times the error between the
    user's command and the measured velocity (low-passed over `filter_s`), by at most `limit`
    (m/s, forward and lateral) or `yaw_limit` (rad/s). The yaw rate is measured by the gyro;
    forward and lateral speed by leg odometry with `legs`."""

    axes: list[Literal["vx", "vy", "wz"]] = Field(min_length=1)
    gain: float = Field(gt=0)
    filter_s: float = Field(default=0.3, gt=0)
    limit: float = Field(default=0.25, gt=0)
    yaw_limit: float = Field(default=0.5, gt=0)
    legs: LegModel | None = None

    @model_validator(mode="after")
    def _legs_for_speed(self) -> CommandFeedback:
        if len(set(self.axes)) != len(self.axes):
            raise ValueError(f"axes {self.axes}: each at most once")
        if {"vx", "vy"} & set(self.axes) and self.legs is None:
            raise ValueError(f"axes {self.axes}: forward and lateral speed are measured by leg "
                             "odometry, which needs `legs` (a leg model)")
        return self

    def reads(self) -> tuple[str, ...]:
        """The robot signals the loop needs. Joint torques are not among them: a state without
        them (a JointState whose effort is empty) leaves the speed trim where it is and the
        yaw trim working (deploy/feedback.py)."""
        if self.legs is None or not {"vx", "vy"} & set(self.axes):
            return ("angular_velocity",)
        return ("angular_velocity", "orientation", "joint_pos", "joint_vel")


class PolicyContract(_Strict):
    format: Literal["simreal.policy_contract/1"] = CONTRACT_FORMAT
    task: str
    robot: str
    robot_hash: str
    control_rate_hz: float = Field(gt=0)
    actuators: list[str]
    observations: list[ObsTerm]
    action: ActionSpec
    commands: dict[str, CommandRange] = {}
    # a slow loop the runtime closes on the velocity command (deploy/feedback.py); None: none
    command_feedback: CommandFeedback | None = None
    input_name: str = "obs"
    output_name: str = "action"

    @model_validator(mode="after")
    def _feedback_on_velocity(self) -> PolicyContract:
        fb = self.command_feedback
        if fb is not None and len(self.commands.get("velocity_command", CommandRange(
                low=[], high=[])).low) != 3:
            raise ValueError("command_feedback trims a 3-component velocity_command, which "
                             f"this policy does not take (commands: {sorted(self.commands)})")
        return self

    @property
    def obs_dim(self) -> int:
        return sum(t.dim * t.history for t in self.observations)

    @property
    def action_dim(self) -> int:
        return len(self.actuators)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str, source: str = "contract") -> PolicyContract:
        try:
            return cls.model_validate(json.loads(text))
        except json.JSONDecodeError as exc:
            raise ContractError(f"{source}: malformed policy contract: {exc}") from None
        except ValidationError as exc:
            raise ContractError(describe(exc, f"{source}: malformed policy contract")
                                ) from None

    def mismatches(self, robot: Robot) -> list[str]:
        """Every way this contract disagrees with the robot's description, one line each."""
        out = []
        if self.robot != robot.name:
            out.append(f"robot: policy was trained for {self.robot!r}, this is {robot.name!r}")
        if self.actuators != robot.actuator_names:
            out.append(
                f"actuators: policy order {self.actuators} differs from robot.yaml order "
                f"{robot.actuator_names}"
            )
        rate = robot.spec.control.rate_hz
        if abs(self.control_rate_hz - rate) > 1e-9:
            out.append(f"control_rate_hz: policy runs at {self.control_rate_hz} Hz, robot.yaml "
                       f"says {rate} Hz")
        if self.robot_hash != robot.description_hash:
            out.append(
                f"robot_hash: policy was trained on description {self.robot_hash[:12]}, "
                f"{robot.yaml_path.parent} is {robot.description_hash[:12]}"
            )
        for field in ("scale", "offset"):
            if len(getattr(self.action, field)) != self.action_dim:
                out.append(f"action.{field}: {len(getattr(self.action, field))} values for "
                           f"{self.action_dim} actuators")
        return out

    def check(self, robot: Robot) -> None:
        problems = self.mismatches(robot)
        if problems:
            raise ContractError("policy contract does not match the robot:\n  " +
                                "\n  ".join(problems))
