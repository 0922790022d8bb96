"""One table from (robot kind, flavour) to an interface class (deploy/registry.py): every pair
of today resolves, an unknown one is refused with the known ones listed, and a class registered
here, at test time, is what the deploy node, the HIL robot and the calibration log reader build,
with none of them edited. Plus what the classes now carry instead of isinstance switches."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import numpy as np
import pytest
from pydantic import ValidationError

pytest.importorskip("mujoco")

from simreal.calibration.logs import LogError, interface_for, read_log  # noqa: E402
from simreal.calibration.record import command_messages, damping_command, write_log  # noqa: E402
from simreal.deploy import messages as m  # noqa: E402
from simreal.deploy import registry  # noqa: E402
from simreal.deploy.arm import ArmGeneric  # noqa: E402
from simreal.deploy.interfaces import (  # noqa: E402
    Go2Native,
    InterfaceSettings,
    JointGeneric,
    Px4Native,
    QuadGeneric,
    TopicSpec,
)
from simreal.deploy.limits import command_limits  # noqa: E402
from simreal.deploy.node import INTERFACES as BY_KIND  # noqa: E402
from simreal.deploy.node import DeployError, DeployNode, NodeConfig, make_interface  # noqa: E402
from simreal.deploy.policy import OnnxPolicy  # noqa: E402
from simreal.deploy.runner import PolicyRunner  # noqa: E402
from simreal.deploy.safety import Mode  # noqa: E402
from simreal.deploy.transport import LocalBus, QoS  # noqa: E402
from simreal.hil.analysis import _outside  # noqa: E402
from simreal.hil.mcap_log import LogMessage  # noqa: E402
from simreal.hil.robot import HilRobotError, RobotSimConfig, SimRobot, robot_side_interface  # noqa: E402
from simreal.robots.registry import get_robot  # noqa: E402
from tests import test_node_fixtures as fx  # noqa: E402
from tests.test_node_fixtures import standing_signals  # noqa: E402

legbot, legbot_policy = fx.legbot, fx.legbot_policy  # fixtures

TODAY = {("quadrotor", "generic"): QuadGeneric, ("quadrotor", "native"): Px4Native,
         ("legged", "generic"): JointGeneric, ("legged", "native"): Go2Native,
         ("arm", "generic"): ArmGeneric}
ROBOT_OF_KIND = {"quadrotor": "crazyflie", "legged": "go2", "arm": "panda"}


class Renamed(JointGeneric):
    """A new interface: the generic joint one on other topics (and QoS-identical types)."""

    name = "renamed"
    state_topics = (TopicSpec("joint_states", "/renamed/joint_states", m.JointState, QoS.SENSOR),
                    TopicSpec("imu", "/renamed/imu", m.Imu, QoS.SENSOR))
    command_topics = (TopicSpec("command", "/renamed/commands", m.Float64MultiArray,
                                QoS.COMMAND),)


@pytest.fixture
def table(monkeypatch):
    """A copy of the registry's table for the test to register into (restored after)."""
    monkeypatch.setattr(registry, "INTERFACES", dict(registry.INTERFACES))
    return registry.INTERFACES


@pytest.fixture
def renamed(table):
    registry.register_interface("legged", "renamed", Renamed)
    return Renamed


@pytest.fixture(scope="module")
def robots():
    return {kind: get_robot(name) for kind, name in ROBOT_OF_KIND.items()}


# --- the table ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "flavour"), sorted(TODAY))
def test_every_pair_of_today_resolves_and_builds(kind, flavour, robots):
    assert registry.interface_class(kind, flavour) is TODAY[(kind, flavour)]
    robot = robots[kind]
    built = registry.build_interface(robot, flavour, InterfaceSettings())
    assert type(built) is TODAY[(kind, flavour)]
    # the HIL robot side comes from the same table
    assert type(robot_side_interface(robot, flavour, RobotSimConfig())) is TODAY[(kind, flavour)]
    if kind != "arm":  # calibration covers legged robots and quadrotors
        assert type(interface_for(robot, flavour)) is TODAY[(kind, flavour)]


def test_the_table_is_exactly_todays():
    assert registry.registered() == TODAY
    assert registry.flavours() == ["generic", "native"]
    assert registry.flavours_of("legged") == ["generic", "native"]
    assert registry.flavours_of("arm") == ["generic"]
    assert set(BY_KIND) == {"quadrotor", "legged", "arm"}
    assert BY_KIND["legged"] == (JointGeneric, Go2Native)


