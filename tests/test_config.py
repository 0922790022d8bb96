"""One YAML loader for every configuration: errors name the file, the field and the value."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from simreal.core.config import ConfigError, StrictModel, load_yaml_model
from simreal.robots import RobotError, load_robot_dir
from simreal.robots.registry import robot_dirs


class Inner(StrictModel):
    gains: list[float] = [1.0]


class Settings(StrictModel):
    rate_hz: float = 50.0
    inner: Inner = Inner()


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_valid_file_and_an_empty_one_load(tmp_path):
    assert load_yaml_model(write(tmp_path, "rate_hz: 100\n"), Settings).rate_hz == 100
    assert load_yaml_model(write(tmp_path, ""), Settings) == Settings()


@pytest.mark.parametrize(("text", "field", "value"), [
    ("rate_hz: .nan\n", "rate_hz", "nan"),
    ("inner: {gains: [1, .inf]}\n", r"inner.gains\[1\]", "inf"),
    ("rate_hz: fast\n", "rate_hz", "'fast'"),
])
def test_bad_values_name_file_field_and_value(tmp_path, text, field, value):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"cfg.yaml: {field}: .*\(got {value}\)"):
        load_yaml_model(path, Settings)


def test_unknown_keys_missing_files_and_bad_yaml_are_named(tmp_path):
    with pytest.raises(ConfigError, match="cfg.yaml: rate: Extra inputs are not permitted"):
        load_yaml_model(write(tmp_path, "rate: 3\n"), Settings)
    with pytest.raises(ConfigError, match="cfg.yaml: expected a mapping"):
        load_yaml_model(write(tmp_path, "- 1\n"), Settings)
    with pytest.raises(ConfigError, match="cfg.yaml: not valid YAML"):
        load_yaml_model(write(tmp_path, "a: [1\n"), Settings)
    with pytest.raises(FileNotFoundError, match="nope.yaml: no such settings file"):
        load_yaml_model(tmp_path / "nope.yaml", Settings, what="settings file")


def test_robot_yaml_goes_through_the_loader(tmp_path):
    folder = tmp_path / "cf"
    shutil.copytree(robot_dirs()["crazyflie"], folder)
    yaml_path = folder / "robot.yaml"
    text = yaml_path.read_text()
    assert "mass: 0.027" in text
    yaml_path.write_text(text.replace("mass: 0.027", "mass: .nan"))
    with pytest.raises(RobotError, match=r"robot.yaml: mass: .*finite.*\(got nan\)"):
        load_robot_dir(folder)
    assert isinstance(RobotError("x"), ConfigError)


def test_calibration_scenario_and_node_files_go_through_the_loader(tmp_path):
    from simreal.calibration.schema import CalibrationError, load_calibration
    from simreal.deploy.app import load_config
    from simreal.deploy.node import DeployError
    from simreal.hil.config import HilConfigError, load_faults, load_scenario

    with pytest.raises(CalibrationError,
                       match=r"calib.yaml: .*sigmas: .*finite number \(got nan\)"):
        load_calibration(write(tmp_path, "robot: go2\nsigmas: .nan\n", "calib.yaml"))
    with pytest.raises(HilConfigError, match=r"s.yaml: duration_s: .*\(got inf\)"):
        load_scenario(write(tmp_path, "duration_s: .inf\n", "s.yaml"))
    # a fault's kind is the union's tag: the path names the list entry and the field only
    with pytest.raises(HilConfigError, match=r"f.yaml: faults\[0\].rate: "):
        load_faults(write(tmp_path, "faults: [{kind: drop, rate: .nan}]\n", "f.yaml"))
    with pytest.raises(DeployError, match=r"node.yaml: damping_kd: .*\(got nan\)"):
        load_config(write(tmp_path, "damping_kd: .nan\n", "node.yaml"))


def test_a_policy_whose_contract_carries_nan_is_refused_at_load(tmp_path):
    import json

    import onnx

    from simreal.deploy.contract import CONTRACT_KEY, ContractError
    from simreal.deploy.policy import OnnxPolicy

    model = onnx.load(str(Path(__file__).parent / "assets" / "hover_crazyflie.onnx"))
    entry = next(p for p in model.metadata_props if p.key == CONTRACT_KEY)
    contract = json.loads(entry.value)
    contract["action"]["offset"][1] = float("nan")
    entry.value = json.dumps(contract)  # Python writes NaN, as a buggy exporter might
    path = tmp_path / "nan.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ContractError, match=r"nan.onnx.*action.offset\[1\]: .*finite"):
        OnnxPolicy(path)
