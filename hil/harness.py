"""`simreal hil`: one HIL run, from processes to report.

1. Check everything before any process starts: the scenario and fault plan (file and field
   named), the policy's contract against the robot, sensor faults against the interface.
2. Start the robot process (hil/robot_proc.py; none with `real_robot`), then the deploy node
   (hil/node_proc.py), each a process of its own, stderr to `DIR/logs/`; DDS on the
   loopback-only configuration unless `network`; a domain id of the run's own.
3. Scenario time zero is the robot's first command. The harness publishes the user commands
   (cmd_vel repeated at 10 Hz, as a teleoperation node does; setpoints at 2 Hz; the e-stop
   state at 10 Hz), and carries out the process faults: SIGKILL the node (and start a new one
   after `restart_after_s`), SIGKILL the robot and start a new one after `downtime_s` (from its
   initial state or its last snapshot).
4. At the end: SIGTERM the node (it sends its damping command), then the robot; anything still
   alive after a grace period is killed. Children also die with the harness (PR_SET_PDEATHSIG).
5. The records of every process become `DIR/run.mcap`, `DIR/report.json` and the plots
   (hil/analysis.py, hil/plots.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from simreal.deploy import codecs, dds
from simreal.deploy import messages as m
from simreal.deploy.arm import OBJECT_SIGNALS, pose_stamped
from simreal.deploy.interfaces import INPUT_TOPICS
from simreal.deploy.policy import OnnxPolicy
from simreal.deploy.runner import PolicyRunner
from simreal.deploy.terms import reads_of
from simreal.deploy.transport import QoS
from simreal.hil.config import (
    FaultPlan,
    FigureEight,
    NodeCrash,
    RobotRestart,
    Scenario,
    default_scenario,
    load_faults,
    load_scenario,
)
from simreal.hil.record import RecordWriter, TapTransport
from simreal.robots import Robot

log = logging.getLogger("simreal.hil")

STARTUP_TIMEOUT_S = 90.0  # process start, imports and DDS discovery on a loaded machine
FIRST_COMMAND_TIMEOUT_S = 60.0
GRACE_S = 5.0  # for a process to exit after SIGTERM


class HilError(RuntimeError):
    """The run could not be carried out (a process did not start, ...)."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """PR_SET_PDEATHSIG: the child gets SIGKILL when the harness dies, whatever the cause."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


class Proc:
    """A child process whose stdout JSON lines arrive on a queue; stderr goes to a file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path):
        self.name = name
        self._err: TextIO = open(log_path, "a")  # noqa: SIM115 (closed in close())
        self.popen = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._err, text=True,
                                      env=env, preexec_fn=_die_with_parent)
        self.pid = self.popen.pid
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    self.lines.put(obj)

    def wait_for(self, event: str, timeout_s: float) -> dict[str, Any]:
        end = time.monotonic() + timeout_s
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise HilError(f"{self.name}: no {event!r} within {timeout_s:g} s")
            try:
                obj = self.lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                if self.popen.poll() is not None:
                    raise HilError(f"{self.name} exited (status {self.popen.returncode}) "
                                   f"before {event!r}; see its log") from None
                continue
            if obj.get("event") == event:
                return obj

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        self.send_kill()
        self.popen.wait(timeout=GRACE_S)

    def send_kill(self) -> None:
        """SIGKILL without waiting: a loaded machine can take most of a second to reap a
        process with DDS threads, which is not when it stopped."""
        if self.alive():
            self.popen.kill()

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after the grace period; the exit status."""
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=GRACE_S)
        return self.popen.returncode

    def close(self) -> None:
        self._err.close()


@dataclass
class RunSetup:
    robot: Robot
    policy: Path
    scenario: Scenario
    faults: FaultPlan
    out: Path
    domain_id: int
    network: bool = False
    real_robot: bool = False
    scenario_path: str | None = None
    faults_path: str | None = None
    work: Path = field(init=False)

    def __post_init__(self) -> None:
        self.work = self.out / "logs"


