"""The HIL pieces without processes or DDS: the simulated robot's drivers and safety, fault
injection, scenario and fault-plan validation, records, MCAP logs read back by rosbags, and the
message accounting of the report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch
from rosbags.highlevel import AnyReader

from simreal.deploy import codecs, px4, unitree
from simreal.deploy import messages as m
from simreal.hil.analysis import RunData, account, load
from simreal.hil.config import (
    FaultPlan,
    HilConfigError,
    load_faults,
    load_scenario,
)
from simreal.hil.faults import FaultyLink, SensorFaults, check_signals, clock_offset
from simreal.hil.mcap_log import LogMessage, message_definition, write_mcap
from simreal.hil.messages import String
from simreal.hil.record import EVENT, RECEIVED, SENT, RecordWriter, identity, read_records
from simreal.hil.robot import RobotSimConfig, SimRobot
from simreal.robots import load_robot_dir
from simreal.sim import rotors

ROOT = Path(__file__).resolve().parent.parent
CRAZYFLIE = ROOT / "robots" / "crazyflie"
GO2 = ROOT / "robots" / "go2"


@pytest.fixture(scope="module")
def crazyflie():
    return load_robot_dir(CRAZYFLIE)


@pytest.fixture(scope="module")
def go2():
    return load_robot_dir(GO2)


def _run(sim: SimRobot, steps: int, keep_alive: bool = True) -> list[str]:
    events = []
    for _ in range(steps):
        e = sim.step()
        if e:
            events.append(e)
        if keep_alive:
            sim.last_command_time = sim.time
    return events


# --- the simulated robot ---------------------------------------------------------------------
def test_rotor_model_is_the_training_task_s(crazyflie):
    """Two physics steps of the HIL motor lag end where the task's one exact control-period
    step ends (same first-order model, same thrust map)."""
    sim = SimRobot(crazyflie, "generic")
    rm = crazyflie.spec.rotor_model
    cmd = np.array([0.9, 0.2, 0.6, 0.4])
    sim.apply("command", codecs.multi_array(cmd, "rotor_speed_fraction"))
    _run(sim, crazyflie.spec.control.decimation)
    dt = 1.0 / crazyflie.spec.control.rate_hz
    task_speed = rotors.lag_step(torch.zeros(4, dtype=torch.float64),
                                 torch.tensor(cmd), rotors.lag_alpha(dt, rm.time_constant))
    np.testing.assert_allclose(sim.drive.speed, task_speed.numpy(), rtol=1e-12)
    np.testing.assert_allclose(sim.drive.thrust(), rm.max_thrust * sim.drive.speed ** 2)
    np.testing.assert_allclose(sim.data.ctrl[sim.drive.ids], sim.drive.thrust())


def test_quadrotor_rests_on_its_pad_until_the_rotors_lift_it(crazyflie):
    sim = SimRobot(crazyflie, "generic")
    start = sim.truth()["position"].copy()
    h = math.sqrt(crazyflie.spec.mass * 9.81 / (4 * crazyflie.spec.rotor_model.max_thrust))
    sim.apply("command", codecs.multi_array(np.full(4, 0.9 * h), "x"))
    assert _run(sim, 100) == []  # 81% of the weight: it stays on the pad
    np.testing.assert_allclose(sim.truth()["position"], start)
    sim.apply("command", codecs.multi_array(np.full(4, 1.05 * h), "x"))
    assert _run(sim, 100) == ["lift_off"]
    assert sim.truth()["position"][2] > start[2]


def test_joint_driver_is_the_mjcf_pd_at_500_hz(go2):
    """The HIL driver with robot.yaml's gains reproduces the MJCF's PD actuators exactly, at
    a physics (and PD) rate of 500 Hz or more; legged robots start standing on the floor."""
    sim = SimRobot(go2, "generic")
    assert sim.dt <= 0.002
    m_ = mujoco.MjModel.from_xml_path(str(go2.mjcf_path))
    m_.opt.timestep = sim.dt
    d = mujoco.MjData(m_)
    d.qpos[:] = sim.data.qpos
    mujoco.mj_forward(m_, d)
    geoms = [g for g in range(m_.ngeom) if m_.geom_bodyid[g] != 0]
    clearance = min(mujoco.mj_geomDistance(m_, d, g, 0, 1.0, None) for g in geoms)
    assert 0.0 < clearance < 0.002
    q0 = np.array([j.default for j in go2.spec.joints])
    sim.apply("command", codecs.multi_array(q0, "joint_position"))
    _run(sim, 500)
    for _ in range(500):
        mujoco.mj_step(m_, d)  # ctrl 0: the MJCF's PD to the default pose
    np.testing.assert_allclose(sim.data.qpos, d.qpos, atol=1e-9)


def test_driver_damps_when_commands_stop_and_recovers(go2):
    sim = SimRobot(go2, "native", RobotSimConfig(command_timeout_s=0.1, damping_kd=2.0))
    idx = sim.interface.index
    q0 = np.array([j.default for j in go2.spec.joints])
    sim.apply("lowcmd", unitree.low_cmd(idx, q0, np.full(12, 20.0), np.full(12, 0.5)))
    events = _run(sim, 100, keep_alive=False)
    assert events == ["failsafe"]
    assert 0.1 < sim.failsafe_after <= 0.1 + sim.dt + 1e-9
    np.testing.assert_array_equal(sim.drive.kp, 0.0)
    np.testing.assert_array_equal(sim.drive.kd, 2.0)
    assert sim.apply("lowcmd", unitree.low_cmd(idx, q0, np.full(12, 20.0), np.full(12, 0.5)))
    assert not sim.failsafe_active and sim.drive.kp[0] == 20.0


def test_lowcmd_with_a_wrong_crc_is_ignored(go2):
    sim = SimRobot(go2, "native")
    q0 = np.array([j.default for j in go2.spec.joints])
    cmd = unitree.low_cmd(sim.interface.index, q0 + 0.3, np.full(12, 20.0), np.full(12, 0.5))
    cmd.crc ^= 1
    assert not sim.apply("lowcmd", cmd)
    assert not sim.started and sim.commands_rejected == 1


def test_px4_obeys_motors_only_in_offboard_mode(crazyflie):
    sim = SimRobot(crazyflie, "native")
    motors = px4.actuator_motors(np.full(4, 0.5), [0, 1, 2, 3], 1)
    assert not sim.apply("actuator_motors", motors)  # no offboard heartbeat yet
    assert sim.apply("offboard_control_mode", px4.offboard_control_mode(1))
    assert sim.apply("actuator_motors", motors)
    np.testing.assert_allclose(sim.drive.command, 0.5)
    stop = px4.actuator_motors(None, [0, 1, 2, 3], 2)  # NaN: motors stopped
    assert sim.apply("actuator_motors", stop)
    np.testing.assert_array_equal(sim.drive.command, 0.0)


def test_snapshot_resumes_the_same_motion(crazyflie):
    sim = SimRobot(crazyflie, "generic")
    sim.apply("command", codecs.multi_array(np.full(4, 0.8), "x"))
    _run(sim, 20)
    snap = json.loads(json.dumps(sim.snapshot()))
    _run(sim, 20)
    other = SimRobot(crazyflie, "generic")
    other.restore(snap)
    other.started, other.last_command_time = True, other.time
    _run(other, 20)
    np.testing.assert_allclose(other.data.qpos, sim.data.qpos)


# --- fault injection ---------------------------------------------------------------------------
def _plan(*faults, seed: int = 0) -> FaultPlan:
    return FaultPlan.model_validate({"seed": seed, "faults": list(faults)})


class _Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _link(plan: FaultPlan, clock: _Clock | None = None) -> tuple[FaultyLink, list]:
    events: list = []
    link = FaultyLink(plan, 0, lambda kind, **f: events.append((kind, f)), lambda: 1.0,
                      clock or _Clock())
    return link, events


def _send(link: FaultyLink, n: int, clock: _Clock | None = None, gap: float = 0.0
          ) -> list[int]:
    out: list[int] = []
    for i in range(n):
        msg = m.Bool(bool(i % 2))
        link.send("/t", msg, msg.serialize() + bytes([i % 256]), lambda _m, i=i: out.append(i))
        if clock is not None:
            clock.t += gap
    return out


def _drain(link: FaultyLink, clock: _Clock, seconds: float) -> None:
    for _ in range(int(seconds / 0.001)):
        clock.t += 0.001
        link.pump()


def test_drops_are_seeded_and_at_their_rate():
    plan = _plan({"kind": "drop", "rate": 0.3, "direction": "state"}, seed=7)
    a, events = _link(plan)
    b, _ = _link(plan)
    got_a, got_b = _send(a, 2000), _send(b, 2000)
    assert got_a == got_b  # the same fates in every run
    dropped = 2000 - len(got_a)
    assert abs(dropped - 600) < 5 * math.sqrt(2000 * 0.3 * 0.7)
    assert a.state.counts["dropped"] == dropped == sum(k == "link_drop" for k, _ in events)
    other, _ = _link(_plan({"kind": "drop", "rate": 0.3, "direction": "state"}, seed=8))
    assert _send(other, 2000) != got_a
    commands, _ = _link(plan)  # a state-only fault leaves commands alone
    assert len(commands.receive("/c", [m.Bool(True)] * 50)) == 50


def test_delay_keeps_order_and_reorder_and_duplicates_do_not():
    clock = _Clock()
    link, _ = _link(_plan({"kind": "delay", "delay_s": 0.01, "jitter_s": 0.008}), clock)
    out = _send(link, 40, clock, gap=0.001)  # a message every ms, jitter 8 ms
    assert out[:1] == [] or out[0] == 0
    assert len(out) < 40  # the last ones are still on their way
    held = link.command.schedule("/c", ("/c", m.Bool(True)), m.Bool(True), None)
    # at a stop, what the link holds is reported, commands included (one link_pending each)
    events: list = []
    link.state.report = link.command.report = lambda kind, **f: events.append((kind, f))
    assert link.report_pending() == 40 - len(out) + held == len(events)
    assert {k for k, _ in events} == {"link_pending"}
    assert [f["direction"] for _, f in events].count("command") == held == 1
    _drain(link, clock, 0.05)
    assert out == list(range(40))  # jitter, but no reordering
    assert link.report_pending() == 1  # only the command: nobody took it
    clock = _Clock()
    plan = _plan({"kind": "reorder", "probability": 0.3, "hold_s": 0.005},
                 {"kind": "duplicate", "probability": 0.2}, seed=1)
    link, events = _link(plan, clock)
    out = _send(link, 200, clock, gap=0.001)
    _drain(link, clock, 0.05)
    assert len(out) == 200 + link.state.counts["duplicated"] > 200
    assert sorted(set(out)) == list(range(200)) and out != sorted(out)
    assert link.state.counts["reordered"] == sum(k == "link_reorder" for k, _ in events) > 0


def test_sensor_faults_bias_noise_freeze_nan():
    plan = _plan({"kind": "sensor_bias", "signal": "a", "value": [1.0], "to_s": 1.0},
                 {"kind": "sensor_noise", "signal": "b", "std": 0.5, "index": [1]},
                 {"kind": "sensor_freeze", "signal": "c", "from_s": 1.0, "to_s": 2.0},
                 {"kind": "nan_burst", "signal": "d", "from_s": 3.0, "to_s": 3.5}, seed=3)
    f, g = SensorFaults(plan), SensorFaults(plan)

    def sig(x: float) -> dict[str, np.ndarray]:
        return {k: np.full(3, x) for k in "abcd"}

    out = f(sig(0.0), 0.5)
    np.testing.assert_array_equal(out["a"], 1.0)
    assert out["b"][0] == 0.0 and out["b"][1] != 0.0
    np.testing.assert_array_equal(g(sig(0.0), 0.5)["b"], out["b"])  # seeded
    assert f(sig(5.0), 1.5)["c"][0] == 5.0 and f(sig(6.0), 1.9)["c"][0] == 5.0  # frozen
    assert f(sig(7.0), 2.5)["c"][0] == 7.0  # released
    assert np.isnan(f(sig(0.0), 3.2)["d"]).all() and not np.isnan(f(sig(0.0), 3.6)["d"]).any()
    assert clock_offset(_plan({"kind": "clock_jump", "at_s": 2, "jump_s": 10}))(2.5) == 10


def test_sensor_faults_must_name_published_signals():
    plan = _plan({"kind": "nan_burst", "signal": "joint_pos", "index": [12]},
                 {"kind": "sensor_bias", "signal": "altitude", "value": [1.0]})
    with pytest.raises(HilConfigError) as err:
        check_signals(plan, ["joint_pos", "orientation"], {"joint_pos": 12}, "plan.yaml")
    text = str(err.value)
    assert "plan.yaml" in text and "faults[0].index" in text and "faults[1].signal" in text


# --- configuration files -------------------------------------------------------------------------
def test_scenario_and_fault_errors_name_file_and_field(tmp_path):
    bad = tmp_path / "walk.yaml"
    bad.write_text("duration_s: 5\ncommands:\n  - {at_s: 1, velocity: [0.5, 0, 0], speed: 2}\n")
    with pytest.raises(HilConfigError, match=r"walk.yaml: commands\[0\].speed: Extra inputs"):
        load_scenario(bad)
    bad.write_text("duration_s: 5\nnode: {trigger: sometimes}\n")
    with pytest.raises(HilConfigError, match=r"walk.yaml: node: .*trigger"):
        load_scenario(bad)
    bad.write_text("duration_s: 5\ncommands: [{at_s: 9, velocity: [0, 0, 0]}]\n")
    with pytest.raises(HilConfigError, match=r"commands\[0\].at_s after duration_s"):
        load_scenario(bad)
    faults = tmp_path / "f.yaml"
    faults.write_text("faults:\n  - {kind: drop, rate: 1.5}\n")
    with pytest.raises(HilConfigError, match=r"f.yaml: faults\[0\].rate: Input should be less"):
        load_faults(faults)
    faults.write_text("faults:\n  - {kind: earthquake}\n")
    with pytest.raises(HilConfigError, match=r"f.yaml: faults\[0\]: .*earthquake"):
        load_faults(faults)
    faults.write_text("faults:\n  - {kind: delay, delay_s: 0.02, from_s: 3, to_s: 2}\n")
    with pytest.raises(HilConfigError, match=r"to_s 2.0 must be after from_s 3.0"):
        load_faults(faults)
    assert load_scenario(ROOT / "tests/assets/hil/hover.yaml").name == "hover"
    for f in (ROOT / "tests/assets/hil").glob("*.yaml"):  # the shipped ones all load
        is_plan = "faults:" in f.read_text()
        assert (load_faults if is_plan else load_scenario)(f) is not None


# --- records, MCAP ------------------------------------------------------------------------------
def _samples() -> list:
    q = np.array([0.9, 0.1, -0.2, 0.3]) / np.linalg.norm([0.9, 0.1, -0.2, 0.3])
    sig = {"joint_pos": np.linspace(-1, 1, 12), "joint_vel": np.linspace(2, 3, 12),
           "joint_effort": np.linspace(-5, 5, 12), "orientation": q,
           "angular_velocity": np.array([0.1, -0.2, 0.3]),
           "linear_acceleration": np.array([0.0, 0.1, 9.8]),
           "position": np.array([1.0, -2.0, 0.5]), "linear_velocity": np.array([0.3, 0.2, 0.1])}
    idx = list(range(12))
    return [
        codecs.joint_state([f"j{i}" for i in range(12)], sig["joint_pos"], sig["joint_vel"],
                           sig["joint_effort"], 12.25),
        codecs.imu(q, sig["angular_velocity"], sig["linear_acceleration"], 12.5),
        codecs.odometry(sig["position"], q, sig["linear_velocity"], sig["angular_velocity"], 13.0),
        codecs.multi_array(np.linspace(0, 1, 12), "joint_position"),
        m.Twist(m.Vector3(0.5, 0.0, 0.0), m.Vector3(0.0, 0.0, 0.2)),
        m.PointStamped(m.Header(codecs.stamp(14.0), "world"), m.Point(0.0, 0.0, 1.0)),
        m.Bool(True),
        unitree.low_state(sig, idx, 77),
        unitree.low_cmd(idx, sig["joint_pos"], np.full(12, 20.0), np.full(12, 0.5)),
        px4.vehicle_odometry(sig, 123456),
        px4.actuator_motors(np.array([0.5, 0.6, 0.7, 0.8]), [0, 1, 2, 3], 123457),
        px4.offboard_control_mode(123458),
        String('{"event": "mode"}'),
    ]


def _plain(x):
    """Field values of one of our IDL messages or a rosbags message, as nested lists."""
    if hasattr(x, "__dataclass_fields__"):
        return {k: _plain(getattr(x, k)) for k in x.__dataclass_fields__
                if k not in ("__msgtype__", "sample_info")}
    if isinstance(x, bytes):  # cyclonedds gives uint8 arrays as bytes
        return list(x)
    if isinstance(x, np.ndarray | list | tuple):
        return [_plain(v) for v in x]
    if isinstance(x, float | np.floating):
        return None if math.isnan(x) else float(x)
    return x.item() if isinstance(x, np.generic) else x


def test_mcap_is_read_back_by_rosbags_equal_to_what_was_sent(tmp_path):
    msgs = _samples()
    topics = [f"/t{i}" for i in range(len(msgs))]
    log = [LogMessage(t, type(x), "sensor", 1000 + i, 900 + i, x.serialize())
           for i, (t, x) in enumerate(zip(topics, msgs, strict=True))]
    path = tmp_path / "run.mcap"
    assert write_mcap(path, reversed(log)) == len(msgs)
    assert "MSG: std_msgs/Header" in message_definition(m.JointState)
    assert "MSG: unitree_go/MotorCmd" in message_definition(unitree.LowCmd)
    with AnyReader([path]) as reader:
        conns = {c.topic: c for c in reader.connections}
        assert [conns[t].msgtype for t in topics] == [m.ros_type(type(x)) for x in msgs]
        got = {c.topic: (t, reader.deserialize(raw, c.msgtype))
               for c, t, raw in reader.messages()}
    for i, (topic, sent) in enumerate(zip(topics, msgs, strict=True)):
        t, msg = got[topic]
        assert t == 1000 + i
        mine = _plain(type(sent).deserialize(sent.serialize()))  # float32 fields as on the wire
        assert _plain(msg) == mine, topic


def test_records_round_trip_and_a_truncated_tail_is_ignored(tmp_path):
    path = tmp_path / "node-0.rec"
    rec = RecordWriter(path, "node-0")
    js = _samples()[0]
    rec.sent("/joint_states", js, js.serialize(), t_ns=5)
    rec.received("/joint_states", js, t_ns=7)
    rec.event("mode", new="damp")
    rec.close()
    with open(path, "ab") as f:
        f.write(b"\x40\x00\x00\x00partial")  # a record cut short (a killed process)
    recs = list(read_records(path))
    kinds = [r.kind for r in recs if r.kind in (SENT, RECEIVED, EVENT)]
    assert kinds == [EVENT, SENT, RECEIVED, EVENT]
    sent = next(r for r in recs if r.kind == SENT)
    got = next(r for r in recs if r.kind == RECEIVED)
    assert sent.topic == "/joint_states" and sent.type == "sensor_msgs/msg/JointState"
    assert sent.key == got.key == identity(m.JointState.deserialize(sent.payload))
    assert m.JointState.deserialize(sent.payload) == js


def test_identity_survives_the_wire_for_native_messages():
    for msg in _samples():
        data = msg.serialize()
        assert identity(msg, data) == identity(type(msg).deserialize(data)), type(msg)


def test_accounting_balances_every_topic(tmp_path):
    """sent = received + dropped + unconnected (+ superseded + lost); identical repeated
    messages are told apart by time only as far as counts go."""
    robot = RecordWriter(tmp_path / "robot-0.rec", "robot-0")
    node = RecordWriter(tmp_path / "node-0.rec", "node-0")
    states = [codecs.odometry(np.zeros(3), np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3),
                              float(i)) for i in range(10)]
    for i, s in enumerate(states):
        robot.sent("/odom", s, s.serialize(), t_ns=100 * i)
    robot.event("link_drop", topic="/odom", key=identity(states[3]))
    for i in (1, 2, 4, 5, 6, 8):  # 0: before the node was up; 7: lost; 9: after it stopped
        node.received("/odom", states[i], t_ns=100 * i + 10)
    stop = m.Bool(True)
    for i in range(4):  # identical commands; the first before discovery
        node.sent("/stop", stop, stop.serialize(), t_ns=1000 + 100 * i)
    for i in range(1, 4):
        robot.received("/stop", stop, t_ns=1000 + 100 * i + 5)
    robot.close()
    node.close()
    data = load(tmp_path, 0)
    # the drop event's time is its write time: after every send here
    counts = account(data)
    odom = counts["/odom"]
    assert (odom["sent"], odom["received"], odom["dropped"], odom["unconnected"],
            odom["lost"]) == (10, 6, 1, 2, 1)
    stop_c = counts["/stop"]
    assert (stop_c["sent"], stop_c["received"], stop_c["unconnected"], stop_c["lost"]) == \
        (4, 3, 1, 0)
    assert isinstance(data, RunData)


def test_accounting_a_killed_senders_last_messages_are_not_lost(tmp_path):
    """DDS keeps order per writer: what a robot process sent just before it was killed and
    nobody got is unconnected, though its successor's later messages arrived; a gap inside
    one sender's stream is still lost."""
    robot0 = RecordWriter(tmp_path / "robot-0.rec", "robot-0")
    robot1 = RecordWriter(tmp_path / "robot-1.rec", "robot-1")
    node = RecordWriter(tmp_path / "node-0.rec", "node-0")
    states = _odoms(20)
    for i in range(10):  # robot-0 until it is killed; 9 never left it
        robot0.sent("/odom", states[i], states[i].serialize(), t_ns=100 * i)
    for i in range(10, 20):  # robot-1 after the restart; 14 vanishes
        robot1.sent("/odom", states[i], states[i].serialize(), t_ns=100 * i + 500)
    for i in [*range(9), *range(10, 14), *range(15, 20)]:
        t = 100 * i + (10 if i < 10 else 510)
        node.received("/odom", states[i], t_ns=t)
    for w in (robot0, robot1, node):
        w.close()
    c = account(load(tmp_path, 0))["/odom"]
    assert (c["sent"], c["received"], c["unconnected"], c["lost"]) == (20, 18, 1, 1)


