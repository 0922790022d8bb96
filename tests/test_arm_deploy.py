"""The arm on the deploy side: message types on the ROS 2 wire, the node driving a Panda policy
through joint states, pose inputs, forward-position or trajectory commands (in-process bus)."""

from pathlib import Path

import numpy as np
import pytest
import torch

from simreal.api import make_env
from simreal.deploy import messages as m
from simreal.deploy.arm import ArmGeneric, pose_stamped
from simreal.deploy.node import DeployError, DeployNode, NodeConfig
from simreal.deploy.policy import OnnxPolicy
from simreal.deploy.runner import PolicyRunner
from simreal.deploy.transport import LocalBus
from tests.test_messages import STORE, to_rosbags
from tests.test_node_fixtures import export_policy

QUIET = {"randomization": {"enabled": False}, "joint_noise": 0.0,
         "noise": {"joint_pos": 0.0, "joint_vel": 0.0}}
DOWN = np.array([0.0, 1.0, 0.0, 0.0])


@pytest.mark.parametrize("msg", [
    m.JointTrajectory(m.Header(m.Time(12, 345), "base"), ["panda_joint1", "panda_joint2"],
                      [m.JointTrajectoryPoint([0.1, -0.7], [0.0, 0.5], [], [],
                                              m.Duration(0, 20_000_000)),
                       m.JointTrajectoryPoint([0.2, -0.6], [], [], [1.0, 2.0],
                                              m.Duration(1, 5))]),
    m.PoseStamped(m.Header(m.Time(1, 2), "panda_link0"),
                  m.Pose(m.Point(0.4, -0.1, 0.3), m.Quaternion(1.0, 0.0, 0.0, 0.0))),
    m.Float64(0.25),
], ids=lambda x: type(x).__name__)
def test_arm_messages_are_byte_equal_to_rosbags_both_ways(msg):
    ours = msg.serialize()
    theirs = bytes(STORE.serialize_cdr(to_rosbags(msg), m.ROS_TYPES[type(msg)]))
    assert ours == theirs
    assert type(msg).deserialize(theirs) == msg


class Rig:
    """A node on an in-process bus, the robot's side of the arm interface, and the simulator
    whose state the robot side publishes."""

    def __init__(self, task: str, tmp_path: Path, **cfg):
        self.env = make_env(task, num_envs=1, seed=0, config=QUIET)
        self.env.reset()
        contract = self.env.contract()
        path = export_policy(contract, tmp_path / f"{task}.onnx", hidden=(16,))
        self.policy = OnnxPolicy(path)
        self.seen: list[np.ndarray] = []  # the observations the node fed the policy
        infer = self.policy

        def recording(obs: np.ndarray) -> np.ndarray:
            self.seen.append(obs.copy())
            return infer(obs)

        runner = PolicyRunner(self.policy, self.env.robot)
        runner.policy = recording  # type: ignore[assignment]
        self.bus = LocalBus()
        self.t = 0.0
        self.node = DeployNode(runner, self.bus, NodeConfig(**cfg), clock=lambda: self.t)
        self.side = self.node.interface  # the same topics, used from the robot's side
        topics = self.node.topics
        self.state = {s.key: self.bus.publisher(topics[s.key], s.type, s.qos)
                      for s in self.side.state_topics}
        self.commands = {s.key: self.bus.subscription(topics[s.key], s.type, s.qos)
                         for s in self.side.command_topics}

    def robot_signals(self) -> dict[str, np.ndarray]:
        s = self.env.signals()
        return {k: v[0].numpy().astype(np.float64) for k, v in s.items()
                if k in ("joint_pos", "joint_vel", "object_position", "object_orientation")}

    def step(self, publish: bool = True):
        if publish:
            for key, msg in self.side.state_messages(self.robot_signals()):
                self.state[key].write(msg)
        self.node.cycle()
        self.t += 1.0 / self.node.rate_hz
        key = self.side.command_topics[0].key
        got = self.commands[key].take()
        return (got[-1], self.side.command_of(key, got[-1])) if got else None


