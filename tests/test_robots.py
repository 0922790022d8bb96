import re

import pytest
import yaml

from simreal.robots import RobotError, load_robot_dir
from simreal.robots.registry import UnknownNameError, get_robot


def test_crazyflie_loads_with_its_published_figures():
    robot = get_robot("crazyflie")
    assert robot.actuator_names == ["m1", "m2", "m3", "m4"]
    assert robot.spec.mass == pytest.approx(0.027)
    assert robot.spec.rotor_model.thrust_coefficient == pytest.approx(3.16e-10)
    assert robot.spec.control.decimation == 2
    assert re.fullmatch(r"[0-9a-f]{64}", robot.description_hash)


def test_unknown_robot_lists_known():
    with pytest.raises(UnknownNameError, match="known robots: .*crazyflie"):
        get_robot("no-such-robot")


def _edit(directory, fn):
    path = directory / "robot.yaml"
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data))


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.pop("mass"), "mass"),
    (lambda d: d.update(colour="red"), "colour"),
    (lambda d: d["control"].update(rate_hz=-1), "control.rate_hz"),
    (lambda d: d["rotors"][2].update(spin="sideways"), "rotors[2].spin"),
    (lambda d: d["rotors"][1].update(actuator="m9"), "rotors[1].actuator"),
    (lambda d: d["sensors"].update(position="gps"), "sensors.position"),
    (lambda d: d.update(base_body="trunk"), "base_body"),
    (lambda d: d["control"].update(physics_dt=0.0025, rate_hz=50.0), "control.physics_dt"),
    (lambda d: d["control"].update(rate_hz=90.0), "control"),
])
def test_malformed_robot_yaml_names_file_and_field(crazyflie_copy, edit, field):
    _edit(crazyflie_copy, edit)
    with pytest.raises(RobotError) as err:
        load_robot_dir(crazyflie_copy)
    message = str(err.value)
    assert str(crazyflie_copy / "robot.yaml") in message
    assert field in message


def test_malformed_mjcf_names_the_file(crazyflie_copy):
    (crazyflie_copy / "crazyflie.xml").write_text("<mujoco><worldbody>")
    with pytest.raises(RobotError, match=r"crazyflie\.xml: not well-formed XML"):
        load_robot_dir(crazyflie_copy)


def test_missing_mjcf_file_is_named(crazyflie_copy):
    (crazyflie_copy / "crazyflie.xml").unlink()
    with pytest.raises(RobotError, match=r"robot\.yaml: mjcf: file 'crazyflie\.xml' not found"):
        load_robot_dir(crazyflie_copy)


def test_mjcf_that_mujoco_rejects_is_named(crazyflie_copy):
    from simreal.sim.backend import BackendError, MujocoBackend

    path = crazyflie_copy / "crazyflie.xml"
    path.write_text(path.read_text().replace('mass="0.027"', 'mass="-1"'))
    robot = load_robot_dir(crazyflie_copy)  # well-formed XML, so the XML check passes
    with pytest.raises(BackendError, match=r"crazyflie\.xml: MuJoCo cannot compile it"):
        MujocoBackend(robot.mjcf_path, 2)


def test_hash_changes_with_the_description(crazyflie_copy):
    before = load_robot_dir(crazyflie_copy).description_hash
    _edit(crazyflie_copy, lambda d: d.update(mass=0.028))
    assert load_robot_dir(crazyflie_copy).description_hash != before
