"""The deploy node end to end over Cyclone DDS on loopback: a second participant plays the robot
through the robot side of the same interface (generic and native, legged and quadrotor), and
`simreal deploy` runs as a process that a SIGTERM stops with a damping command.

Every loop is bounded in count and time.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from simreal.deploy import dds
from simreal.deploy.app import prepare, run
from simreal.deploy.interfaces import Go2Native, JointGeneric, Px4Native, QuadGeneric
from simreal.deploy.limits import command_limits
from simreal.deploy.messages import Bool
from simreal.deploy.safety import Mode
from simreal.robots import load_robot_dir
from tests import test_node_fixtures as fx
from tests.test_node_fixtures import export_policy, standing_signals

legbot, legbot_policy = fx.legbot, fx.legbot_policy  # fixtures
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def loopback(monkeypatch):
    monkeypatch.setenv("CYCLONEDDS_URI", dds.LOOPBACK_CONFIG)


class DdsRobot:
    """The robot's side: publishes state, takes commands, over its own DDS participant."""

    def __init__(self, side, topics: dict[str, str], domain: int, rate_hz: float = 50.0):
        self.side, self.bus = side, dds.Transport(domain_id=domain)
        # a lock-step robot publishes at the policy's rate (a faster one makes the node damp)
        self.period, self.last_send = 1.0 / rate_hz, -1.0
        self.state = {s.key: self.bus.publisher(topics[s.key], s.type, s.qos)
                      for s in side.state_topics}
        self.cmd = {s.key: self.bus.subscription(topics[s.key], s.type, s.qos)
                    for s in side.command_topics}
        self.estop = self.bus.publisher(topics["estop"], Bool)
        self.main = side.command_topics[0].key

    def send(self, signals) -> None:
        time.sleep(max(0.0, self.last_send + self.period - time.monotonic()))
        self.last_send = time.monotonic()
        for key, msg in self.side.state_messages(signals):
            self.state[key].write(msg)

    def exchange(self, signals, timeout_s: float = 2.0) -> dict | None:
        """Publish a state and wait (bounded) for the command that answers it."""
        self.send(signals)
        if not self.cmd[self.main].wait(timeout_s):
            return None
        got = self.cmd[self.main].take()
        return self.side.command_of(self.main, got[-1])


def start_node(policy, robot, domain, **cfg):
    node = prepare(policy, robot, dds.Transport(domain_id=domain), {"trigger": "state", **cfg})
    stop = threading.Event()
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(run(node, 2000, stop)), daemon=True)
    thread.start()
    return node, stop, thread, result


def meet(robot_side: DdsRobot, signals, tries: int = 100):
    """Discovery: repeat the first state until a command answers (bounded)."""
    for _ in range(tries):
        out = robot_side.exchange(signals, timeout_s=0.1)
        if out is not None:
            return out
    raise AssertionError("the node never answered")


def test_legged_generic_over_dds_soft_start_estop_and_shutdown(legbot, legbot_policy):
    node, stop, thread, result = start_node(legbot_policy, legbot, 31,
                                            safety={"soft_start_s": 0.1})
    robot = DdsRobot(JointGeneric(legbot), node.topics, 31)
    sig = standing_signals(legbot)
    try:
        meet(robot, sig)
        for _ in range(20):
            assert robot.exchange(sig) is not None
        assert node.safety.mode is Mode.RUN
        robot.estop.write(Bool(True))
        damped = None
        for _ in range(20):
            damped = robot.exchange(sig)
            if node.safety.mode is Mode.ESTOP:
                break
        damped = robot.exchange(sig)
        assert node.safety.mode is Mode.ESTOP
        assert np.allclose(damped["q"], sig["joint_pos"])
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert result["mode"] == "estop"  # shutdown keeps a latched e-stop (it damps already)
    reasons = [c["reason"] for c in result["mode_changes"]]
    assert "soft start complete" in reasons and reasons[-1] == "e-stop input"
    final = robot.cmd["command"].take()
    assert len(final) >= 3 and np.allclose(final[-1].data, sig["joint_pos"])


