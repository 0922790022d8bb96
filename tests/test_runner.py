"""The deploy policy runner: refuses a mismatched robot, tracks its last action, maps commands."""

import numpy as np
import pytest
import torch
import yaml

from simreal.api import make_env
from simreal.deploy.contract import ContractError
from simreal.deploy.policy import OnnxPolicy
from simreal.deploy.runner import PolicyRunner
from simreal.robots import load_robot_dir
from simreal.train.export import export_onnx
from simreal.train.modules import ActorCritic, DeterministicActor


@pytest.fixture(scope="module")
def policy_and_env(tmp_path_factory):
    env = make_env("quadrotor-hover", num_envs=4, seed=0)
    obs = env.get_observations()
    net = ActorCritic(obs["policy"].shape[-1], obs["critic"].shape[-1], 4, [16], [16], 0.5)
    torch.nn.init.normal_(net.actor[-1].weight, 0, 2.0)  # large outputs, to exercise the clip
    path = export_onnx(DeterministicActor(net), env.contract(),
                       tmp_path_factory.mktemp("r") / "p.onnx")
    return OnnxPolicy(path), env


def test_act_clips_maps_and_remembers_the_action(policy_and_env):
    policy, env = policy_and_env
    runner = PolicyRunner(policy, env.robot, batch=4)
    signals = {k: v.numpy() for k, v in env.noisy_signals().items() if k != "last_action"}
    action, command = runner.act(signals)
    assert np.abs(action).max() <= 1.0 and np.abs(action).max() == 1.0
    spec = policy.contract.action
    assert np.allclose(command, np.array(spec.offset) + np.array(spec.scale) * action)
    assert np.array_equal(runner.last_action, action)
    runner.reset(np.array([True, False, False, False]))
    assert not runner.last_action[0].any() and np.array_equal(runner.last_action[1], action[1])


def test_runner_refuses_a_robot_that_disagrees(policy_and_env, crazyflie_copy):
    policy, _ = policy_and_env
    path = crazyflie_copy / "robot.yaml"
    data = yaml.safe_load(path.read_text())
    data["rotors"][0], data["rotors"][1] = data["rotors"][1], data["rotors"][0]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ContractError, match="actuators: policy order .* robot.yaml order"):
        PolicyRunner(policy, load_robot_dir(crazyflie_copy))