def prepare(robot: Robot, policy: str | Path, scenario: str | Path | Scenario | None = None,
            faults: str | Path | FaultPlan | None = None, out: str | Path | None = None,
            domain_id: int | None = None, network: bool = False, real_robot: bool = False,
            interface: str | None = None) -> RunSetup:
    """Everything checked, nothing started: refuses bad input with the file and field named."""
    from simreal.hil.robot import robot_side_interface

    policy = Path(policy)
    runner = PolicyRunner(OnnxPolicy(policy), robot)  # the contract, every mismatch named
    contract = runner.contract
    scenario_path = faults_path = None
    if scenario is None:
        target = (0.0, 0.0, 1.0)
        if "target_position" in contract.commands:
            r = contract.commands["target_position"]
            target = tuple((lo + hi) / 2 for lo, hi in zip(r.low, r.high, strict=True))
        lift = contract.commands.get("lift_height")
        sc = default_scenario(robot.spec.kind, target, robot.spec.control.rate_hz,
                              _middle_pose(contract), "target_velocity" in contract.commands,
                              None if lift is None else (lift.low[0] + lift.high[0]) / 2)
    elif isinstance(scenario, Scenario):
        sc = scenario
    else:
        scenario_path = str(scenario)
        sc = load_scenario(scenario)
    if interface is not None:
        sc = sc.model_copy(update={"interface": interface})
    if faults is None:
        plan = FaultPlan()
    elif isinstance(faults, FaultPlan):
        plan = faults
    else:
        faults_path = str(faults)
        plan = load_faults(faults)
    where_sc = scenario_path or "scenario"
    wanted = {"velocity": "velocity_command", "position": "target_position",
              "pose": "target_orientation", "figure_eight": "target_velocity",
              "lift_height": "lift_height"}
    for i, c in enumerate(sc.commands):
        for key, name in wanted.items():
            if getattr(c, key) is not None and name not in contract.commands:
                raise ValueError(f"{where_sc}: commands[{i}].{key}: the policy takes no "
                                 f"{name} (it takes {sorted(contract.commands) or 'none'})")
    _check_ranges(sc, contract, where_sc)
    reads = reads_of(contract.observations)
    if reads & OBJECT_SIGNALS and sc.robot.object_pose is None and not real_robot:
        raise ValueError(f"{where_sc}: robot.object_pose: the policy reads the object's pose "
                         f"({sorted(reads & OBJECT_SIGNALS)}) and nothing would publish "
                         "/object_pose; give robot: {object_pose: {rate_hz: 30}} (the "
                         "perception stand-in, hil/perception.py)")
    if robot.spec.kind == "arm":
        if sc.pushes:
            raise ValueError(f"{where_sc}: pushes: {robot.name!r} is an arm, fixed to the "
                             "world (pushes move a free base)")
        # the robot runs the controller the node commands (ros2_control: one of the two)
        arm = sc.robot.model_copy(update={"arm_command": sc.node_config().arm_command})
        sc = sc.model_copy(update={"robot": arm})
    iface = robot_side_interface(robot, sc.interface, sc.robot)
    from simreal.hil.faults import check_signals

    dims = {"joint_pos": len(robot.spec.joints), "joint_vel": len(robot.spec.joints),
            "joint_effort": len(robot.spec.joints), "orientation": 4}
    check_signals(plan, sorted(iface.provides), dims, faults_path or "faults")
    if real_robot:
        sim_only = [f"faults[{i}] ({f.kind})" for i, f in enumerate(plan.faults)
                    if not isinstance(f, NodeCrash)]
        if sim_only or sc.pushes:
            raise ValueError(f"{faults_path or 'faults'}: {', '.join(sim_only) or 'pushes'} "
                             "need the simulated robot; against a real robot only node_crash "
                             "applies")
    out = Path(out) if out else Path("runs") / (
        f"hil_{robot.name}_{sc.name}_{time.strftime('%Y%m%d-%H%M%S')}")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out}: already holds files; give a new --out")
    if domain_id is None:
        domain_id = 1 + os.getpid() % 200  # a domain of its own, away from others' domain 0
    return RunSetup(robot, policy, sc, plan, out, domain_id, network, real_robot,
                    scenario_path, faults_path)


RANGE_EPS = 1e-9