def test_go2_native_over_dds_lowstate_to_lowcmd_with_crc(legbot, legbot_policy):
    node, stop, thread, _ = start_node(legbot_policy, legbot, 32, interface="native",
                                       safety={"soft_start_s": 0.0})
    lim = command_limits(legbot, node.runner.contract)
    robot = DdsRobot(Go2Native(legbot, lim.kp, lim.kd, 1.0), node.topics, 32)
    sig = standing_signals(legbot)
    try:
        out = meet(robot, sig)
        for _ in range(10):
            out = robot.exchange(sig)
        assert bool(out["crc_ok"]) and np.all(out["kp"] == 20.0)
        assert np.all(np.abs(out["q"] - sig["joint_pos"]) < 1.0)
        assert node.interface.crc_errors == 0
    finally:
        stop.set()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def hover_policy(tmp_path_factory):
    from simreal.api import make_env

    contract = make_env("quadrotor-hover", num_envs=1, seed=0).contract()
    return export_policy(contract, tmp_path_factory.mktemp("h") / "hover.onnx", hidden=(16,))


def _hovering():
    return {"position": np.array([0.0, 0.0, 1.0]), "orientation": np.array([1.0, 0, 0, 0]),
            "linear_velocity": np.zeros(3), "angular_velocity": np.zeros(3)}


@pytest.mark.parametrize("interface", ["generic", "native"])
def test_quadrotor_over_dds(hover_policy, interface):
    crazyflie = load_robot_dir(ROOT / "robots" / "crazyflie")
    domain = 33 if interface == "generic" else 34
    node, stop, thread, _ = start_node(hover_policy, crazyflie, domain, interface=interface,
                                       safety={"soft_start_s": 0.0})
    side = QuadGeneric(crazyflie) if interface == "generic" else Px4Native(crazyflie)
    robot = DdsRobot(side, node.topics, domain)
    try:
        out = meet(robot, _hovering())
        for _ in range(5):
            out = robot.exchange(_hovering())
        assert out["rotor_speed"].shape == (4,)
        assert np.all((out["rotor_speed"] > 0) & (out["rotor_speed"] <= 1))
        if interface == "native":
            assert robot.cmd["offboard_control_mode"].take()[-1].direct_actuator
        robot.estop.write(Bool(True))
        for _ in range(20):
            out = robot.exchange(_hovering())
            if node.safety.mode is Mode.ESTOP:
                break
        out = robot.exchange(_hovering())
        assert np.all(out["rotor_speed"] == 0.0)  # motors stop (PX4: NaN, disarmed)
    finally:
        stop.set()
        thread.join(timeout=10)


def test_simreal_deploy_process_runs_and_stops_on_sigterm_with_damping(legbot, legbot_policy,
                                                                       tmp_path):
    cfg = tmp_path / "node.yaml"
    cfg.write_text("status_period_s: 0.2\nsafety: {soft_start_s: 0.1}\n")
    env = dict(os.environ, CYCLONEDDS_URI=dds.LOOPBACK_CONFIG)
    proc = subprocess.Popen(
        [sys.executable, "-m", "simreal.cli", "deploy", str(legbot_policy), "--robot",
         str(legbot.directory), "--transport", "dds", "--domain-id", "35", "--config",
         str(cfg)], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    topics = {s.key: s.default for s in
              JointGeneric.state_topics + JointGeneric.command_topics}
    topics.update(estop="/simreal/estop")
    robot = DdsRobot(JointGeneric(legbot), topics, 35)
    sig = standing_signals(legbot)
    try:
        got, end = [], time.monotonic() + 30.0
        while len(got) < 60 and time.monotonic() < end:  # 50 Hz node: about 1.2 s
            robot.send(sig)
            time.sleep(0.02)
            got += robot.cmd["command"].take()
        assert len(got) >= 60, proc.stderr.read() if proc.poll() is not None else "no commands"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, err
    final = []
    for _ in range(100):  # delivery is asynchronous: the last command may land after the exit
        final += robot.cmd["command"].take()
        if final and np.allclose(final[-1].data, sig["joint_pos"]):
            break
        time.sleep(0.01)
    assert final and np.allclose(final[-1].data, sig["joint_pos"])  # damping: hold the pose
    assert "SIGTERM: stopping" in err and "status: mode=run" in err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["mode"] == "damp" and summary["loop"]["cycles"] >= 60
    assert summary["mode_changes"][-1]["reason"] == "shutdown"
