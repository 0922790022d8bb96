"""Export and the contract: ONNX matches torch; a mismatched robot is refused by name."""

import numpy as np
import onnxruntime as ort
import pytest
import torch
import yaml

from simreal.api import make_env
from simreal.deploy.contract import CONTRACT_KEY, ContractError, PolicyContract
from simreal.deploy.policy import OnnxPolicy
from simreal.robots import load_robot_dir
from simreal.train.export import export_onnx
from simreal.train.modules import ActorCritic, DeterministicActor


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    env = make_env("quadrotor-hover", num_envs=8, seed=0)
    obs = env.get_observations()
    policy = ActorCritic(obs["policy"].shape[-1], obs["critic"].shape[-1], 4, [64, 64],
                         [64, 64], 0.5)
    torch.manual_seed(0)
    for p in policy.parameters():  # non-trivial weights and statistics
        p.data.normal_(0, 0.3)
    policy.actor_norm.update(torch.randn(500, obs["policy"].shape[-1]) * 3 + 1)
    path = export_onnx(DeterministicActor(policy), env.contract(),
                       tmp_path_factory.mktemp("x") / "p.onnx")
    return policy, env, path


def test_onnx_actor_matches_torch_actor(exported):
    policy, env, path = exported
    obs = (torch.randn(256, env.contract().obs_dim) * 2).float()
    with torch.no_grad():
        expected = DeterministicActor(policy)(obs).numpy()
    got = OnnxPolicy(path)(obs.numpy())
    assert np.abs(got - expected).max() < 1e-5


def test_contract_is_in_the_metadata(exported):
    _, env, path = exported
    meta = ort.InferenceSession(str(path)).get_modelmeta().custom_metadata_map
    contract = PolicyContract.from_json(meta[CONTRACT_KEY])
    assert contract == env.contract()
    assert contract.actuators == ["m1", "m2", "m3", "m4"]
    assert [t.name for t in contract.observations][0] == "position_error"
    assert contract.robot_hash == env.robot.description_hash


def _broken(crazyflie_copy, edit):
    path = crazyflie_copy / "robot.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    return load_robot_dir(crazyflie_copy)


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["rotors"].reverse(), "actuators: policy order"),
    (lambda d: d["control"].update(rate_hz=200.0, physics_dt=0.005), "control_rate_hz"),
    (lambda d: d.update(name="crazyflie-b"), "robot: policy was trained for 'crazyflie'"),
    (lambda d: d.update(mass=0.030), "robot_hash"),
])
def test_contract_mismatch_is_refused_naming_the_field(exported, crazyflie_copy, edit, field):
    _, env, _ = exported
    robot = _broken(crazyflie_copy, edit)
    with pytest.raises(ContractError, match=field):
        env.contract().check(robot)


def test_unchanged_copy_of_the_robot_is_accepted(exported, crazyflie_copy):
    _, env, _ = exported
    env.contract().check(load_robot_dir(crazyflie_copy))


def test_observation_size_mismatch_is_refused(exported, tmp_path):
    import onnx

    _, env, path = exported
    model = onnx.load(str(path))
    contract = env.contract().model_copy(
        update={"observations": env.contract().observations[:-1]})  # drop the last term
    for prop in model.metadata_props:
        if prop.key == CONTRACT_KEY:
            prop.value = contract.to_json()
    bad = tmp_path / "bad.onnx"
    onnx.save(model, str(bad))
    full, short = env.contract().obs_dim, contract.obs_dim
    assert short < full
    with pytest.raises(ContractError, match=f"graph input has {full} values, contract .* {short}"):
        OnnxPolicy(bad)


def test_policy_without_contract_is_refused(tmp_path):
    net = torch.nn.Linear(3, 2)
    path = tmp_path / "plain.onnx"
    torch.onnx.export(net, (torch.zeros(1, 3),), str(path), dynamo=False)
    with pytest.raises(ContractError, match="no 'simreal.contract' metadata"):
        OnnxPolicy(path)
