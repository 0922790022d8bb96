"""`simreal deploy` refuses a policy that disagrees with the robot, naming each mismatch,
before it opens any transport; and the node refuses configurations it cannot serve."""

import shutil
import subprocess
import sys

import onnx
import pytest
import yaml

from simreal.cli import main
from simreal.deploy.app import load_config, prepare
from simreal.deploy.contract import CONTRACT_KEY, ContractError, ObsTerm, PolicyContract
from simreal.deploy.node import DeployError
from simreal.deploy.transport import LocalBus
from simreal.robots import load_robot_dir
from tests import test_node_fixtures as fx
from tests.test_node_fixtures import export_policy, legbot_contract, write_legbot

legbot, legbot_policy = fx.legbot, fx.legbot_policy  # fixtures


def refusal(capsys, policy, robot_dir, *extra) -> str:
    assert main(["deploy", str(policy), "--robot", str(robot_dir), "--max-cycles", "1",
                 *extra]) == 2
    return capsys.readouterr().err


def test_swapped_joint_order_is_refused(legbot, legbot_policy, tmp_path, capsys):
    robot_dir = write_legbot(tmp_path / "legbot")
    data = yaml.safe_load((robot_dir / "robot.yaml").read_text())
    data["joints"][0], data["joints"][1] = data["joints"][1], data["joints"][0]
    (robot_dir / "robot.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    err = refusal(capsys, legbot_policy, robot_dir)
    assert "policy contract does not match the robot" in err
    assert "actuators: policy order ['FL_hip', 'FL_thigh'" in err
    assert "robot.yaml order ['FL_thigh', 'FL_hip'" in err
    assert "robot_hash" in err  # the description changed too: both are named


def test_observation_size_mismatch_is_refused(legbot, legbot_policy, tmp_path, capsys):
    model = onnx.load(str(legbot_policy))
    entry = next(p for p in model.metadata_props if p.key == CONTRACT_KEY)
    contract = PolicyContract.from_json(entry.value)
    terms = list(contract.observations) + [ObsTerm(name="projected_gravity", dim=3)]
    entry.value = contract.model_copy(update={"observations": terms}).to_json()
    bad = tmp_path / "bad.onnx"
    onnx.save(model, str(bad))
    err = refusal(capsys, bad, legbot.directory)
    assert f"graph input has {contract.obs_dim} values, contract observations add up to " \
           f"{contract.obs_dim + 3}" in err


def test_control_rate_mismatch_is_refused(legbot, tmp_path, capsys):
    policy = export_policy(legbot_contract(legbot, rate_hz=100.0), tmp_path / "fast.onnx")
    err = refusal(capsys, policy, legbot.directory)
    assert "control_rate_hz: policy runs at 100.0 Hz, robot.yaml says 50.0 Hz" in err
    assert "actuators" not in err and "robot_hash" not in err


def test_robot_description_hash_mismatch_is_refused(legbot, legbot_policy, tmp_path, capsys):
    robot_dir = tmp_path / "legbot"
    shutil.copytree(legbot.directory, robot_dir)
    mjcf = robot_dir / "legbot.xml"
    mjcf.write_text(mjcf.read_text().replace('mass="6.9"', 'mass="7.4"'))  # a heavier trunk
    err = refusal(capsys, legbot_policy, robot_dir)
    assert f"robot_hash: policy was trained on description {legbot.description_hash[:12]}" in err
    assert load_robot_dir(robot_dir).description_hash[:12] in err


def test_a_policy_reading_signals_the_interface_lacks_is_refused(legbot, tmp_path):
    contract = legbot_contract(legbot)
    terms = [ObsTerm(name="position_error", dim=3)] + list(contract.observations)
    policy = export_policy(contract.model_copy(update={"observations": terms}),
                           tmp_path / "p.onnx")
    with pytest.raises(DeployError, match=r"'position_error' reads \['position', "
                                          r"'target_position'\]"):
        prepare(policy, legbot, LocalBus())


def test_configuration_errors_name_the_file_and_field(legbot, legbot_policy, tmp_path):
    cfg = tmp_path / "node.yaml"
    cfg.write_text("safety:\n  watchdog_periods: 0\ntopcis: {}\n")
    with pytest.raises(DeployError, match=r"node.yaml: safety.watchdog_periods: .*; "
                                          r"topcis: Extra inputs"):
        load_config(cfg)
    with pytest.raises(DeployError, match=r"unknown keys \['odometry'\] for a legged robot"):
        prepare(legbot_policy, legbot, LocalBus(), {"topics": {"odometry": "/x"}})
    node = prepare(legbot_policy, legbot, LocalBus(),  # the other interface's keys are fine
                   {"topics": {"lowstate": "/x", "joint_states": "/robot/joint_states"}})
    assert node.topics["joint_states"] == "/robot/joint_states" and "lowstate" not in node.topics
    with pytest.raises(ContractError, match="robot: policy was trained for 'legbot'"):
        prepare(legbot_policy, "robots/crazyflie", LocalBus())


def test_deploy_never_loads_torch_or_mujoco(legbot_policy, tmp_path):
    code = ("import sys; from simreal.cli import main; "
            f"rc = main(['deploy', {str(legbot_policy)!r}, '--robot', 'crazyflie']); "
            "print(rc, [m for m in ('torch', 'mujoco') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split("\n")[0] == "2 []", out.stdout + out.stderr
    assert "robot: policy was trained for 'legbot', this is 'crazyflie'" in out.stderr
