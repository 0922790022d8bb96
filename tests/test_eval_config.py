"""`simreal eval` builds the environment the policy was trained on, or refuses: a policy
trained with another action scale must not be scored on the task's default interface."""

from __future__ import annotations

import pytest
import torch
import yaml

from simreal.api import evaluate, evaluation_config, load_task_config, make_env
from simreal.cli import main
from simreal.deploy.contract import ContractError
from simreal.train.export import export_onnx

SCALE = [0.5] * 7 + [0.05]  # arm-reach's default is larger on every joint


@pytest.fixture(scope="module")
def scaled_policy(tmp_path_factory):
    """A zero-action arm-reach policy exported from an env with a non-default action scale."""
    contract = make_env("arm-reach", 1, 0, {"action_scale": SCALE}).contract()

    class Zero(torch.nn.Module):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return obs[:, :contract.action_dim] * 0.0

    return export_onnx(Zero(), contract, tmp_path_factory.mktemp("scaled") / "p.onnx")


def test_eval_refuses_a_policy_whose_action_scale_differs_from_the_task_defaults(
        scaled_policy):
    with pytest.raises(ContractError) as err:
        evaluate(scaled_policy, episodes=2)
    text = str(err.value)
    assert str(scaled_policy) in text and "action: policy" in text
    assert "--task-config RUN_DIR/config.yaml" in text


def test_eval_with_the_runs_task_config_runs(scaled_policy, tmp_path, capsys):
    run_config = tmp_path / "config.yaml"
    run_config.write_text(yaml.safe_dump({"task": "arm-reach",
                                          "task_config": {"action_scale": SCALE}}))
    out = evaluate(scaled_policy, episodes=2, task_config=load_task_config(run_config))
    assert out["episodes"] == 2 and out["success_rate"] == 0.0  # zero action: no reaching
    assert main(["eval", str(scaled_policy), "--episodes", "2", "--json",
                 "--task-config", str(run_config)]) == 0
    assert '"episodes": 2' in capsys.readouterr().out.strip().splitlines()[-1]
    # a configuration that does not match the policy is refused naming what differs
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"action_scale": [0.4] * 7 + [0.05]}))
    assert main(["eval", str(scaled_policy), "--episodes", "2",
                 "--task-config", str(bad)]) != 0
    assert "action: policy" in capsys.readouterr().err


def test_training_only_settings_are_dropped_for_evaluation(tmp_path):
    cfg = {"grasped_start": 0.2, "above_start": 0.3, "stagger_start": True,
           "above_height": [0.0, 0.1], "episode_s": 4.0}
    assert evaluation_config("arm-lift", cfg) == {"episode_s": 4.0}
    assert evaluation_config("arm-lift", None) == {}
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n")
    with pytest.raises(ValueError, match="list.yaml: a task configuration is a mapping"):
        load_task_config(path)


HISTORY = {"action_history": 3, "state_history": 2, "leg_odometry_tau": 0.1,
           "leg_odometry_stance": "torque_height"}


@pytest.fixture(scope="module")
def history_policy(tmp_path_factory):
    """A zero-action go2-flat policy whose actor saw histories and leg odometry."""
    contract = make_env("go2-flat", 1, 0, HISTORY).contract()

    class Zero(torch.nn.Module):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return obs[:, :contract.action_dim] * 0.0

    return export_onnx(Zero(), contract, tmp_path_factory.mktemp("hist") / "p.onnx")


def test_the_contract_pins_history_and_odometry(history_policy):
    from simreal.deploy.policy import OnnxPolicy
    from simreal.sim.registry import get_task

    cls = get_task("go2-flat")
    assert cls.settings_from_contract(OnnxPolicy(history_policy).contract) == HISTORY
    default = cls.settings_from_contract(make_env("go2-flat", 1, 0).contract())
    assert default == {"action_history": 1, "state_history": 1, "leg_odometry_tau": None}


def test_a_history_policy_evaluates_without_its_runs_config(history_policy, tmp_path):
    result = evaluate(history_policy, episodes=2)  # built from the contract's settings
    assert result["episodes"] == 2
    # a configuration that says otherwise still wins, and the contract check names it
    with pytest.raises(ContractError, match="observations: policy"):
        evaluate(history_policy, episodes=2, task_config={"action_history": 1})


@pytest.mark.parametrize(("task", "settings"), [
    ("arm-reach", {"action_history": 2, "state_history": 3}),
    ("arm-lift", {"action_history": 3, "state_history": 2}),
    ("quadrotor-hover", {"action_history": 4}),
])
def test_every_task_reads_its_history_off_the_contract(task, settings):
    """The arm tasks' and the quadrotor's history lengths come back from their contracts, as
    go2's do: the actor's input changes by each period of its terms."""
    from simreal.sim.registry import get_task

    cls = get_task(task)
    plain, other = make_env(task, 1, 0).contract(), make_env(task, 1, 0, settings).contract()
    assert cls.settings_from_contract(other) == settings
    assert cls.settings_from_contract(plain) != settings
    assert other.obs_dim != plain.obs_dim


def test_an_arm_history_policy_runs_through_the_deploy_runtime(tmp_path):
    contract = make_env("arm-reach", 1, 0, {"action_history": 2, "state_history": 3}).contract()

    class Zero(torch.nn.Module):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return obs[:, :contract.action_dim] * 0.0

    policy = export_onnx(Zero(), contract, tmp_path / "reach.onnx")
    assert evaluate(policy, episodes=2)["episodes"] == 2
