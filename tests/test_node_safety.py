"""The deploy node's safety rules, each driven by scripted robot messages (in-process bus).

Time is counted in control periods: each `node.cycle()` is one period, so nothing here depends
on the wall clock.
"""

import logging

import numpy as np
import pytest

from simreal.deploy.interfaces import Go2Native, JointGeneric
from simreal.deploy.limits import command_limits, joint_ranges
from simreal.deploy.messages import Bool, Twist, Vector3
from simreal.deploy.node import DeployNode, NodeConfig
from simreal.deploy.policy import OnnxPolicy
from simreal.deploy.runner import PolicyRunner
from simreal.deploy.safety import Mode
from simreal.deploy.transport import LocalBus
from tests import test_node_fixtures as fx
from tests.test_node_fixtures import CALF_RANGE, export_policy, legbot_contract, standing_signals

legbot, legbot_policy = fx.legbot, fx.legbot_policy  # fixtures


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Rig:
    """A node on an in-process bus and the robot's side of its interface."""

    def __init__(self, robot, policy_path, interface="generic", **cfg):
        self.bus, self.clock = LocalBus(), Clock()
        self.robot = robot
        self.node = DeployNode(PolicyRunner(OnnxPolicy(policy_path), robot), self.bus,
                               NodeConfig(interface=interface, **cfg), clock=self.clock)
        limits = command_limits(robot, self.node.runner.contract)
        self.side = (JointGeneric(robot) if interface == "generic" else
                     Go2Native(robot, limits.kp, limits.kd, 1.0))
        topics = self.node.topics
        self.state = {s.key: self.bus.publisher(topics[s.key], s.type, s.qos)
                      for s in self.side.state_topics}
        self.commands = {s.key: self.bus.subscription(topics[s.key], s.type, s.qos)
                         for s in self.side.command_topics}
        self.estop_pub = self.bus.publisher(topics["estop"], Bool)
        self.reset_pub = self.bus.publisher(topics["estop_reset"], Bool)
        self.cmd_vel = self.bus.publisher(topics["cmd_vel"], Twist)

    def step(self, signals=None) -> dict | None:
        """One control period: the robot publishes `signals` (None: nothing), the node runs,
        the robot reads the command it got (None if none)."""
        if signals is not None:
            for key, msg in self.side.state_messages(signals):
                self.state[key].write(msg)
        self.node.cycle()
        self.clock.t += 1.0 / self.node.rate_hz
        key = self.side.command_topics[0].key
        got = self.commands[key].take()
        return self.side.command_of(key, got[-1]) if got else None


@pytest.fixture(scope="module")
def wild_policy(legbot, tmp_path_factory):
    """Large outputs: the commands hit every clamp."""
    return export_policy(legbot_contract(legbot), tmp_path_factory.mktemp("w") / "wild.onnx",
                         gain=60.0, seed=1)


def run_in(rig, sig, n=200):
    for _ in range(n):
        if rig.node.safety.mode is Mode.RUN:
            return
        rig.step(sig)
    raise AssertionError("never reached RUN")


def test_nothing_is_sent_before_the_first_complete_state(legbot, legbot_policy):
    rig = Rig(legbot, legbot_policy)
    assert rig.step() is None
    side = rig.side
    messages = dict(side.state_messages(standing_signals(legbot)))
    rig.state["joint_states"].write(messages["joint_states"])  # joint states but no IMU yet
    assert rig.step() is None
    assert "waiting for state on /imu/data" in rig.node.status_line()
    assert rig.step(standing_signals(legbot)) is not None


def test_soft_start_ramps_from_the_measured_pose(legbot, legbot_policy):
    rig = Rig(legbot, legbot_policy, safety={"soft_start_s": 0.2})  # 10 periods at 50 Hz
    sig = standing_signals(legbot)
    sig["joint_pos"] = sig["joint_pos"] + 0.3  # the robot is not at the default pose
    q = [rig.step(sig)["q"] for _ in range(12)]
    dist = [np.abs(c - sig["joint_pos"]).max() for c in q]
    final = np.abs(q[-1] - sig["joint_pos"]).max()
    assert dist[0] <= 0.15 * final  # the first command is a tenth of the way
    assert all(b > a for a, b in zip(dist[:9], dist[1:10], strict=True))
    changes = rig.node.safety.changes
    assert changes[-1].new is Mode.RUN and changes[-1].cycle == 10