def test_an_unknown_pair_lists_the_known_ones(robots):
    with pytest.raises(registry.UnknownInterfaceError) as err:
        registry.interface_class("arm", "native")
    text = str(err.value)
    assert "'arm'" in text and "'native'" in text
    for kind, flavour in TODAY:
        assert f"{kind}.{flavour}" in text
    assert isinstance(err.value, LookupError) and isinstance(err.value, ValueError)
    with pytest.raises(registry.UnknownInterfaceError, match="legged.native"):
        registry.interface_class("boat", "generic")
    # each caller says it in its own terms, the known pairs included
    with pytest.raises(HilRobotError, match=r"interface: robot 'panda' is an arm, which has "
                                            r"only the generic interface \(.*quadrotor\.native"):
        robot_side_interface(robots["arm"], "native", RobotSimConfig())
    with pytest.raises(LogError, match=r"no 'bogus' interface.*legged\.generic"):
        interface_for(robots["legged"], "bogus")
    with pytest.raises(ValidationError, match=r"unknown interface 'bogus' \(known: generic, "
                                              r"native\)"):
        NodeConfig(interface="bogus")


def test_register_refuses_a_clash_and_a_non_interface(table):
    with pytest.raises(ValueError, match="already Go2Native"):
        registry.register_interface("legged", "native", Renamed)
    with pytest.raises(TypeError, match="not a RobotInterface"):
        registry.register_interface("legged", "x", dict)  # type: ignore[arg-type]
    assert registry.register_interface("legged", "native", Renamed, replace=True) is Renamed
    assert registry.interface_class("legged", "native") is Renamed


def test_an_entry_point_registers_an_interface(table, monkeypatch):
    ep = EntryPoint(name="legged.from-ep", value=f"{__name__}:Renamed",
                    group=registry.ENTRY_POINT_GROUP)
    bad = EntryPoint(name="nodot", value=f"{__name__}:Renamed", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep, bad])
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    assert registry.interface_class("legged", "from-ep") is Renamed
    assert ("nodot", "") not in registry.registered() and len(registry.registered()) == 6


# --- a new interface, picked up by the three factories unedited ------------------------------
def test_the_node_builds_a_registered_interface(renamed, legbot, legbot_policy):
    cfg = NodeConfig(interface="renamed")  # the configuration accepts the new flavour
    bus = LocalBus()
    node = DeployNode(PolicyRunner(OnnxPolicy(legbot_policy), legbot), bus, cfg)
    assert type(node.interface) is Renamed
    assert BY_KIND["legged"][-1] is Renamed
    assert node.topics["joint_states"] == "/renamed/joint_states"
    assert node.topics["command"] == "/renamed/commands"
    side = Renamed(legbot)
    state = {s.key: bus.publisher(s.default, s.type, s.qos) for s in side.state_topics}
    got = bus.subscription("/renamed/commands", m.Float64MultiArray, QoS.COMMAND)
    old = bus.subscription("/forward_position_controller/commands", m.Float64MultiArray,
                           QoS.COMMAND)
    for _ in range(3):
        for key, msg in side.state_messages(standing_signals(legbot)):
            state[key].write(msg)
        node.cycle()
    cmds = got.take()
    assert len(cmds) == 3 and not old.take()
    q = side.command_of("command", cmds[-1])["q"]
    assert q.shape == (len(legbot.spec.joints),) and np.isfinite(q).all()
    # make_interface, which hil/analysis.py calls, goes through the same table
    limits = command_limits(legbot, node.runner.contract)
    assert type(make_interface(node.runner, cfg, limits)) is Renamed


def test_the_node_refuses_a_flavour_its_robot_kind_lacks(table, legbot, legbot_policy):
    registry.register_interface("quadrotor", "renamed", QuadGeneric)
    runner = PolicyRunner(OnnxPolicy(legbot_policy), legbot)
    with pytest.raises(DeployError, match=r"\(legged\) has no renamed interface; use "
                                          r"--interface generic or native"):
        DeployNode(runner, LocalBus(), NodeConfig(interface="renamed"))


def test_hil_robot_and_calibration_log_use_a_registered_interface(renamed, robots, tmp_path):
    go2 = robots["legged"]
    sim = SimRobot(go2, "renamed")
    assert type(sim.interface) is Renamed
    iface = interface_for(go2, "renamed")
    assert type(iface) is Renamed
    names = {s.key: s.default for s in iface.state_topics + iface.command_topics}
    q0 = np.array([j.default for j in go2.spec.joints])
    log: list[LogMessage] = []
    for k in range(5):
        t_ns = 1_000_000_000 + k * 20_000_000
        for key, msg in command_messages(iface, {"q": q0}):
            data = msg.serialize()
            log.append(LogMessage(names[key], type(msg), "command", t_ns, t_ns, data))
            assert sim.apply(key, type(msg).deserialize(data))
        for _ in range(10):
            sim.step()
        for key, msg in sim.interface.state_messages(sim.signals(), t_ns * 1e-9):
            log.append(LogMessage(names[key], type(msg), "sensor", t_ns + 1, t_ns + 1,
                                  msg.serialize()))
    assert sim.commands_applied == 5
    write_log(tmp_path / "renamed.mcap", log)
    read = read_log(tmp_path / "renamed.mcap", go2, interface="renamed")
    assert read.interface == "renamed" and read.extra == {}  # every topic was understood
    assert len(read.commands.t) == 5 and np.allclose(read.commands.values["q"], q0)
    assert set(read.states) == {"joint_states", "imu"}
    assert len(read.signal("joint_pos").t) == 5
    # the generic interface does not read the renamed topics
    with pytest.raises(LogError, match="no command messages"):
        read_log(tmp_path / "renamed.mcap", go2, interface="generic")


