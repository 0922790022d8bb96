"""The ROS 2 package ros_ws/src/simreal_ros, as far as it can be checked without ROS 2: its
parameter files are valid node configurations, its files are complete, and its entry point
fails with a clear message where rclpy is absent."""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from simreal.deploy.interfaces import INPUT_TOPICS
from simreal.deploy.node import INTERFACES, DeployError, NodeConfig
from simreal.deploy.ros2_node import config_from_parameters

PKG = Path(__file__).resolve().parent.parent / "ros_ws" / "src" / "simreal_ros"
KIND = {"go2.yaml": "legged", "quadrotor.yaml": "quadrotor"}


def _flatten(tree: dict, prefix: str = "") -> dict:
    """How ROS 2 reads a parameter file: nested keys joined by dots."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@pytest.mark.parametrize("name", sorted(KIND))
def test_parameter_files_are_valid_node_configurations(name):
    params = yaml.safe_load((PKG / "config" / name).read_text())
    flat = _flatten(params["simreal_deploy"]["ros__parameters"])
    flat.update({"policy": "/tmp/policy.onnx", "use_sim_time": False})
    policy, robot, cfg = config_from_parameters(flat)
    assert isinstance(cfg, NodeConfig) and policy == "/tmp/policy.onnx"
    assert robot == {"go2.yaml": "go2", "quadrotor.yaml": "crazyflie"}[name]
    known = {s.key for cls in INTERFACES[KIND[name]] for s in cls.state_topics +
             cls.command_topics} | {s.key for s in INPUT_TOPICS}
    assert set(cfg.topics) <= known


def test_parameters_are_checked_like_any_configuration():
    with pytest.raises(DeployError, match="'policy'.*and 'robot'.*are required"):
        config_from_parameters({"robot": "go2"})
    with pytest.raises(DeployError, match="safety.max_tilt: Extra inputs"):
        config_from_parameters({"policy": "p.onnx", "robot": "go2", "safety.max_tilt": 1.0})


def test_package_files_are_complete():
    root = ET.parse(PKG / "package.xml").getroot()
    assert root.findtext("name") == "simreal_ros"
    assert root.find("export/build_type").text == "ament_python"
    assert {"rclpy", "sensor_msgs", "nav_msgs", "std_msgs", "geometry_msgs"} <= \
        {d.text for d in root.findall("exec_depend")}
    assert (PKG / "resource" / "simreal_ros").is_file()
    assert "deploy_node = {PACKAGE}.node:main" in (PKG / "setup.py").read_text()
    assert "install_scripts=$base/lib/simreal_ros" in (PKG / "setup.cfg").read_text()
    for launch in ("go2.launch.py", "quadrotor.launch.py"):
        source = (PKG / "launch" / launch).read_text()
        compile(source, launch, "exec")
        assert "generate_launch_description" in source and "deploy_node" in source
    readme = (PKG / "README.md").read_text()
    assert "colcon build" in readme and "ros2 launch simreal_ros" in readme


def test_entry_point_says_what_is_missing_without_rclpy(monkeypatch, capsys):
    try:
        import rclpy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("rclpy is installed: this test covers its absence")
    monkeypatch.syspath_prepend(str(PKG))
    monkeypatch.delitem(sys.modules, "simreal_ros.node", raising=False)
    from simreal_ros.node import main

    assert main([]) == 1
    err = capsys.readouterr().err
    assert "rclpy is not importable" in err and "--transport dds" in err