def test_joint_targets_stay_inside_position_velocity_and_torque_limits(legbot, wild_policy):
    rig = Rig(legbot, wild_policy, safety={"soft_start_s": 0.0})
    lim = rig.node.limits
    sig = standing_signals(legbot)
    prev = None
    for _ in range(30):
        q = rig.step(sig)["q"]
        assert np.all(q >= lim.low - 1e-9) and np.all(q <= lim.high + 1e-9)
        torque = lim.kp * (q - sig["joint_pos"]) - lim.kd * sig["joint_vel"]
        assert np.all(np.abs(torque) <= lim.torque + 1e-6)
        if prev is not None:
            assert np.all(np.abs(q - prev) <= 30.0 / 50.0 + 1e-9)  # velocity limit per period
        prev = q
    events = rig.node.safety.clamp_events
    assert events["limits"] > 0 and events["bounds"] > 0
    # the calf range comes from a default class in the MJCF, in radians
    assert joint_ranges(legbot)["FL_calf_joint"] == pytest.approx(CALF_RANGE)


def test_rate_limit_bounds_each_period_at_the_joint_velocity_limit(legbot, wild_policy):
    rig = Rig(legbot, wild_policy, safety={"soft_start_s": 0.0})
    sig = standing_signals(legbot)
    sig["joint_pos"] = sig["joint_pos"] + np.where(np.arange(12) % 3 == 2, 0.7, -0.5)
    first = rig.step(sig)["q"]
    # from the measured pose, or the range's edge for the calves pushed 0.04 rad past it
    lim = rig.node.limits
    start = np.minimum(np.maximum(sig["joint_pos"], lim.low), lim.high)
    assert np.all(np.abs(first - start) <= 0.6 + 1e-9)
    assert np.all((first >= lim.low) & (first <= lim.high))
    assert rig.node.safety.clamp_events["rate"] > 0


def test_user_velocity_command_is_clamped_to_the_trained_range_and_expires(legbot,
                                                                           legbot_policy):
    rig = Rig(legbot, legbot_policy, command_timeout_s=0.1)
    sig = standing_signals(legbot)
    rig.cmd_vel.write(Twist(Vector3(3.0, -0.2, 0.0), Vector3(0.0, 0.0, -4.0)))
    rig.step(sig)
    inp = rig.node.inputs["velocity_command"]
    assert inp.current(rig.clock.t).tolist() == [1.0, -0.2, -1.0]
    assert inp.clamped == 1 and "commands_clamped[velocity_command:1]" in rig.node.status_line()
    for _ in range(6):  # 0.12 s later without cmd_vel: back to zero
        rig.step(sig)
    assert inp.current(rig.clock.t).tolist() == [0.0, 0.0, 0.0]


def test_estop_latches_until_an_explicit_reset_and_logs_each_change(legbot, legbot_policy,
                                                                     caplog):
    caplog.set_level(logging.INFO, logger="simreal")
    rig = Rig(legbot, legbot_policy, safety={"soft_start_s": 0.0})
    sig = standing_signals(legbot)
    run_in(rig, sig)
    rig.estop_pub.write(Bool(True))
    rig.estop_pub.write(Bool(False))  # the button released: still latched
    for _ in range(5):
        assert np.allclose(rig.step(sig)["q"], sig["joint_pos"])  # damping: hold the pose
        assert rig.node.safety.mode is Mode.ESTOP
    rig.estop_pub.write(Bool(True))
    rig.reset_pub.write(Bool(True))  # refused: the input is asserted again
    rig.step(sig)
    assert rig.node.safety.mode is Mode.ESTOP
    assert "e-stop reset refused" in caplog.text
    rig.estop_pub.write(Bool(False))
    rig.reset_pub.write(Bool(True))
    rig.step(sig)
    assert rig.node.safety.mode in (Mode.SOFT_START, Mode.RUN)
    assert "-> estop at cycle" in caplog.text and "e-stop input" in caplog.text
    assert "estop -> soft_start" in caplog.text and "e-stop reset" in caplog.text


def test_watchdog_counts_control_periods_then_recovers_through_soft_start(legbot,
                                                                          legbot_policy):
    rig = Rig(legbot, legbot_policy, safety={"soft_start_s": 0.0, "watchdog_periods": 4})
    sig = standing_signals(legbot)
    run_in(rig, sig)
    modes = []
    for _ in range(5):
        out = rig.step(None)  # the robot went quiet
        modes.append(rig.node.safety.mode)
    assert modes == [Mode.RUN, Mode.RUN, Mode.RUN, Mode.DAMP, Mode.DAMP]
    assert np.allclose(out["q"], sig["joint_pos"])  # damping: the last measured pose
    assert rig.node.safety.changes[-1].reason == "no fresh state for 4 control periods"
    rig.step(sig)
    assert rig.node.safety.mode in (Mode.SOFT_START, Mode.RUN)
    reasons = [c.reason for c in rig.node.safety.changes]
    assert reasons[-2:] == ["fresh state again", "soft start complete"]