def _check_ranges(sc: Scenario, contract: Any, where: str) -> None:
    """Every scenario command inside the range the policy was trained on (the node would clamp
    it, so the run would test another command than the scenario says): refused, the file and
    field named. A pose's quaternion is compared on the side (q or -q) the node uses."""
    from simreal.deploy.arm import orientation_command

    def outside(value: np.ndarray, name: str) -> str:
        r = contract.commands[name]
        low, high = np.asarray(r.low, dtype=np.float64), np.asarray(r.high, dtype=np.float64)
        if value.shape != low.shape:
            return f"{len(value)} values, the policy's {name} has {len(low)}"
        bad = np.flatnonzero((value < low - RANGE_EPS) | (value > high + RANGE_EPS))
        return ", ".join(f"[{j}] {value[j]:g} not in [{low[j]:g}, {high[j]:g}]" for j in bad)

    for i, c in enumerate(sc.commands):
        parts: list[tuple[str, np.ndarray, str]] = []
        if c.velocity is not None:
            parts.append(("velocity", np.array(c.velocity), "velocity_command"))
        if c.position is not None:
            parts.append(("position", np.array(c.position), "target_position"))
        if c.pose is not None:
            pose = np.array(c.pose)
            if "target_position" in contract.commands:
                parts.append(("pose", pose[:3], "target_position"))
            if "target_orientation" in contract.commands:
                r = contract.commands["target_orientation"]
                parts.append(("pose", orientation_command(pose[3:], np.array(r.low),
                                                          np.array(r.high)),
                              "target_orientation"))
        if c.lift_height is not None and "lift_height" in contract.commands:
            parts.append(("lift_height", np.array([c.lift_height]), "lift_height"))
        if c.figure_eight is not None:  # its extremes over a lap, each axis
            lap = np.linspace(0.0, c.figure_eight.period_s, 361)
            pos, vel = c.figure_eight.at(lap)
            for value, name in ((pos, "target_position"), (vel, "target_velocity")):
                if name in contract.commands:
                    parts += [("figure_eight", value.min(0), name),
                              ("figure_eight", value.max(0), name)]
        for key, value, name in parts:
            problem = outside(value, name)
            if problem:
                raise ValueError(f"{where}: commands[{i}].{key}: outside the range the policy "
                                 f"was trained on ({name}: {problem}); the node would clamp it")


def _middle_pose(contract: Any) -> tuple[float, ...] | None:
    """The middle of an arm policy's trained target pose ranges (a unit quaternion), if any."""
    c = contract.commands
    if "target_position" not in c or "target_orientation" not in c:
        return None
    pos = [(lo + hi) / 2 for lo, hi in zip(c["target_position"].low, c["target_position"].high,
                                          strict=True)]
    quat = [(lo + hi) / 2 for lo, hi in zip(c["target_orientation"].low,
                                           c["target_orientation"].high, strict=True)]
    norm = math.sqrt(sum(x * x for x in quat)) or 1.0
    return tuple(pos + [x / norm for x in quat])


def _set_uri(value: str | None) -> None:
    if value is None:
        os.environ.pop("CYCLONEDDS_URI", None)
    else:
        os.environ["CYCLONEDDS_URI"] = value


