"""The policy runner: contract-checked policy, observation builder and action mapper in one.

`act(signals)` is what one control period does on a robot and in `simreal eval`: build the
observation from named signals, infer, clip, map to actuator commands. It keeps the last
action itself (the `last_action` term), per row of a batch, and the contract's command
feedback (deploy/feedback.py), which trims the velocity command the policy sees.
"""

from __future__ import annotations

import numpy as np

from simreal.deploy.actions import ActionMapper
from simreal.deploy.feedback import FeedbackLoop
from simreal.deploy.observation import ObservationBuilder
from simreal.deploy.policy import OnnxPolicy
from simreal.deploy.terms import Signals
from simreal.robots import Robot


class PolicyRunner:
    def __init__(self, policy: OnnxPolicy, robot: Robot, batch: int = 1):
        policy.contract.check(robot)  # refuses with every mismatch named
        self.policy, self.robot = policy, robot
        self.contract = policy.contract
        self.builder = ObservationBuilder(self.contract.observations, self.contract.action_dim,
                                          dt=1.0 / self.contract.control_rate_hz)
        self.mapper = ActionMapper(self.contract.action)
        self.last_action = np.zeros((batch, self.contract.action_dim), dtype=np.float32)
        fb = self.contract.command_feedback
        self.feedback = (FeedbackLoop(fb, self.contract.commands["velocity_command"],
                                      1.0 / self.contract.control_rate_hz, batch)
                         if fb is not None else None)
        self.last_obs: np.ndarray | None = None  # what `warm()` re-infers

    def act(self, signals: Signals) -> tuple[np.ndarray, np.ndarray]:
        """(clipped policy action, actuator command) for this period's signals."""
        if self.feedback is not None:
            signals = {**signals, "velocity_command": self.feedback(
                signals["velocity_command"], signals)}
        obs = self.builder.build({**signals, "last_action": self.last_action})
        self.last_obs = obs
        action = self.mapper.clip(self.policy(obs))
        self.last_action = action
        return action, self.mapper.from_clipped(action)

    def warm(self) -> None:
        """Infer on the last observation and drop the result: no state changes; keeps the
        inference path in the CPU's caches (deploy/node.py `warm`)."""
        if self.last_obs is not None:
            self.policy(self.last_obs)

    def reset(self, mask: np.ndarray | None = None) -> None:
        """Start over (rows in `mask`, or all): no history, no last action."""
        self.builder.reset(mask)
        if self.feedback is not None:
            self.feedback.reset(mask)
        if mask is None:
            self.last_action[:] = 0.0
        else:
            self.last_action[mask] = 0.0