def test_tilt_damps_and_latches(legbot, legbot_policy):
    rig = Rig(legbot, legbot_policy, safety={"soft_start_s": 0.0})
    sig = standing_signals(legbot)
    run_in(rig, sig)
    fallen = dict(sig, orientation=np.array([np.cos(0.6), np.sin(0.6), 0.0, 0.0]))  # 1.2 rad
    assert np.allclose(rig.step(fallen)["q"], sig["joint_pos"])
    assert rig.node.safety.mode is Mode.DAMP and "tilt 1.20 rad" in \
        rig.node.safety.changes[-1].reason
    for _ in range(3):
        rig.step(sig)
    assert rig.node.safety.mode is Mode.DAMP  # upright again: still damping until reset


def test_nonfinite_state_holds_the_last_safe_command(legbot, legbot_policy):
    rig = Rig(legbot, legbot_policy, safety={"soft_start_s": 0.0})
    sig = standing_signals(legbot)
    run_in(rig, sig)
    good = rig.step(sig)["q"]
    bad = dict(sig, angular_velocity=np.array([np.nan, 0.0, 0.0]))
    held = rig.step(bad)["q"]
    assert np.array_equal(held, good)
    assert rig.node.nonfinite_state == 1 and rig.node.safety.nonfinite_events == 1


def test_unitree_native_interface_sends_gains_crc_and_damping(legbot, legbot_policy):
    rig = Rig(legbot, legbot_policy, interface="native", safety={"soft_start_s": 0.0},
              damping_kd=2.0)
    sig = standing_signals(legbot)
    out = rig.step(sig)
    assert bool(out["crc_ok"]) and np.all(out["kp"] == 20.0) and np.all(out["kd"] == 0.5)
    # policy joint 0 is FL_hip_joint: Unitree motor 3
    assert rig.side.index[:3] == [3, 4, 5]
    rig.estop_pub.write(Bool(True))
    out = rig.step(sig)
    assert np.all(out["kp"] == 0.0) and np.all(out["kd"] == 2.0) and bool(out["crc_ok"])
    assert np.allclose(out["q"], sig["joint_pos"], atol=1e-6)
    assert "crc_errors=0" in rig.node.status_line()


def test_shutdown_sends_the_damping_command(legbot, legbot_policy):
    rig = Rig(legbot, legbot_policy, interface="native", safety={"soft_start_s": 0.0})
    sig = standing_signals(legbot)
    run_in(rig, sig)
    rig.node.shutdown()
    got = rig.commands["lowcmd"].take()
    assert len(got) == 3
    last = rig.side.command_of("lowcmd", got[-1])
    assert np.all(last["kp"] == 0.0) and np.all(last["kd"] == 1.0)
    assert rig.node.safety.mode is Mode.DAMP
    assert rig.node.safety.changes[-1].reason == "shutdown"


def test_state_trigger_refuses_a_robot_that_publishes_faster_than_the_policy(legbot,
                                                                             legbot_policy,
                                                                             caplog):
    sig = standing_signals(legbot)
    rig = Rig(legbot, legbot_policy, trigger="state", safety={"soft_start_s": 0.0})
    period = 1.0 / rig.node.rate_hz
    for _ in range(40):  # state at the policy's rate: lock-step, the node runs the policy
        rig.step(sig)
    assert rig.node.safety.mode is Mode.RUN
    fast = Rig(legbot, legbot_policy, trigger="state", safety={"soft_start_s": 0.0})
    with caplog.at_level(logging.ERROR, logger="simreal.node"):
        for _ in range(40):  # state ten times faster (go2's lowstate at 500 Hz, a 50 Hz policy)
            fast.step(sig)
            fast.clock.t -= 0.9 * period
    assert fast.node.safety.mode is Mode.DAMP
    reason = fast.node.safety.changes[-1].reason
    assert "arrive at 500 Hz" in reason and "use trigger: timer" in reason
    assert any("arrive at 500 Hz" in r.message for r in caplog.records)
    timer = Rig(legbot, legbot_policy, trigger="timer", safety={"soft_start_s": 0.0})
    for _ in range(40):  # the timer loop takes the newest state: a fast robot is fine there
        timer.step(sig)
        timer.clock.t -= 0.9 * period
    assert timer.node.safety.mode is Mode.RUN


