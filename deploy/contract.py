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
    (`stance_torque`, N m: each leg weighted softmax(sum of its joints' |torque| / this)) or
    by height (`stance_sigma`, m: a foot that much above the lowest counts e^-1 as much)."""

    chains: list[LegChain] = Field(min_length=1)
    stance_torque: float | None = Field(default=None, gt=0)
    stance_sigma: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_stance_rule(self) -> LegModel:
        if (self.stance_torque is None) == (self.stance_sigma is None):
            raise ValueError("give one of stance_torque and stance_sigma")
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
    input_name: str = "obs"
    output_name: str = "action"

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