def _odoms(n: int) -> list:
    return [codecs.odometry(np.zeros(3), np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3),
                            float(i)) for i in range(n)]


def test_accounting_under_link_delay_and_at_the_stop(tmp_path):
    """With a delayed link a message is superseded in a take after the one that follows its
    sending; one on its way when the receiver stopped is unconnected even if sent before its
    last receipt; what the link still held at the robot's stop is in_link; a message that
    vanished with no full take after it is still lost."""
    ms = 1_000_000
    robot = RecordWriter(tmp_path / "robot-0.rec", "robot-0")
    node = RecordWriter(tmp_path / "node-0.rec", "node-0")
    robot.topic("/odom", m.Odometry, "sensor")  # depth 5
    states = _odoms(30)
    for i, s in enumerate(states):  # every 10 ms, 20 ms of link delay
        robot.sent("/odom", s, s.serialize(), t_ns=10 * ms * i)
    # takes every 20 ms after a 20 ms delay: state i arrives at 10 i + 20 ms
    for i in range(0, 10):  # 0..9 taken, two a take
        node.received("/odom", states[i], t_ns=(10 * (i | 1) + 21) * ms)
    # the node stalls: states 10..16 arrive before its take at 190 ms; history 5: 12..16 taken
    # (10 and 11 superseded; the take right after 10's sending, at 111 ms, took 8 and 9)
    for i in range(12, 17):
        node.received("/odom", states[i], t_ns=190 * ms)
    # 17 vanishes: later takes hold two each, none full
    for i in range(18, 24):
        node.received("/odom", states[i], t_ns=(10 * (i | 1) + 21) * ms)
    # the node stops after its take at 251 ms (22, 23): 24 and 25 were sent before it, on
    # their way; 26..29 after; 28 and 29 were still in the robot's link at its stop
    for i in (28, 29):
        robot.event("link_pending", source="robot", topic="/odom",
                    key=identity(states[i]), direction="state")
    robot.close()
    node.close()
    counts = account(load(tmp_path, 0), in_flight_s=0.035)["/odom"]
    assert (counts["sent"], counts["received"], counts["superseded"], counts["lost"],
            counts["unconnected"], counts["in_link"]) == (30, 21, 2, 1, 4, 2)