def test_warm_steps_change_nothing_the_node_or_robot_can_see(legbot, legbot_policy):
    rig = Rig(legbot, legbot_policy, interface="native", trigger="state",
              safety={"soft_start_s": 0.0})
    sig = standing_signals(legbot)
    for _ in range(5):
        rig.step(sig)
    bad = rig.side.state_messages(sig)[0][1]
    bad.crc ^= 1  # a corrupted message: decoding it counts a CRC error, once
    rig.state["lowstate"].write(bad)
    rig.node.cycle()
    rig.commands["lowcmd"].take()
    node, interface = rig.node, rig.node.interface
    before = (interface.crc_errors, node.published, node.cycles, node.safety.mode,
              node.runner.last_action.copy(), node.last_command.copy(), dict(vars(interface)))
    for _ in range(3):
        for step in node.warm_steps():
            step()
    assert rig.commands["lowcmd"].take() == []  # nothing written
    after = (interface.crc_errors, node.published, node.cycles, node.safety.mode,
             node.runner.last_action, node.last_command, vars(interface))
    assert after[:4] == before[:4] and before[0] == 1
    assert np.array_equal(after[4], before[4]) and np.array_equal(after[5], before[5])
    assert after[6].keys() == before[6].keys()
    assert all(after[6][k] is before[6][k] for k in before[6])
    # and the next cycle commands what it would have without the warm steps
    twin = Rig(legbot, legbot_policy, interface="native", trigger="state",
               safety={"soft_start_s": 0.0})
    for _ in range(5):
        twin.step(sig)
    twin.state["lowstate"].write(bad)
    twin.node.cycle()
    twin.commands["lowcmd"].take()
    a, b = rig.step(sig), twin.step(sig)
    assert np.array_equal(a["q"], b["q"]) and np.array_equal(a["kp"], b["kp"])


def test_prewarm_is_refused_without_the_state_trigger():
    with pytest.raises(ValueError, match="prewarm_us: 300 needs trigger: state"):
        NodeConfig(prewarm_us=300)
    assert NodeConfig(prewarm_us=300, trigger="state").prewarm_us == 300


def test_damping_holds_the_measured_pose_inside_the_joint_ranges(legbot, legbot_policy):
    """Damping by position (generic joints: hold where it is) sends the measured pose; a joint
    measured past its range (a finger pressed open by an object, an encoder's offset) is held
    at the range's end instead: a position controller refuses a target outside it."""
    rig = Rig(legbot, legbot_policy, safety={"soft_start_s": 0.0})
    sig = standing_signals(legbot)
    run_in(rig, sig)
    names = [j.name for j in legbot.spec.joints]
    calf = names.index("FL_calf_joint")
    past = {**sig, "joint_pos": sig["joint_pos"].copy()}
    past["joint_pos"][calf] = CALF_RANGE[1] + 0.05
    rig.step(past)
    rig.node.shutdown()
    got = rig.commands["command"].take()
    held = rig.side.command_of("command", got[-1])["q"]
    assert held[calf] == pytest.approx(CALF_RANGE[1])
    others = np.arange(len(names)) != calf
    assert np.allclose(held[others], sig["joint_pos"][others])


def test_a_fallen_robots_native_damping_keeps_its_targets_inside_the_ranges(legbot,
                                                                           legbot_policy):
    """Unitree LowCmd in DAMP (kp 0) each period: a hip resting past its range after a fall
    gets its range's end as q, like every other command (HIL's limits check reads q)."""
    rig = Rig(legbot, legbot_policy, interface="native", safety={"soft_start_s": 0.0})
    sig = standing_signals(legbot)
    run_in(rig, sig)
    calf = [j.name for j in legbot.spec.joints].index("FL_calf_joint")
    fallen = dict(sig, orientation=np.array([np.cos(0.6), np.sin(0.6), 0.0, 0.0]),
                  joint_pos=sig["joint_pos"].copy())
    fallen["joint_pos"][calf] = CALF_RANGE[1] + 0.05
    for _ in range(3):
        out = rig.step(fallen)
    assert rig.node.safety.mode is Mode.DAMP
    assert np.all(out["kp"] == 0.0) and bool(out["crc_ok"])
    assert out["q"][calf] == pytest.approx(CALF_RANGE[1])
    assert np.allclose(np.delete(out["q"], calf), np.delete(sig["joint_pos"], calf), atol=1e-6)