class _Inputs:
    """The harness's own participant: the user's commands to the node, recorded."""

    def __init__(self, setup: RunSetup, rec: RecordWriter, env: dict[str, str]):
        # Cyclone reads CYCLONEDDS_URI when the domain starts: the run's configuration for this
        # participant, and the caller's environment left as it was
        saved = os.environ.get("CYCLONEDDS_URI")
        _set_uri(env.get("CYCLONEDDS_URI"))
        try:
            self.bus = dds.Transport(domain_id=setup.domain_id, network=setup.network)
        finally:
            _set_uri(saved)
        self.tap = TapTransport(self.bus, rec)
        names = {s.key: s.default for s in INPUT_TOPICS}
        names.update({k: v for k, v in setup.scenario.node.get("topics", {}).items()
                      if k in names})
        types = {s.key: s.type for s in INPUT_TOPICS}
        self.pubs = {k: self.tap.publisher(names[k], types[k], QoS.COMMAND) for k in names}
        self.commands = sorted(setup.scenario.commands, key=lambda c: c.at_s)
        self.velocity: tuple[float, float, float] | None = None
        self.position: tuple[float, float, float] | None = None
        self.pose: tuple[float, ...] | None = None
        self.lift_height: float | None = None
        self.figure: tuple[float, FigureEight] | None = None  # (start, reference)
        self.estop: bool | None = None
        self._next = 0
        self._last = {"cmd_vel": -1e9, "target_position": -1e9, "target_pose": -1e9,
                      "lift_height": -1e9, "estop": -1e9}

    def tick(self, t: float) -> None:
        """Publish what is due at scenario time t (t < 0: before the start, what holds at 0)."""
        now = time.monotonic()
        while self._next < len(self.commands) and self.commands[self._next].at_s <= max(t, 0.0):
            c = self.commands[self._next]
            self._next += 1
            if c.velocity is not None:
                self.velocity = c.velocity
                self._last["cmd_vel"] = -1e9
            elif c.position is not None:
                self.position, self.figure = c.position, None
                self._last["target_position"] = -1e9
            elif c.figure_eight is not None:
                self.position, self.figure = None, (c.at_s, c.figure_eight)
            elif c.pose is not None:
                self.pose = c.pose
                self._last["target_pose"] = -1e9
            elif c.lift_height is not None:
                self.lift_height = c.lift_height
                self._last["lift_height"] = -1e9
            elif c.estop is not None:
                self.estop = c.estop
                self._last["estop"] = -1e9
            elif c.estop_reset:
                self.pubs["estop_reset"].write(m.Bool(True))
        if self.velocity is not None and now - self._last["cmd_vel"] >= 0.1:
            v = self.velocity
            self.pubs["cmd_vel"].write(m.Twist(m.Vector3(v[0], v[1], 0.0),
                                               m.Vector3(0.0, 0.0, v[2])))
            self._last["cmd_vel"] = now
        if self.position is not None and now - self._last["target_position"] >= 0.5:
            p = self.position
            header = m.Header(codecs.stamp(), "world")
            self.pubs["target_position"].write(m.PointStamped(header, m.Point(*p)))
            self._last["target_position"] = now
        if self.figure is not None:  # every tick: the reference moves
            start, figure = self.figure
            pos, vel = figure.at(np.array([max(t, 0.0) - start]))
            self.pubs["reference"].write(m.Odometry(
                m.Header(codecs.stamp(), "world"), "",
                m.PoseWithCovariance(m.Pose(m.Point(*pos[0]), m.Quaternion())),
                m.TwistWithCovariance(m.Twist(m.Vector3(*vel[0]), m.Vector3()))))
        if self.pose is not None and now - self._last["target_pose"] >= 0.5:
            p = np.array(self.pose)
            self.pubs["target_pose"].write(pose_stamped(p[:3], p[3:]))
            self._last["target_pose"] = now
        if self.lift_height is not None and now - self._last["lift_height"] >= 0.5:
            self.pubs["lift_height"].write(m.Float64(self.lift_height))
            self._last["lift_height"] = now
        if self.estop is not None and now - self._last["estop"] >= 0.1:
            self.pubs["estop"].write(m.Bool(self.estop))
            self._last["estop"] = now

    def close(self) -> None:
        self.bus.close()