def test_robot_server_publishes_obeys_and_shifts_its_clock(go2):
    """RobotServer over the in-process bus: state at its rate, commands obeyed, a clock jump
    in the Unitree tick (CRC renewed), all bounded to a fraction of a second."""
    import threading

    from simreal.deploy.transport import LocalBus
    from simreal.hil.server import RobotServer

    sim = SimRobot(go2, "native", RobotSimConfig(state_rate_hz=100))
    bus = LocalBus()
    states = bus.subscription("/lowstate", unitree.LowState)
    cmd = bus.publisher("/lowcmd", unitree.LowCmd)
    from simreal.hil.server import NullObserver

    class Count(NullObserver):
        sent_n = 0

        def sent(self, topic, msg, data):
            Count.sent_n += 1

    server = RobotServer(sim, bus, clock=lambda t: 10.0, observer=Count())
    q0 = np.array([j.default for j in go2.spec.joints])
    cmd.write(unitree.low_cmd(sim.interface.index, q0, np.full(12, 20.0), np.full(12, 0.5)))
    stop = threading.Event()
    summary = server.run(stop, max_s=0.3)
    got = states.take()
    assert summary["commands_applied"] == 1 and sim.started
    assert server.publish_every == 5  # 100 Hz on 500 Hz physics
    assert Count.sent_n == -(-summary["ticks"] // 5) > 0  # one state per 5 physics steps
    # the newest five: the subscription keeps the last 5 (sensor QoS); fewer only if a stall
    # let the robot publish fewer in its 0.3 s
    assert len(got) == min(5, Count.sent_n)
    assert all(unitree.crc_ok(s) for s in got)
    assert got[-1].tick >= 10_000  # ms: ten seconds ahead


def test_the_node_process_imports_neither_torch_nor_mujoco():
    """The HIL node process is deploy's node plus a recording tap: what runs on a robot
    computer, without the simulator's libraries."""
    import subprocess
    import sys

    code = ("import sys, hil.node_proc; bad = [m for m in ('torch', 'mujoco') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the robot did something; what the node sent -------------------------------------------------
def test_scenario_expect_has_the_standing_thresholds(tmp_path):
    from simreal.hil.config import ActivityCheck, CommandsCheck

    sc = load_scenario(ROOT / "tests/assets/hil/hover.yaml")
    assert sc.expect.activity == ActivityCheck() and sc.expect.commands == CommandsCheck()
    assert sc.expect.commands.max_nonfinite == 0
    assert sc.expect.commands.min_received_fraction == 0.5
    still = tmp_path / "still.yaml"
    still.write_text("duration_s: 2\nexpect: {activity: null, commands: {max_nonfinite: 3}}\n")
    sc = load_scenario(still)
    assert sc.expect.activity is None and sc.expect.commands.max_nonfinite == 3
    still.write_text("duration_s: 2\nexpect: {commands: {min_received_fraction: 1.5}}\n")
    with pytest.raises(HilConfigError, match=r"still.yaml: expect.commands.min_received_fraction"):
        load_scenario(still)
    still.write_text("duration_s: 2\nexpect: {activity: {min_travel_m: .nan}}\n")
    with pytest.raises(HilConfigError, match=r"expect.activity.min_travel_m: .*finite"):
        load_scenario(still)


HOVER = ROOT / "tests" / "assets" / "hover_crazyflie.onnx"
REACH = ROOT / "tests" / "assets" / "reach_panda.onnx"


def test_scenario_commands_are_checked_before_anything_starts(crazyflie, tmp_path):
    """Non-finite setpoints (the config base) and commands outside the policy's trained range
    (prepare, against the contract) are refused with the file and field named; nothing is
    written."""
    from simreal.hil.harness import prepare

    sc = tmp_path / "sp.yaml"
    for value, match in (("[.nan, 0, 1]", r"sp.yaml: commands\[0\].position\[0\]: .*finite"),
                         ("[0, .inf, 1]", r"sp.yaml: commands\[0\].position\[1\]: .*finite"),
                         ("[0, 0, 5]", r"sp.yaml: commands\[0\].position: outside the range "
                                       r"the policy was trained on \(target_position: \[2\] 5 "
                                       r"not in \[0, 2\]\)")):
        sc.write_text(f"duration_s: 2\ncommands: [{{at_s: 0, position: {value}}}]\n")
        with pytest.raises(ValueError, match=match):
            prepare(crazyflie, HOVER, sc, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    sc.write_text("duration_s: 2\ncommands: [{at_s: 0, position: [1, -1, 2]}]\n")  # the edge
    assert prepare(crazyflie, HOVER, sc, out=tmp_path / "run").scenario.commands
    panda = load_robot_dir(ROOT / "robots" / "panda")
    # pointing down, either sign of the quaternion: the node takes the side nearest the range
    for q in ("0, 1, 0, 0", "0, -1, 0, 0"):
        sc.write_text(f"duration_s: 2\ncommands: [{{at_s: 0, pose: [0.45, 0, 0.35, {q}]}}]\n")
        prepare(panda, REACH, sc, out=tmp_path / "p")
    sc.write_text("duration_s: 2\ncommands: [{at_s: 0, pose: [0.45, 0, 0.35, 1, 0, 0, 0]}]\n")
    with pytest.raises(ValueError, match=r"commands\[0\].pose: outside .*target_orientation"):
        prepare(panda, REACH, sc, out=tmp_path / "p")
    sc.write_text("duration_s: 2\ncommands: [{at_s: 0, pose: [0.9, 0, 0.35, 0, 1, 0, 0]}]\n")
    with pytest.raises(ValueError, match=r"commands\[0\].pose: outside .*target_position: "
                                         r"\[0\] 0.9 not in \[0.3, 0.6\]"):
        prepare(panda, REACH, sc, out=tmp_path / "p")


def test_intervals_length():
    from simreal.hil.analysis import _intervals_length

    assert _intervals_length([(0, 4), (6, 11)], [(0, 11)]) == 9
    assert _intervals_length([(0, 4), (2, 6)], [(1, 3), (5, 10)]) == 3
    assert _intervals_length([(0, 4)], []) == 0
    assert _intervals_length([(3, 2)], [(0, 10)]) == 0


def _synthetic_run(tmp_path: Path, *, policy_nan: int, state_nan_in_run: int, lifted: bool,
                   received_every: int, nan_sent: int = 0) -> tuple:
    """Records of a 2 s crazyflie run: a node at 100 Hz (its summary counting `policy_nan +
    state_nan_in_run` non-finite commands, `state_nan_in_run` of them periods whose state was
    non-finite while it ran), the robot receiving all but every `received_every`-th command."""
    import time
    from types import SimpleNamespace

    from simreal.hil.analysis import load, node_runs
    from simreal.hil.config import Scenario

    t0 = time.time_ns()
    ms = 1_000_000
    robot = RecordWriter(tmp_path / "robot-0.rec", "robot-0")
    node = RecordWriter(tmp_path / "node-0.rec", "node-0")
    robot.event("robot_config", source="robot", physics_dt=0.005, command_timeout_s=0.5)
    node.event("node_config", source="node", rate_hz=100.0, watchdog_periods=5,
               soft_start_s=1.0, topics={"command": "/rotor_commands"})
    node.event("mode", source="node", cycle=100, node_cycle=100, old="soft_start", new="run",
               reason="soft start complete")
    for i in range(200):
        n = min(max(0, i - 149), state_nan_in_run)  # the state non-finite in periods 150..
        node.cycle(cycle=i + 1, ready=True, fresh=True, stale=0, mode="run" if i >= 100
                   else "soft_start", published=i + 1, nonfinite_state=n)
        speed = np.full(4, np.nan) if i < nan_sent else np.full(4, 0.6)
        cmd = codecs.multi_array(speed, "rotor_speed_fraction")
        node.sent("/rotor_commands", cmd, cmd.serialize(), t_ns=t0 + 10 * ms * i + ms)
        if i % received_every:
            robot.received("/rotor_commands", cmd, t_ns=t0 + 10 * ms * i + 2 * ms)
    if lifted:
        robot.event("lift_off", source="robot", robot_time=0.3)
    node.event("node_summary", source="node", nonfinite_commands=policy_nan + state_nan_in_run)
    robot.close()
    node.close()
    data = load(tmp_path, t0)
    account(data)
    setup = SimpleNamespace(robot=load_robot_dir(CRAZYFLIE), real_robot=False,
                            scenario=Scenario(duration_s=2.0))
    return setup, data, node_runs(data)


def test_activity_and_command_checks_of_a_run(tmp_path):
    from simreal.hil.analysis import activity_checks, command_checks

    (tmp_path / "a").mkdir()
    setup, data, runs = _synthetic_run(tmp_path / "a", policy_nan=0, state_nan_in_run=3,
                                       lifted=True, received_every=4)
    metrics: dict = {}
    left, moved = activity_checks(setup, data, runs, {}, metrics)
    assert left["passed"] is True and left["run_at_s"] is not None
    assert moved["passed"] is True and "lifted off" in moved["statement"]
    finite, received = command_checks(setup, data, runs, metrics)
    # the three non-finite states are the watchdog's, not the policy's
    assert finite["passed"] is True and finite["policy_nonfinite"] == {"node-0": 0}
    assert received["passed"] is True
    assert received["fractions"]["/rotor_commands"] == pytest.approx(150 / 200, abs=0.02)


def test_a_policy_that_never_drives_the_robot_fails_its_checks(tmp_path):
    from simreal.hil.analysis import activity_checks, command_checks

    (tmp_path / "b").mkdir()
    setup, data, runs = _synthetic_run(tmp_path / "b", policy_nan=200, state_nan_in_run=0,
                                       lifted=False, received_every=2, nan_sent=2)
    for run in runs.values():  # the node never reached RUN
        run["modes"] = []
    metrics: dict = {}
    left, moved = activity_checks(setup, data, runs, {}, metrics)
    assert left["passed"] is False and "never left its soft start" in left["statement"]
    assert moved["passed"] is False and "never lifted off" in moved["statement"]
    finite, received = command_checks(setup, data, runs, metrics)
    assert finite["passed"] is False and finite["policy_nonfinite"] == {"node-0": 200}
    assert finite["sent_nonfinite"] == 2 and finite["received_nonfinite"] == 1
    assert received["passed"] is True  # one in two: the floor
    setup.scenario = setup.scenario.model_copy(update={"expect": setup.scenario.expect.model_copy(
        update={"activity": None})})
    assert [c["passed"] for c in activity_checks(setup, data, runs, {}, {})] == [None, None]


def test_perception_stand_in_frames_latency_noise_and_frame():
    """The camera stand-in: frames at its rate on its own schedule, each published its latency
    after capture (uniform in the range, capture order kept), stamped at capture, noisy about
    the true pose; the pose in the base's frame."""
    from simreal.hil.perception import ObjectPoseCamera, ObjectPoseConfig, in_base_frame

    cam = ObjectPoseCamera(ObjectPoseConfig(rate_hz=30, latency_s=(0.03, 0.06),
                                            position_noise_m=0.002, seed=3))
    truth = np.array([0.5, 0.0, 0.2])
    quat = np.array([1.0, 0.0, 0.0, 0.0])
    out, t = [], 0.0
    while t < 10.0:  # the server's 2 ms ticks
        if cam.due(t):
            cam.capture(t, 1000.0 + t, truth, quat)
        out += [(t, msg) for msg in cam.ready(t)]
        t += 0.002
    assert 299 <= cam.captured <= 301  # 30 Hz over 10 s
    stamps = np.array([msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9 - 1000.0
                       for _, msg in out])
    latency = np.array([t for t, _ in out]) - stamps
    assert np.all(np.diff(stamps) > 0)  # capture order
    assert latency.min() >= 0.03 - 1e-9 and latency.max() <= 0.06 + 0.002 + 1e-9
    assert latency.std() > 0.005  # drawn per frame, not a constant
    pos = np.array([[p.pose.position.x, p.pose.position.y, p.pose.position.z] for _, p in out])
    assert np.allclose(pos.mean(0), truth, atol=5e-4)
    assert 0.0015 < pos.std(0).mean() < 0.0025
    q = np.array([[p.pose.orientation.w, p.pose.orientation.x, p.pose.orientation.y,
                   p.pose.orientation.z] for _, p in out])
    assert np.allclose(np.linalg.norm(q, axis=1), 1.0)
    # a base turned 90 degrees about z and 1 m along x: the world point (1, 1, 0) is at
    # (1, 0, 0) in it, and an object of the world's orientation is turned -90 degrees
    c = math.sqrt(0.5)
    p, r = in_base_frame(np.array([1.0, 1.0, 0.0]), quat, np.array([1.0, 0.0, 0.0]),
                         np.array([c, 0.0, 0.0, c]))
    assert np.allclose(p, [1.0, 0.0, 0.0]) and np.allclose(r, [c, 0.0, 0.0, -c])


def test_perception_stand_in_needs_an_object_and_a_sane_latency():
    from simreal.hil.perception import ObjectPoseConfig
    from simreal.hil.robot import HilRobotError

    with pytest.raises(ValueError, match="latency_s"):
        ObjectPoseConfig(latency_s=(0.06, 0.03))
    go2 = load_robot_dir(GO2)
    with pytest.raises(HilRobotError, match="robot.object_pose.*object_position"):
        SimRobot(go2, "generic", RobotSimConfig(object_pose=ObjectPoseConfig()))


def test_the_arm_robot_publishes_the_cube_it_holds_in_its_truth():
    """The panda's robot with the stand-in: /object_pose from the cube on the table, through
    RobotServer; the truth carries the cube's position for the lift check."""
    import threading

    from simreal.deploy.transport import LocalBus
    from simreal.hil.perception import ObjectPoseConfig
    from simreal.hil.server import RobotServer

    panda = load_robot_dir(ROOT / "robots" / "panda")
    sim = SimRobot(panda, "generic", RobotSimConfig(
        state_rate_hz=50, object_pose=ObjectPoseConfig(position_noise_m=0.0,
                                                       orientation_noise=0.0)))
    bus = LocalBus()
    poses = bus.subscription("/object_pose", m.PoseStamped)
    server = RobotServer(sim, bus)
    server.run(threading.Event(), max_s=0.3)
    got = poses.take()
    assert got, "no /object_pose in 0.3 s at 30 Hz"
    cube = np.array([got[-1].pose.position.x, got[-1].pose.position.y,
                     got[-1].pose.position.z])
    assert np.allclose(cube, [0.5, 0.0, 0.025], atol=1e-6)  # the MJCF's cube, at rest
    assert np.allclose(sim.truth()["object_position"], cube)
