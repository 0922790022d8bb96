"""A small legged test robot and policies for the deploy node tests (until robots/go2 exists).

`write_legbot(dir)` writes robot.yaml and a tiny 12-joint MJCF whose joints follow Unitree's
naming (FL_thigh_joint ...) in the RL order FL, FR, RL, RR, so the native interface's motor
mapping (FR, FL, RR, RL) is exercised. `export_policy` exports a tiny torch MLP with a
matching contract, as `simreal export` would.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from simreal.deploy.contract import ActionSpec, CommandRange, ObsTerm, PolicyContract
from simreal.robots import Robot, load_robot_dir

LEGS = ("FL", "FR", "RL", "RR")
PARTS = ("hip", "thigh", "calf")
JOINTS = [f"{leg}_{part}_joint" for leg in LEGS for part in PARTS]
DEFAULT = {"hip": 0.1, "thigh": 0.8, "calf": -1.5}
TORQUE = {"hip": 23.7, "thigh": 23.7, "calf": 45.43}
THIGH_RANGE = (-1.5708, 3.4907)
CALF_RANGE = (-2.7227, -0.83776)  # set through a default class in the MJCF


def _default(joint: str) -> float:
    leg, part, _ = joint.split("_")
    value = DEFAULT[part]
    return -value if part == "hip" and leg in ("FR", "RR") else value


def _leg_xml(leg: str) -> str:
    x = 0.19 if leg[0] == "F" else -0.19
    y = 0.05 if leg[1] == "L" else -0.05
    return f"""
      <body name="{leg}_hip" pos="{x} {y} 0">
        <joint name="{leg}_hip_joint" axis="1 0 0" range="-1.0472 1.0472"/>
        <geom type="cylinder" size="0.04 0.02" quat="1 1 0 0" mass="0.68"/>
        <body name="{leg}_thigh" pos="0 {y * 1.9:.3f} 0">
          <joint name="{leg}_thigh_joint" axis="0 1 0" range="{THIGH_RANGE[0]} {THIGH_RANGE[1]}"/>
          <geom type="capsule" fromto="0 0 0 0 0 -0.213" size="0.02" mass="1.15"/>
          <body name="{leg}_calf" pos="0 0 -0.213">
            <joint name="{leg}_calf_joint" class="calf"/>
            <geom type="capsule" fromto="0 0 0 0 0 -0.213" size="0.015" mass="0.24"/>
            <geom name="{leg}_foot" type="sphere" pos="0 0 -0.213" size="0.022" mass="0.05"/>
            <site name="{leg}_foot" pos="0 0 -0.213" size="0.025"/>
          </body>
        </body>
      </body>"""


def write_legbot(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    actuators = "\n".join(f'    <motor name="{j[:-6]}" joint="{j}" '
                          f'ctrlrange="-{TORQUE[j.split("_")[1]]} {TORQUE[j.split("_")[1]]}"/>'
                          for j in JOINTS)
    sensors = "\n".join(
        [f'    <jointpos name="{j}_pos" joint="{j}"/>\n    <jointvel name="{j}_vel" joint="{j}"/>'
         for j in JOINTS]
        + [f'    <touch name="{leg}_contact" site="{leg}_foot"/>' for leg in LEGS])
    mjcf = f"""<mujoco model="legbot">
  <compiler angle="radian"/>
  <option timestep="0.005"/>
  <default>
    <joint damping="0.1" armature="0.01"/>
    <default class="calf">
      <joint axis="0 1 0" range="{CALF_RANGE[0]} {CALF_RANGE[1]}"/>
    </default>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="trunk" pos="0 0 0.35">
      <freejoint/>
      <geom type="box" size="0.19 0.047 0.057" mass="6.9"/>
      <site name="imu" pos="0 0 0"/>
{"".join(_leg_xml(leg) for leg in LEGS)}
    </body>
  </worldbody>
  <actuator>
{actuators}
  </actuator>
  <sensor>
    <framequat name="trunk_quat" objtype="site" objname="imu"/>
    <gyro name="trunk_gyro" site="imu"/>
{sensors}
  </sensor>