class Harness:
    def __init__(self, setup: RunSetup, progress: bool = True):
        self.s = setup
        self.progress = progress
        self.env = dict(os.environ)
        self.env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        if not setup.network:
            dds.use_loopback(self.env)
        self.robots: list[Proc] = []
        self.nodes: list[Proc] = []
        self.t0: float | None = None
        self.t0_wall_ns: int | None = None

    # --- processes ------------------------------------------------------------------------
    def _spec(self, name: str, obj: dict[str, Any]) -> Path:
        path = self.s.work / f"{name}.json"
        path.write_text(json.dumps(obj, indent=1))
        return path

    def start_robot(self, resume: bool = False) -> Proc:
        i = len(self.robots)
        s = self.s
        spec = {"robot_dir": str(s.robot.directory), "interface": s.scenario.interface,
                "sim": s.scenario.robot.model_dump(), "topics": s.scenario.node.get("topics"),
                "domain_id": s.domain_id, "network": s.network,
                "record": str(s.work / f"robot-{i}.rec"), "instance": i,
                "faults": s.faults.model_dump(), "t0": self.t0,
                "pushes": [p.model_dump() for p in s.scenario.pushes],
                "resume": str(s.work / "snapshot.json") if resume else None,
                "fifo_priority": s.scenario.realtime_priority,
                "snapshot": str(s.work / "snapshot.json") if any(
                    f.resume == "snapshot" for f in s.faults.of(RobotRestart)) else None,
                "max_s": s.scenario.duration_s + STARTUP_TIMEOUT_S + FIRST_COMMAND_TIMEOUT_S}
        proc = Proc(f"robot-{i}", [sys.executable, "-m", "simreal.hil.robot_proc",
                                   str(self._spec(f"robot-{i}", spec))],
                    self.env, s.work / f"robot-{i}.log")
        self.robots.append(proc)
        self.rec.event("process_start", source="harness", process=proc.name, pid=proc.pid)
        return proc

    def start_node(self) -> Proc:
        i = len(self.nodes)
        s = self.s
        rate = s.robot.spec.control.rate_hz
        spec = {"policy": str(s.policy.resolve()), "robot_dir": str(s.robot.directory),
                "domain_id": s.domain_id, "network": s.network,
                "config": s.scenario.node_config().model_dump(),
                "record": str(s.work / f"node-{i}.rec"),
                "summary": str(s.work / f"node-{i}-summary.json"), "instance": i,
                "record_received": s.real_robot,
                "max_cycles": int((s.scenario.duration_s + STARTUP_TIMEOUT_S
                                   + FIRST_COMMAND_TIMEOUT_S) * rate)}
        proc = Proc(f"node-{i}", [sys.executable, "-m", "simreal.hil.node_proc",
                                  str(self._spec(f"node-{i}", spec))],
                    self.env, s.work / f"node-{i}.log")
        self.nodes.append(proc)
        self.rec.event("process_start", source="harness", process=proc.name, pid=proc.pid)
        return proc

    def _kill(self, proc: Proc, why: str) -> None:
        # stamped when the signal goes, not after the reaping (the report's timeline)
        proc.send_kill()
        self.rec.event("process_kill", source="harness", process=proc.name, pid=proc.pid,
                       reason=why)
        proc.popen.wait(timeout=GRACE_S)

    # --- the run --------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        s = self.s
        s.out.mkdir(parents=True, exist_ok=True)
        s.work.mkdir(exist_ok=True)
        self.rec = RecordWriter(s.work / "harness.rec", "harness")
        self.rec.event("run", source="harness", robot=s.robot.name,
                       robot_dir=str(s.robot.directory), policy=str(s.policy.resolve()),
                       scenario=s.scenario.model_dump(), faults=s.faults.model_dump(),
                       domain_id=s.domain_id, network=s.network, real_robot=s.real_robot)
        inputs = None
        try:
            # both processes start at once (their imports and set-up overlap); the node only
            # commands once the robot's state reaches it
            robot = None if s.real_robot else self.start_robot()
            inputs = _Inputs(s, self.rec, self.env)
            node = self.start_node()
            if robot is not None:
                robot.wait_for("ready", STARTUP_TIMEOUT_S)
            node.wait_for("ready", STARTUP_TIMEOUT_S)
            self._say(f"robot and node up (DDS domain {s.domain_id}, "
                      f"{'network' if s.network else 'loopback only'})")
            self._wait_start(inputs)
            self._scenario(inputs)
        finally:
            self._shutdown(inputs)
        return {"t0_monotonic": self.t0, "t0_wall_ns": self.t0_wall_ns}

    def _wait_start(self, inputs: _Inputs) -> None:
        end = time.monotonic() + FIRST_COMMAND_TIMEOUT_S
        while self.t0 is None:
            inputs.tick(-1.0)
            if self.s.real_robot:
                if self._node_first_command():
                    self.t0 = time.monotonic()
                    break
            else:
                robot = self.robots[-1]
                with contextlib.suppress(queue.Empty):
                    obj = robot.lines.get(timeout=0.05)
                    if obj.get("event") == "started":
                        self.t0 = float(obj["t0"])
                        break
                if not robot.alive():
                    raise HilError("robot-0 exited before the first command; see its log")
            if not self.nodes[-1].alive():
                raise HilError("node-0 exited before commanding the robot; see "
                               f"{self.s.work / 'node-0.log'}")
            if time.monotonic() > end:
                raise HilError(f"no command reached the robot within "
                               f"{FIRST_COMMAND_TIMEOUT_S:g} s")
            time.sleep(0.01)
        self.t0_wall_ns = time.time_ns() - int((time.monotonic() - self.t0) * 1e9)
        self.rec.event("t0", source="harness", t0_monotonic=self.t0, t0_wall_ns=self.t0_wall_ns)
        self._say("first command: scenario time 0")

    def _node_first_command(self) -> bool:
        path = self.s.work / "node-0.rec"
        if not path.exists():
            return False
        from simreal.hil.record import SENT, read_records

        return any(r.kind == SENT for r in read_records(path))

    def _scenario(self, inputs: _Inputs) -> None:
        s = self.s
        crashes = sorted(s.faults.of(NodeCrash), key=lambda f: f.at_s)
        restarts = sorted(s.faults.of(RobotRestart), key=lambda f: f.at_s)
        pending: list[tuple[float, str, Any]] = []  # (scenario time, what, fault)
        for f in crashes:
            pending.append((f.at_s, "kill_node", f))
        for f in restarts:
            pending.append((f.at_s, "kill_robot", f))
        pending.sort(key=lambda p: p[0])
        reported = -1
        while True:
            t = time.monotonic() - self.t0
            if t >= s.scenario.duration_s:
                break
            inputs.tick(t)
            while pending and pending[0][0] <= t:
                _, what, f = pending.pop(0)
                self._fault(what, f, t, pending)
                pending.sort(key=lambda p: p[0])
            self._watch(t)
            if self.progress and int(t) > reported:
                reported = int(t)
                self._say(f"t = {reported:d} / {s.scenario.duration_s:g} s")
            time.sleep(0.01)

    def _fault(self, what: str, f: Any, t: float, pending: list) -> None:
        if what == "kill_node":
            self._kill(self.nodes[-1], f"node_crash at {f.at_s:g} s")
            if f.restart_after_s is not None:
                pending.append((t + f.restart_after_s, "start_node", f))
        elif what == "start_node":
            self.start_node()
        elif what == "kill_robot":
            self._kill(self.robots[-1], f"robot_restart at {f.at_s:g} s")
            pending.append((t + f.downtime_s, "start_robot", f))
        elif what == "start_robot":
            self.start_robot(resume=f.resume == "snapshot")

    def _watch(self, t: float) -> None:
        """Note processes that died on their own (not a fault of the plan)."""
        for proc in (self.robots[-1:] + self.nodes[-1:]):
            if not proc.alive() and not getattr(proc, "_noted", False):
                proc._noted = True  # type: ignore[attr-defined]
                killed = proc.popen.returncode == -signal.SIGKILL
                if not killed:
                    self.rec.event("process_exit", source="harness", process=proc.name,
                                   status=proc.popen.returncode, at_s=t)
                    log.warning("%s exited on its own (status %s) at %.2f s", proc.name,
                                proc.popen.returncode, t)

    def _shutdown(self, inputs: _Inputs | None) -> None:
        # the node first (it sends its damping command), then the robot, then our participant
        for proc in self.nodes + self.robots:
            status = proc.stop()
            self.rec.event("process_stop", source="harness", process=proc.name, status=status)
            proc.close()
        if inputs is not None:
            inputs.close()
        self.rec.close()

    def _say(self, text: str) -> None:
        if self.progress:
            print(f"simreal hil: {text}", file=sys.stderr, flush=True)


