"""Hardware-in-the-loop runs: the robot process and the deploy node process over Cyclone DDS on
loopback (the harness sets the loopback-only configuration for every participant), each run a
short scenario with faults, bounded by its duration and the harness's start-up timeouts; the
harness kills what it started, even when a run fails.

The assertions count control periods, messages and robot-time steps, never wall-clock time.
Policies are test assets (tests/assets/README.md says how each is made), except the go2
stand-still policy, a zero-action policy made here from the current go2 contract (no training)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mcap.reader import make_reader
from rosbags.highlevel import AnyReader

from simreal.deploy.contract import ContractError
from simreal.deploy.policy import OnnxPolicy
from simreal.hil.harness import run_hil
from simreal.robots import load_robot_dir

pytestmark = pytest.mark.hil

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "tests" / "assets"
HIL = ASSETS / "hil"
HOVER = ASSETS / "hover_crazyflie.onnx"
TRACK = ASSETS / "track_crazyflie.onnx"
GO2_WALK = ASSETS / "go2_walk.onnx"
REACH = ASSETS / "reach_panda.onnx"
LIFT = ASSETS / "lift_panda.onnx"


def _robot_for(name: str, asset: Path):
    """robots/NAME, which the policy asset must still fit."""
    robot = load_robot_dir(ROOT / "robots" / name)
    problems = OnnxPolicy(asset).contract.mismatches(robot)
    assert not problems, (f"{asset} no longer fits robots/{name} ({problems}); regenerate "
                          "it as tests/assets/README.md says")
    return robot


@pytest.fixture(scope="module")
def crazyflie():
    return _robot_for("crazyflie", HOVER)


@pytest.fixture(scope="module")
def go2():
    return load_robot_dir(ROOT / "robots" / "go2")


@pytest.fixture(scope="module")
def go2_stand(tmp_path_factory, go2) -> Path:
    """A policy that always outputs zero (the default pose) with the current go2 contract."""
    from simreal import make_env
    from simreal.train.export import export_onnx

    contract = make_env("go2-flat", num_envs=1, seed=0).contract()

    class Zero(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.out = torch.nn.Linear(contract.obs_dim, contract.action_dim)
            with torch.no_grad():
                self.out.weight.zero_()
                self.out.bias.zero_()

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.out(obs)

    return export_onnx(Zero(), contract, tmp_path_factory.mktemp("go2") / "stand.onnx")


def _run(robot, policy, out: Path, scenario=HIL / "hover.yaml", faults=None, plots=False,
         **kw) -> dict:
    """One run; the figures (seconds of matplotlib) only where a test looks at them."""
    report = run_hil(robot, policy, scenario, faults, out, progress=False, plots=plots, **kw)
    assert (out / "report.json").is_file() and (out / "run.mcap").is_file()
    return report


def _check(report: dict, name: str) -> dict:
    return next(c for c in report["checks"] if c["name"] == name)


STANDING = ("limits", "watchdog", "resume", "completeness", "left_soft_start", "moved",
            "finite_commands", "commands_received")


def _standing_checks_hold(report: dict) -> None:
    """The standing checks never fail (limits, watchdog and resume may be not exercised)."""
    for name in STANDING:
        c = _check(report, name)
        assert c["passed"] is not False, c


def _balanced(counts: dict) -> None:
    for topic, c in counts.items():
        assert c["sent"] == (c["received"] + c["dropped"] + c["in_link"] + c["unconnected"]
                             + c["superseded"] + c["lost"] + c["unrecorded"]), topic
        assert c["logged"] == c["sent"] and c["lost"] == 0, (topic, c)


def test_quadrotor_holds_a_hover(crazyflie, tmp_path):
    report = _run(crazyflie, HOVER, tmp_path / "run", plots=True)
    assert report["passed"], [c for c in report["checks"] if c["passed"] is False]
    assert report["metrics"]["hover"]["max_error_m"] < 0.1
    assert report["dds"]["network"] == "loopback only"
    _balanced(report["messages"])
    for png in ("tracking", "joints", "latency", "safety"):
        assert (tmp_path / "run" / report["files"][png]).stat().st_size > 10_000
    # every message is in the MCAP, on ROS 2 topic names, and rosbags decodes it
    with AnyReader([tmp_path / "run" / "run.mcap"]) as reader:
        per_topic = {c.topic: c.msgcount for c in reader.connections}
        for conn, _, raw in reader.messages():
            if conn.topic == "/odom":
                odom = reader.deserialize(raw, conn.msgtype)
                assert math.isfinite(odom.pose.pose.position.z)
    for topic in ("/odom", "/rotor_commands", "/target_position"):
        assert per_topic[topic] == report["messages"][topic]["sent"] > 0
    assert per_topic["/hil/ground_truth"] > 500 and per_topic["/hil/events"] > 3


# The hover policy is trained with command latency, observation age and command loss
# (sim/tasks/quadrotor_hover.py, TRAIN_LINK), so it holds the hover, not only the safety
# rules, through the link's faults, in lock-step and on the node's own timer.
@pytest.mark.parametrize("scenario,faults", [
    ("hover.yaml", "delay20.yaml"),
    ("hover_timer.yaml", None),
    ("hover_timer.yaml", "delay20.yaml"),
])
def test_quadrotor_holds_a_hover_through_the_link(crazyflie, tmp_path, scenario, faults):
    report = _run(crazyflie, HOVER, tmp_path / "run", HIL / scenario,
                  HIL / faults if faults else None)
    assert report["passed"], [c for c in report["checks"] if c["passed"] is False]
    assert _check(report, "moved")["lift_off_s"], "the hover must start with a take-off"
    assert report["metrics"]["hover"]["max_error_m"] < 0.1
    _balanced(report["messages"])


# Under 30% loss each way (about half the periods without a fresh command, in lock-step) the
# hover holds hover.yaml's 0.1 m too: 8 of 8 lock-step and 2 of 2 timer runs here with this
# asset (max 0.051-0.076 m; docs/HIL.md). The previous asset missed it in 2 of 9 (a ~1 Hz
# lateral oscillation grew to 0.106 and 0.124 m), so a miss gets one rerun.
@pytest.mark.flaky(reruns=1)
@pytest.mark.parametrize("scenario", ["hover.yaml", "hover_timer.yaml"])
def test_quadrotor_holds_a_hover_under_message_loss(crazyflie, tmp_path, scenario):
    report = _run(crazyflie, HOVER, tmp_path / "run", HIL / scenario, HIL / "drop30.yaml")
    assert report["passed"], [c for c in report["checks"] if c["passed"] is False]
    assert _check(report, "moved")["lift_off_s"], "the hover must start with a take-off"
    assert report["metrics"]["hover"]["max_error_m"] < 0.1
    assert report["dropouts"], "30% loss each way leaves periods without fresh state"
    _balanced(report["messages"])


@pytest.mark.parametrize("faults", [None, "delay20.yaml"])
def test_quadrotor_flies_a_figure_eight_from_a_take_off(crazyflie, tmp_path, faults):
    """quadrotor-track's policy takes off from a pad to a setpoint, then follows the moving
    reference the harness sends on /reference: the second lap within 0.1 m on average, also
    with 20 ms of delay each way."""
    report = _run(crazyflie, TRACK, tmp_path / "run", HIL / "track.yaml",
                  HIL / faults if faults else None)
    assert report["passed"], [c for c in report["checks"] if c["passed"] is False]
    assert _check(report, "moved")["lift_off_s"], "the run must start with a take-off"
    track = report["metrics"]["track"]
    assert track["samples"] > 400 and track["mean_error_m"] < 0.1
    _balanced(report["messages"])


@pytest.fixture(scope="module")
def go2_walk(go2) -> Path:
    if not GO2_WALK.exists():
        pytest.skip("no go2 walking policy asset (tests/assets/README.md)")
    try:
        OnnxPolicy(GO2_WALK).contract.check(go2)
    except ContractError as exc:
        pytest.fail(f"{GO2_WALK} no longer fits robots/go2: {exc}; regenerate it as "
                    "tests/assets/README.md says")
    return GO2_WALK


def _kept_walking(report: dict, min_speed: float | None) -> None:
    """Never damped (the node damps on a fall: its tilt limit), and walking forward at more
    than `min_speed` where given."""
    modes = [e for e in report["safety_events"] if e["event"] == "mode"]
    assert [e["new"] for e in modes] == ["run"], modes  # soft start, then run
    if min_speed is not None:
        assert report["metrics"]["velocity"]["mean_forward_m_s"] > min_speed


# The go2 walking policy has a rare failure of its own: about one run in thirty here (once in
# CI), a stumble soon after it starts leaves it stepping in place at ~0.02 m/s, upright and in
# RUN, for the rest of the run (docs/HIL.md). Tests that need it to walk get one rerun; two
# stalls in a row fail.
WALK_RERUNS = pytest.mark.flaky(reruns=1)


@WALK_RERUNS
def test_thirty_percent_drop(go2, go2_walk, tmp_path):
    """30% of the messages lost both ways while the go2 walks: the accounting balances, drops
    are at their rate, the policy keeps running through every dropout shorter than K."""
    report = _run(go2, go2_walk, tmp_path / "run", HIL / "walk.yaml", HIL / "drop30.yaml")
    _standing_checks_hold(report)
    _balanced(report["messages"])
    for topic in ("/lowstate", "/lowcmd"):
        c = report["messages"][topic]
        offered = c["sent"] - c["unconnected"]  # what went through the faulty link
        assert abs(c["dropped"] - 0.3 * offered) < 5 * math.sqrt(offered * 0.21), (topic, c)
    assert len(report["dropouts"]) > 10
    assert _check(report, "resume")["passed"] is True
    _kept_walking(report, 0.2)


@WALK_RERUNS
def test_twenty_ms_delay_with_jitter(go2, go2_walk, tmp_path):
    report = _run(go2, go2_walk, tmp_path / "run", HIL / "walk.yaml", HIL / "delay20.yaml")
    _standing_checks_hold(report)
    _balanced(report["messages"])
    # what the robot reported still held in its link at its stop is what the accounting found
    # there (no duplicates in this plan: each held copy is a message nobody got)
    held = report["timing"]["robot"]["robot-0"]["link"]["pending_at_stop"]
    assert held == sum(c["in_link"] for c in report["messages"].values())
    lat = report["latency_ms"]
    assert lat["state_to_node_ms"]["p50"] >= 15.0  # 20 +- 5 ms injected (a lower bound)
    assert lat["command_to_robot_ms"]["p50"] >= 15.0
    # jitter but no reordering: the node took the robot's states in the order they were sent
    with open(tmp_path / "run" / "run.mcap", "rb") as f:
        rows = [(msg.publish_time, msg.log_time) for _, ch, msg in
                make_reader(f).iter_messages(topics=["/lowstate"])]
    received = sorted(r for r in rows if r[1] != r[0])
    assert len(received) > 100
    assert all(b[1] >= a[1] for a, b in zip(received, received[1:], strict=False))
    # about 50 ms from state to command, past training's 0-30 ms: the gait alone ran ~0.67 m/s
    # for 0.5 here (error 0.17); the contract's command feedback trims it back (0.51 m/s, error
    # 0.079 measured 2026-12-07; docs/HIL.md), inside walk.yaml's 0.15
    _kept_walking(report, None)
    assert report["metrics"]["velocity"]["samples"] > 400
    assert report["metrics"]["velocity"]["mean_error_m_s"] < 0.15
    assert _check(report, "velocity")["passed"] is True


def test_nan_burst(crazyflie, tmp_path):
    """A NaN burst shorter than the watchdog holds the last safe command; a longer one damps by
    the K-th period; the policy runs again afterwards."""
    report = _run(crazyflie, HOVER, tmp_path / "run", faults=HIL / "nan_burst.yaml")
    _standing_checks_hold(report)
    k = _check(report, "watchdog")["watchdog_periods"][0]
    drops = [d for d in report["dropouts"] if d["mode_before"] in ("run", "soft_start")]
    # a loaded machine can add a stray one-period dropout next to a burst: each burst's dropout
    # is the longest one starting near it
    short = max((d for d in drops if 2.9 < d["t"] < 3.2), key=lambda d: d["stale_periods"])
    long_ = max((d for d in drops if 5.9 < d["t"] < 6.38), key=lambda d: d["stale_periods"])
    assert short["stale_periods"] < k and short["damped_after_periods"] is None
    assert short["resumed_after_periods"] == 0
    assert long_["stale_periods"] >= k
    assert long_["damped_after_periods"] <= k
    assert long_["resumed_after_periods"] is not None
    node = report["timing"]["node"]["node-0"]
    assert node["cycles"] > 500
    # while it holds, the rotors get the last command's collective: equal speeds, no torque
    held = [max(c) - min(c) for t, c in _rotor_commands(tmp_path / "run" / "run.mcap")
            if 6.05 < t < 6.2]
    assert len(held) > 10 and max(held) < 1e-9, held


def _rotor_commands(mcap: Path) -> list[tuple[float, list[float]]]:
    """(s since the first, the four rotor speeds) of each /rotor_commands message."""
    with AnyReader([mcap]) as reader:
        conns = [c for c in reader.connections if c.topic == "/rotor_commands"]
        rows = [(t, list(reader.deserialize(raw, c.msgtype).data))
                for c, t, raw in reader.messages(connections=conns)]
    return [((t - rows[0][0]) / 1e9, c) for t, c in rows]


def test_nan_burst_on_the_go2_native_interface(go2, go2_stand, tmp_path):
    """A NaN burst in the go2's joint angles shorter than the watchdog passes without damping;
    a longer one damps by the K-th period and the policy runs again after its soft start."""
    report = _run(go2, go2_stand, tmp_path / "run", HIL / "go2_stand.yaml",
                  HIL / "nan_burst_go2.yaml")
    assert _check(report, "watchdog")["passed"] is True
    assert _check(report, "resume")["passed"] is True
    modes = [e["new"] for e in report["safety_events"] if e["event"] == "mode"]
    assert modes == ["run", "damp", "soft_start", "run"], modes
    limits = _check(report, "limits")
    assert limits["passed"] is True, limits["problems"]


def test_killing_the_node_makes_the_robot_damp_within_its_timeout(crazyflie, tmp_path):
    report = _run(crazyflie, HOVER, tmp_path / "run", faults=HIL / "node_crash.yaml")
    fs = _check(report, "robot_failsafe")
    assert fs["passed"] is True, fs
    crash = fs["crashes"][0]
    assert crash["since_last_command_s"] <= fs["timeout_s"] + 0.005 + 1e-9
    assert crash["failsafe_at_s"] > 4.0
    _standing_checks_hold(report)


def test_a_robot_restart_mid_run_is_survived(crazyflie, tmp_path):
    scenario = HIL / "hover_restart.yaml"
    report = _run(crazyflie, HOVER, tmp_path / "run", scenario, HIL / "robot_restart.yaml")
    assert report["passed"], [c for c in report["checks"] if c["passed"] is False]
    kinds = [(e["process"], e["event"]) for e in report["safety_events"]]
    assert ("robot-0", "process_kill") in kinds and ("robot-1", "started") in kinds
    modes = [e for e in report["safety_events"] if e["event"] == "mode"]
    restart = next(e["t"] for e in report["safety_events"] if e["event"] == "process_kill")
    assert any(e["new"] == "damp" and e["t"] > restart - 0.1 for e in modes)
    assert modes[-1]["new"] == "run" and modes[-1]["t"] > restart  # back in control
    assert report["metrics"]["hover"]["max_error_m"] < 0.1


def test_go2_native_node_restart_clock_jump_duplicates_reordering(go2, go2_stand, tmp_path):
    """Unitree LowState/LowCmd end to end with the stand-still policy and a push: PD at 500 Hz
    on the robot, every LowCmd inside the limits with its CRC; the node is killed (the driver
    damps within its timeout) and restarted (it takes over again); the robot's clock jumps
    back; the link duplicates and reorders."""
    report = _run(go2, go2_stand, tmp_path / "run", HIL / "go2_stand.yaml",
                  HIL / "go2_mixed.yaml")
    _standing_checks_hold(report)
    assert _check(report, "limits")["commands"] > 100
    config = next(r for r in _events(tmp_path / "run") if r.get("event") == "robot_config")
    assert config["physics_dt"] <= 0.002 and config["interface"] == "native"
    assert set(report["messages"]) >= {"/lowstate", "/lowcmd", "/cmd_vel"}
    assert any(e["event"] == "push" and e["t"] >= 2.5 for e in report["safety_events"])
    resume = _check(report, "resume")
    assert resume["node_restarts"] and resume["node_restarts"][0]["run_after_periods"]
    assert _check(report, "robot_failsafe")["passed"] is True
    events = [e["event"] for e in report["safety_events"] if e["process"] == "robot-0"]
    assert events.index("failsafe") < events.index("failsafe_cleared")  # node-1 took over
    link = report["timing"]["robot"]["robot-0"]["link"]
    assert link["state"]["duplicated"] > 0 and link["state"]["reordered"] > 0
    assert 0 < report["messages"]["/lowstate"]["duplicate_receipts"] <= link["state"]["duplicated"]
    assert report["timing"]["robot"]["robot-0"]["sensor_faults"]["SensorBias"] > 0
    with AnyReader([tmp_path / "run" / "run.mcap"]) as reader:
        conn = next(c for c in reader.connections if c.topic == "/lowcmd")
        assert conn.msgtype == "unitree_go/msg/LowCmd"
        raw = next(raw for _, _, raw in reader.messages(connections=[conn]))
        cmd = reader.deserialize(raw, conn.msgtype)
        assert cmd.head.tolist() == [0xFE, 0xEF] and cmd.motor_cmd[1].kp == 20.0
        conn = next(c for c in reader.connections if c.topic == "/lowstate")
        ticks = [reader.deserialize(raw, conn.msgtype).tick  # the tick jumped back 5 s
                 for _, _, raw in reader.messages(connections=[conn])]
    steps = np.diff(np.array(ticks, dtype=np.int64))
    steps = (steps + 2**31) % 2**32 - 2**31  # uint32 ticks: a step back wraps around
    back = np.flatnonzero(steps < -4000)
    assert len(back) >= 1
    # one jump: a message the link held back across it (reordering, 30 ms) adds one step
    # forward over the jump and a second one back, a few messages on
    assert len(back) - 1 == np.sum(steps > 4000) and back[-1] - back[0] <= 20


@WALK_RERUNS
def test_go2_walks_forward_at_half_a_metre_per_second(go2, go2_walk, tmp_path):
    report = _run(go2, go2_walk, tmp_path / "run", HIL / "walk.yaml")
    # the asset's own tracking at 0.5 m/s is 0.062 m/s mean error (simreal eval --tracking,
    # with its command feedback; docs/SIM2SIM.md): the node must not add more than a few cm/s
    assert report["metrics"]["velocity"]["mean_error_m_s"] < 0.15
    assert report["passed"], [c for c in report["checks"] if c["passed"] is False]


def test_cli_against_a_robot_it_did_not_start(crazyflie, tmp_path):
    """`simreal hil --real-robot`: the robot is someone else's process (here the HIL robot run
    alone, as `python -m simreal.hil.server`); the harness runs the node, the scenario and the
    report without robot-side records."""
    domain = 201 + os.getpid() % 30  # away from the harness's own choices (1..200)
    robot = subprocess.Popen([sys.executable, "-m", "simreal.hil.server", "--robot", "crazyflie",
                              "--domain-id", str(domain), "--state-rate-hz", "100",
                              "--max-s", "150"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out = tmp_path / "run"
        cli = subprocess.run([sys.executable, "-m", "simreal.cli", "hil", "--robot", "crazyflie",
                              "--policy", str(HOVER), "--scenario", str(HIL / "hover.yaml"),
                              "--real-robot", "--domain-id", str(domain), "--out", str(out),
                              "--no-plots"],
                             capture_output=True, text=True, timeout=150)
    finally:
        robot.terminate()
        robot.communicate(timeout=10)
    summary = json.loads(cli.stdout.strip().splitlines()[-1])
    report = json.loads((out / "report.json").read_text())
    assert report["real_robot"] and summary["out"] == str(out)
    assert summary["checks"]["limits"] and summary["checks"]["completeness"]
    odom, cmds = report["messages"]["/odom"], report["messages"]["/rotor_commands"]
    assert odom["sender"] == "(not recorded)" and odom["received"] == odom["logged"] > 300
    assert cmds["unrecorded"] == cmds["sent"] == cmds["logged"] > 300
    # the harness's setpoints: its own sends, each received once (not also counted as a real
    # robot's unrecorded messages)
    tp = report["messages"]["/target_position"]
    # (the first may go out before the harness's writer has matched the node's reader, and the
    # last may still be in flight when the run stops: the report accounts for each one)
    assert tp["sender"] == "harness" and tp["sent"] == tp["logged"] > 0
    assert tp["received"] >= tp["sent"] - 2 and tp["lost"] == tp["unrecorded"] == 0
    _balanced({"/target_position": tp})
    assert "hover" not in summary["checks"]  # no ground truth from a real robot


@pytest.fixture(scope="module")
def panda():
    return _robot_for("panda", REACH)


def test_arm_reaches_two_poses_on_ros2_control_topics(panda, tmp_path):
    report = _run(panda, REACH, tmp_path / "run", scenario=HIL / "reach.yaml")
    assert report["passed"], [c for c in report["checks"] if c["passed"] is False]
    reach = report["metrics"]["reach"]
    assert reach["samples"] > 50  # the truth was sampled through the window
    assert reach["max_position_error_m"] < 0.01 and reach["max_angle_deg"] < 5.0
    _standing_checks_hold(report)
    _balanced(report["messages"])
    for topic in ("/joint_states", "/forward_position_controller/commands", "/target_pose"):
        assert report["messages"][topic]["sent"] > 0, topic
    with AnyReader([tmp_path / "run" / "run.mcap"]) as reader:
        poses = [reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages()
                 if c.topic == "/target_pose"]
        last = [reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages()
                if c.topic == "/hil/ground_truth"][-1]
    assert {round(p.pose.position.y, 3) for p in poses} == {0.2, -0.15}  # both commanded
    tool = last.pose.pose.position  # the arm's truth is its tool: at the second pose
    assert abs(tool.x - 0.4) < 0.01 and abs(tool.y + 0.15) < 0.01 and abs(tool.z - 0.45) < 0.01


def test_arm_holds_its_reach_on_the_nodes_own_timer(panda, tmp_path):
    """The node on its 50 Hz timer acts on the newest joint state, older by the phase between
    the robot's publishing and the node's clock: 1 cm / 5 degrees still hold."""
    report = _run(panda, REACH, tmp_path / "run", scenario=HIL / "reach_timer.yaml")
    assert report["passed"], [c for c in report["checks"] if c["passed"] is False]
    reach = report["metrics"]["reach"]
    assert reach["samples"] > 50
    assert reach["max_position_error_m"] < 0.01 and reach["max_angle_deg"] < 5.0


def test_arm_on_joint_trajectory_commands(panda, tmp_path):
    report = _run(panda, REACH, tmp_path / "run", scenario=HIL / "reach_trajectory.yaml")
    assert report["passed"], [c for c in report["checks"] if c["passed"] is False]
    assert report["metrics"]["reach"]["max_position_error_m"] < 0.01
    sent = report["messages"]
    assert sent["/joint_trajectory_controller/joint_trajectory"]["sent"] > 50
    assert "/forward_position_controller/commands" not in sent


def test_arm_scenarios_refuse_what_an_arm_cannot_do(panda, crazyflie, tmp_path):
    from simreal.hil.harness import prepare

    pushed = tmp_path / "push.yaml"
    pushed.write_text("duration_s: 2\npushes: [{at_s: 1, velocity: [0.1, 0, 0]}]\n")
    with pytest.raises(ValueError, match="push.yaml: pushes: 'panda' is an arm"):
        prepare(panda, REACH, pushed, out=tmp_path / "a")
    with pytest.raises(ValueError, match="interface: robot 'panda' is an arm"):
        prepare(panda, REACH, HIL / "reach.yaml", out=tmp_path / "b", interface="native")
    posed = tmp_path / "pose.yaml"
    posed.write_text("duration_s: 2\ncommands: [{at_s: 0, pose: [0.5, 0, 0.3, 0, 1, 0, 0]}]\n")
    with pytest.raises(ValueError, match=r"pose.yaml: commands\[0\].pose: the policy takes no "
                                         "target_orientation"):
        prepare(crazyflie, HOVER, posed, out=tmp_path / "c")
    posed.write_text("duration_s: 2\ncommands: [{at_s: 0, pose: [0.5, 0, 0.3, 0, 2, 0, 0]}]\n")
    with pytest.raises(ValueError, match=r"pose.yaml: commands\[0\]: .*not unit length"):
        prepare(panda, REACH, posed, out=tmp_path / "e")
    # the default scenario: lock-step reach to the middle of the trained ranges
    setup = prepare(panda, REACH, out=tmp_path / "d")
    pose = setup.scenario.commands[0].pose
    assert setup.scenario.node["trigger"] == "state" and setup.scenario.expect.reach
    assert pose[:3] == pytest.approx((0.45, 0.0, 0.35)) and pose[3:] == pytest.approx(
        (0.0, 1.0, 0.0, 0.0))


@pytest.fixture(scope="module")
def panda_lift():
    return _robot_for("panda", LIFT)


def test_arm_lifts_the_cube_it_sees_through_a_camera_stand_in(panda_lift, tmp_path):
    """arm-lift end to end: the cube's pose from the perception stand-in (30 Hz, 30-60 ms
    late, noisy) on /object_pose, the height on /lift_height, the lift check on the cube's
    ground truth. The asset's policy (77% in evaluation) held the cube within 3 cm of 0.2 m in
    3 of 4 runs here (docs/HIL.md), so the check's verdict is reported, not asserted: the run
    must reach it with the standing checks holding."""
    report = _run(panda_lift, LIFT, tmp_path / "run", scenario=HIL / "lift.yaml")
    lift = report["metrics"]["lift"]
    assert lift["samples"] > 50 and lift["max_height_error_m"] is not None
    assert _check(report, "lift")["passed"] is not None
    _standing_checks_hold(report)
    _balanced(report["messages"])
    poses, joints = report["messages"]["/object_pose"], report["messages"]["/joint_states"]
    # the camera's 30 Hz beside the arm's 50 Hz joint states, over the same run
    assert 0.4 < poses["sent"] / joints["sent"] < 0.8, (poses, joints)
    assert poses["received"] >= 200  # 30 Hz through the 8 s scenario: 240
    assert report["messages"]["/lift_height"]["sent"] > 0


def test_lift_scenarios_need_the_camera_and_a_trained_height(panda, tmp_path):
    """A policy that reads the object's pose refuses a scenario in which nothing publishes
    it, and a height outside its trained range; its default scenario is a lift."""
    from simreal import make_env
    from simreal.hil.harness import prepare
    from simreal.train.export import export_onnx

    contract = make_env("arm-lift", num_envs=1, seed=0).contract()
    class Still(torch.nn.Module):  # ONNX export names the input `obs`
        def __init__(self) -> None:
            super().__init__()
            self.out = torch.nn.Linear(contract.obs_dim, contract.action_dim)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.out(obs)

    policy = export_onnx(Still(), contract, tmp_path / "lift.onnx")
    blind = tmp_path / "blind.yaml"
    blind.write_text("duration_s: 2\ncommands: [{at_s: 0, lift_height: 0.2}]\n")
    with pytest.raises(ValueError, match=r"blind.yaml: robot.object_pose: the policy reads the "
                                         r"object's pose"):
        prepare(panda, policy, blind, out=tmp_path / "a")
    high = tmp_path / "high.yaml"
    high.write_text("duration_s: 2\nrobot: {object_pose: {}}\n"
                    "commands: [{at_s: 0, lift_height: 0.5}]\n")
    with pytest.raises(ValueError, match=r"high.yaml: commands\[0\].lift_height: outside the "
                                         r"range .*0.5 not in \[0.15, 0.3\]"):
        prepare(panda, policy, high, out=tmp_path / "b")
    with pytest.raises(ValueError, match=r"commands\[0\].lift_height: the policy takes no "
                                         "lift_height"):
        prepare(panda, REACH, blind, out=tmp_path / "c")
    setup = prepare(panda, policy, out=tmp_path / "d")
    sc = setup.scenario
    assert sc.commands[0].lift_height == pytest.approx(0.225) and sc.expect.lift
    assert sc.robot.object_pose is not None and sc.node["trigger"] == "state"


def test_bad_input_is_refused_before_anything_starts(crazyflie, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("duration_s: 5\ncommands: [{at_s: 0, velocity: [1, 0, 0]}]\n")
    cli = subprocess.run([sys.executable, "-m", "simreal.cli", "hil", "--robot", "crazyflie",
                          "--policy", str(HOVER), "--scenario", str(bad), "--out",
                          str(tmp_path / "run")], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2
    assert "bad.yaml: commands[0].velocity: the policy takes no velocity_command" in cli.stderr
    assert not (tmp_path / "run").exists()
    cli = subprocess.run([sys.executable, "-m", "simreal.cli", "hil", "--robot", "go2",
                          "--policy", str(HOVER)], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2 and "robot: policy was trained for 'crazyflie'" in cli.stderr
    # a non-finite or out-of-range setpoint: refused before any process starts, named
    for value, message in (("[.nan, 0, 1]", "bad.yaml: commands[0].position[0]: Input should "
                                            "be a finite number (got nan)"),
                           ("[0, 0, 5]", "bad.yaml: commands[0].position: outside the range "
                                         "the policy was trained on (target_position: [2] 5 "
                                         "not in [0, 2])")):
        bad.write_text(f"duration_s: 22\ncommands: [{{at_s: 0, position: {value}}}]\n")
        cli = subprocess.run([sys.executable, "-m", "simreal.cli", "hil", "--robot",
                              "crazyflie", "--policy", str(HOVER), "--scenario", str(bad),
                              "--out", str(tmp_path / "run")], capture_output=True, text=True,
                             timeout=60)
        assert cli.returncode == 2 and message in cli.stderr, cli.stderr
        assert not (tmp_path / "run").exists()


def _nan_policy(path: Path) -> Path:
    """The hover policy with its output multiplied by NaN: the same contract (metadata), every
    command non-finite."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(HOVER)
    graph = model.graph
    out = graph.output[0].name
    for node in graph.node:
        for i, name in enumerate(node.output):
            if name == out:
                node.output[i] = out + "_finite"
    graph.initializer.append(helper.make_tensor("nan_scale", TensorProto.FLOAT, [],
                                                [float("nan")]))
    graph.node.append(helper.make_node("Mul", [out + "_finite", "nan_scale"], [out]))
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def test_a_policy_commanding_only_nan_fails(tmp_path):
    """The reported false pass: a policy whose commands are all NaN never gets past the
    node's soft start, the quadrotor sits on its pad (then at the target), and the hover
    error was 0. `simreal hil` exits 1 and the report names the rules it broke."""
    policy = _nan_policy(tmp_path / "nan.onnx")
    scenario = tmp_path / "hover.yaml"  # hover.yaml, shorter
    scenario.write_text((HIL / "hover.yaml").read_text().replace("duration_s: 10",
                                                                 "duration_s: 4")
                        .replace("from_s: 6, to_s: 10", "from_s: 2, to_s: 4"))
    out = tmp_path / "run"
    cli = subprocess.run([sys.executable, "-m", "simreal.cli", "hil", "--robot", "crazyflie",
                          "--policy", str(policy), "--scenario", str(scenario), "--out",
                          str(out), "--no-plots"], capture_output=True, text=True, timeout=200)
    assert cli.returncode == 1, cli.stderr[-2000:]
    summary = json.loads(cli.stdout.strip().splitlines()[-1])
    assert summary["passed"] is False
    assert (out / "report.json").is_file() and not list(out.glob("*.png"))  # --no-plots
    assert {k: summary["checks"][k] for k in ("left_soft_start", "moved", "finite_commands")} \
        == {"left_soft_start": False, "moved": False, "finite_commands": False}
    report = json.loads((out / "report.json").read_text())
    assert "never left its soft start" in _check(report, "left_soft_start")["statement"]
    assert "never lifted off" in _check(report, "moved")["statement"]
    finite = _check(report, "finite_commands")
    assert finite["policy_nonfinite"]["node-0"] > 100  # one a control period
    # what went on the wire was the node's held safe command, every one of them
    assert finite["sent_nonfinite"] == 0 and _check(report, "limits")["passed"] is True
    assert _check(report, "commands_received")["passed"] is True
    assert _check(report, "hover")["passed"] is None  # resting on the pad is not a hover


def _events(out: Path) -> list[dict]:
    from simreal.hil.record import EVENT, read_records

    return [r.json() for p in sorted((out / "logs").glob("*.rec"))
            for r in read_records(p) if r.kind == EVENT]


def test_processes_get_the_loopback_configuration(tmp_path, monkeypatch):
    """Without --network every participant of a run (robot, node, the harness's own) is on the
    loopback-only configuration; the caller's environment is left as it was."""
    from simreal.deploy import dds
    from simreal.hil.harness import Harness, prepare

    monkeypatch.delenv("CYCLONEDDS_URI", raising=False)
    robot = load_robot_dir(ROOT / "robots" / "crazyflie")
    setup = prepare(robot, HOVER, HIL / "hover.yaml", None, tmp_path / "run")
    h = Harness(setup, progress=False)
    assert h.env["CYCLONEDDS_URI"] == dds.LOOPBACK_CONFIG
    assert "CYCLONEDDS_URI" not in os.environ
    assert 1 <= setup.domain_id <= 200