# --- what replaced the isinstance switches ---------------------------------------------------
def test_raw_commands_round_trip_through_the_robot_side(robots):
    go2, cf = robots["legged"], robots["quadrotor"]
    n = len(go2.spec.joints)
    q, kp, kd = np.linspace(-0.5, 0.5, n), np.full(n, 20.0), np.full(n, 0.5)
    native = interface_for(go2, "native")
    [(key, msg)] = command_messages(native, {"q": q, "kp": kp, "kd": kd})
    got = native.command_of(key, msg)
    assert key == "lowcmd" and bool(got["crc_ok"])
    assert np.allclose(got["q"], q, atol=1e-6) and np.allclose(got["kp"], kp)
    [(key, msg)] = damping_command(native, {"joint_pos": q})
    got = native.command_of(key, msg)
    assert np.allclose(got["kp"], 0) and np.allclose(got["kd"], 1.0)  # kp 0, kd 1
    assert damping_command(interface_for(go2, "generic"), {}) == []  # no pose to hold yet
    speed = np.array([0.1, 0.2, 0.3, 0.4])
    px4 = interface_for(cf, "native")
    sent = command_messages(px4, {"rotor_speed": speed})
    assert [k for k, _ in sent] == ["offboard_control_mode", "actuator_motors"]
    assert np.allclose(px4.command_of(*sent[1])["rotor_speed"], speed, atol=1e-6)
    stop = dict(damping_command(px4, {}))
    assert np.allclose(px4.command_of("actuator_motors", stop["actuator_motors"])
                       ["rotor_speed"], 0)  # zero, not NaN
    [(key, msg)] = command_messages(interface_for(cf, "generic"), {"rotor_speed": speed})
    assert key == "command" and list(msg.data) == speed.tolist()


def test_status_heartbeat_and_disarm_flags(robots):
    go2, cf = robots["legged"], robots["quadrotor"]
    native = interface_for(go2, "native")
    native.crc_errors = 7
    assert native.status() == {"crc_errors": 7}
    assert interface_for(go2, "generic").status() == {}
    assert Px4Native.heartbeat_keys == {"offboard_control_mode"} and Px4Native.nonfinite_disarms
    for cls in (QuadGeneric, JointGeneric, Go2Native, ArmGeneric):
        assert not cls.heartbeat_keys and not cls.nonfinite_disarms
    # HIL limits check: NaN rotor commands are PX4's "disarmed", a fault on the generic topic
    nan = {"rotor_speed": np.full(4, np.nan)}
    assert _outside(nan, None, interface_for(cf, "native")) == ""
    assert "non-finite" in _outside(nan, None, interface_for(cf, "generic"))


def test_the_native_command_check_is_the_interfaces(robots, legbot, legbot_policy):
    runner = PolicyRunner(OnnxPolicy(legbot_policy), legbot)
    limits = command_limits(legbot, runner.contract)
    iface = make_interface(runner, NodeConfig(interface="native"), limits)
    q = np.array([j.default for j in legbot.spec.joints])
    [(key, msg)] = iface.encode(q, Mode.RUN, {})
    assert _outside(iface.command_of(key, msg), limits, iface) == ""
    [(key, msg)] = iface.raw_command({"q": q, "kp": limits.kp * 2, "kd": limits.kd})
    assert "above the contract's" in _outside(iface.command_of(key, msg), limits, iface)
    msg.crc ^= 1
    assert _outside(iface.command_of(key, msg), limits, iface) == "LowCmd CRC wrong"
    generic = make_interface(runner, NodeConfig(), limits)
    [(key, msg)] = generic.raw_command({"q": q})
    assert _outside(generic.command_of(key, msg), limits, generic) == ""


def test_the_px4_robot_obeys_motors_only_after_a_heartbeat(robots):
    cf = robots["quadrotor"]
    sent = dict(command_messages(interface_for(cf, "native"), {"rotor_speed": np.full(4, 0.5)}))
    sim = SimRobot(cf, "native")
    assert not sim.apply("actuator_motors", sent["actuator_motors"])  # not in offboard mode
    assert sim.apply("offboard_control_mode", sent["offboard_control_mode"])
    assert sim.apply("actuator_motors", sent["actuator_motors"])
    assert (sim.commands_applied, sim.commands_rejected) == (1, 1)
    generic = SimRobot(cf, "generic")  # no heartbeat on the generic topics
    [(key, msg)] = command_messages(generic.interface, {"rotor_speed": np.full(4, 0.5)})
    assert generic.apply(key, msg) and generic.commands_applied == 1