def run_hil(robot: Robot, policy: str | Path, scenario: str | Path | Scenario | None = None,
            faults: str | Path | FaultPlan | None = None, out: str | Path | None = None,
            domain_id: int | None = None, network: bool = False, real_robot: bool = False,
            interface: str | None = None, progress: bool = True,
            plots: bool = True) -> dict[str, Any]:
    """Run one HIL scenario and write DIR/run.mcap, DIR/report.json and (unless `plots` is
    False) the plots; returns the report."""
    from simreal.hil.analysis import analyze

    setup = prepare(robot, policy, scenario, faults, out, domain_id, network, real_robot,
                    interface)
    harness = Harness(setup, progress)
    times = harness.run()
    if progress:
        what = "the report and the plots" if plots else "the report"
        print(f"simreal hil: writing the MCAP log, {what}", file=sys.stderr, flush=True)
    return analyze(setup, times, plots)


def reanalyze(out: str | Path, progress: bool = False, plots: bool = True) -> dict[str, Any]:
    """Analyze a finished run directory again (its records are kept in DIR/logs)."""
    from simreal.hil.analysis import analyze
    from simreal.hil.record import EVENT, read_records
    from simreal.robots import load_robot_dir

    out = Path(out)
    events = [r.json() for r in read_records(out / "logs" / "harness.rec") if r.kind == EVENT]
    run = next(e for e in events if e["event"] == "run")
    t0 = next((e for e in events if e["event"] == "t0"), {})
    robot_dir = run.get("robot_dir") or Path("robots") / run["robot"]
    setup = RunSetup(load_robot_dir(robot_dir), Path(run["policy"]),
                     Scenario.model_validate(run["scenario"]),
                     FaultPlan.model_validate(run["faults"]), out, run["domain_id"],
                     run["network"], run["real_robot"])
    return analyze(setup, {"t0_monotonic": t0.get("t0_monotonic"),
                           "t0_wall_ns": t0.get("t0_wall_ns")}, plots)