</mujoco>
"""
    (directory / "legbot.xml").write_text(mjcf)
    spec = {
        "name": "legbot", "kind": "legged", "mjcf": "legbot.xml", "base_body": "trunk",
        "control": {"rate_hz": 50, "physics_dt": 0.005}, "mass": 12.0, "action_scale": 0.25,
        "sensors": {"orientation": "trunk_quat", "angular_velocity": "trunk_gyro"},
        "joints": [{"name": j, "actuator": j[:-6], "default": _default(j), "kp": 20.0,
                    "kd": 0.5, "torque_limit": TORQUE[j.split("_")[1]],
                    "velocity_limit": 30.0, "position_sensor": f"{j}_pos",
                    "velocity_sensor": f"{j}_vel"} for j in JOINTS],
        "feet": [{"name": leg, "site": f"{leg}_foot", "contact_sensor": f"{leg}_contact"}
                 for leg in LEGS],
    }
    (directory / "robot.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return directory


def legbot_contract(robot: Robot, rate_hz: float | None = None) -> PolicyContract:
    n = len(robot.actuator_names)
    return PolicyContract(
        task="legbot-walk", robot=robot.name, robot_hash=robot.description_hash,
        control_rate_hz=rate_hz or robot.spec.control.rate_hz,
        actuators=robot.actuator_names,
        observations=[ObsTerm(name="angular_velocity", dim=3, scale=0.25),
                      ObsTerm(name="projected_gravity", dim=3),
                      ObsTerm(name="velocity_command", dim=3),
                      ObsTerm(name="joint_pos_rel", dim=n),
                      ObsTerm(name="joint_vel", dim=n, scale=0.05),
                      ObsTerm(name="last_action", dim=n)],
        action=ActionSpec(kind="joint_position", scale=[0.25] * n,
                          offset=[j.default for j in robot.spec.joints], clip=10.0,
                          kp=[20.0] * n, kd=[0.5] * n),
        commands={"velocity_command": CommandRange(low=[-1.0, -0.5, -1.0],
                                                   high=[1.0, 0.5, 1.0])},
    )


def export_policy(contract: PolicyContract, path: Path, hidden: tuple[int, ...] = (32,),
                  seed: int = 0, gain: float = 0.5) -> Path:
    from simreal.train.export import export_onnx

    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    size = contract.obs_dim
    for h in hidden:
        layers += [torch.nn.Linear(size, h), torch.nn.ELU()]
        size = h
    layers.append(torch.nn.Linear(size, contract.action_dim))
    net = _Actor(torch.nn.Sequential(*layers))
    with torch.no_grad():
        net.net[-1].weight.mul_(gain)
    return export_onnx(net, contract, path)


class _Actor(torch.nn.Module):
    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # the exporter names the input obs
        return self.net(obs)


@pytest.fixture(scope="module")
def legbot(tmp_path_factory) -> Robot:
    return load_robot_dir(write_legbot(tmp_path_factory.mktemp("robots") / "legbot"))


@pytest.fixture(scope="module")
def legbot_policy(legbot, tmp_path_factory) -> Path:
    return export_policy(legbot_contract(legbot), tmp_path_factory.mktemp("p") / "legbot.onnx")


def standing_signals(robot: Robot) -> dict[str, np.ndarray]:
    """The robot standing still at its default pose, level."""
    n = len(robot.spec.joints)
    return {"joint_pos": np.array([j.default for j in robot.spec.joints]),
            "joint_vel": np.zeros(n), "joint_effort": np.zeros(n),
            "orientation": np.array([1.0, 0.0, 0.0, 0.0]), "angular_velocity": np.zeros(3),
            "linear_acceleration": np.array([0.0, 0.0, 9.81])}


def test_legbot_loads_and_compiles(legbot):
    import mujoco

    model = mujoco.MjModel.from_xml_path(str(legbot.mjcf_path))
    assert model.nu == 12 and model.njnt == 13
    calf = model.joint("FL_calf_joint")
    assert np.allclose(model.jnt_range[calf.id], CALF_RANGE)