def test_reach_node_sees_what_the_simulator_gives_the_actor_and_commands_8_joints(tmp_path):
    rig = Rig("arm-reach", tmp_path)
    assert isinstance(rig.side, ArmGeneric)
    assert [s.key for s in rig.side.state_topics] == ["joint_states"]  # no IMU, no object
    env = rig.env
    target_pub = rig.bus.publisher(rig.node.topics["target_pose"], m.PoseStamped)
    target_pub.write(pose_stamped(env.target_pos[0].numpy(), env.target_quat[0].numpy()))
    out = rig.step()
    assert out is not None
    msg, command = out
    assert isinstance(msg, m.Float64MultiArray) and command["q"].shape == (8,)
    expect = env.obs_builder.build(env.noisy_signals())[0].numpy()  # noise-free config
    np.testing.assert_allclose(rig.seen[-1][0], expect, atol=1e-5)
    # soft start: the first command is one period's move at most from the measured pose
    step = np.array([j.velocity_limit for j in env.robot.spec.joints]) / 50
    assert (np.abs(command["q"] - rig.robot_signals()["joint_pos"]) <= step + 1e-9).all()


def test_trajectory_commands_name_the_joints_and_last_one_period(tmp_path):
    rig = Rig("arm-reach", tmp_path, arm_command="joint_trajectory")
    msg, command = rig.step()
    assert isinstance(msg, m.JointTrajectory)
    assert msg.joint_names == [j.name for j in rig.env.robot.spec.joints]
    assert len(msg.points) == 1 and msg.points[0].time_from_start == m.Duration(0, 20_000_000)
    step = np.array([j.velocity_limit for j in rig.env.robot.spec.joints]) / 50
    assert (np.abs(command["q"] - rig.robot_signals()["joint_pos"]) <= step + 1e-9).all()


def test_target_pose_is_clamped_to_the_trained_range_on_the_near_side(tmp_path):
    rig = Rig("arm-reach", tmp_path)
    pub = rig.bus.publisher(rig.node.topics["target_pose"], m.PoseStamped)
    pub.write(pose_stamped(np.array([2.0, 0.0, 0.4]), -DOWN))  # too far; the other sign
    rig.step()
    inputs = rig.node.inputs
    low, high = rig.env.cfg.target.x
    assert inputs["target_position"].current(rig.t)[0] == pytest.approx(high)
    np.testing.assert_allclose(inputs["target_orientation"].current(rig.t), DOWN)


def test_lift_policy_waits_for_the_object_pose(tmp_path):
    rig = Rig("arm-lift", tmp_path)
    assert [s.key for s in rig.side.state_topics] == ["joint_states", "object_pose"]
    joints = rig.side.state_messages(rig.robot_signals())[-1][1]
    rig.state["joint_states"].write(joints)
    assert rig.step(publish=False) is None  # no object estimate yet: nothing sent
    out = rig.step()
    assert out is not None
    signals = rig.node.signals
    np.testing.assert_allclose(signals["object_position"],
                               rig.env.signals()["object_position"][0].numpy(), atol=1e-6)
    height = rig.bus.publisher(rig.node.topics["lift_height"], m.Float64)
    height.write(m.Float64(0.9))
    rig.step()
    assert rig.node.inputs["lift_height"].current(rig.t)[0] == rig.env.cfg.lift_height[1]


def test_an_arm_has_no_native_interface(tmp_path):
    env = make_env("arm-reach", num_envs=1, seed=0)
    path = export_policy(env.contract(), tmp_path / "p.onnx", hidden=(8,))
    with pytest.raises(DeployError, match="no native interface"):
        DeployNode(PolicyRunner(OnnxPolicy(path), env.robot), LocalBus(),
                   NodeConfig(interface="native"))


def test_node_forward_kinematics_equals_the_simulator_tool_sensor():
    env = make_env("arm-reach", num_envs=4, seed=5)
    env.reset()
    env.step(torch.rand(4, 8) * 2 - 1)
    side = ArmGeneric(env.robot)
    for i in range(4):
        s = {k: v[i].numpy().astype(np.float64) for k, v in env.signals().items()}
        msg = side.state_messages(s)[-1][1]
        decoded = side.decode("joint_states", msg)
        np.testing.assert_allclose(decoded["ee_position"], s["ee_position"], atol=2e-6)
        assert abs(decoded["ee_orientation"] @ s["ee_orientation"]) == pytest.approx(1, abs=1e-6)
