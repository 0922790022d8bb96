"""`simreal record`: run a calibration experiment on a robot and write its log (MCAP).

Two ways to run one, with the same experiment code and the same messages:

- `record_transport`: through a deploy transport (Cyclone DDS on the ROS 2 wire), in real time,
  against whatever robot speaks the robot's topics on that DDS domain: the real robot, or the
  HIL robot process (`hil.robot_proc`, started by `record(..., sim=True)`). The recorder takes
  state messages on threads of their own (each logged when it arrives) and sends the
  experiment's command at the control rate on deploy's drift-free loop.
- `record_in_process`: the HIL robot (hil/robot.SimRobot) stepped in simulated time in this
  process, messages passing through their CDR bytes exactly as over the wire, with the HIL
  harness's sensor faults (noise, bias). Faster than real time, for tests and validation.

The log is hil/mcap_log.py's MCAP (profile ros2, cdr, ros2msg schemas: rosbags, Foxglove and
PlotJuggler read it) holding the robot's state and command topics and `/calibration/experiment`
(std_msgs/String, JSON: experiment, robot, interface, topics, phases, t0_ns).

No safety layer sits between the experiment and the robot: experiments push joints to their
stops and saturate the drivers on purpose. On a real robot: hung from a gantry (go2-air),
tethered (quad-hover), a person at the hardware e-stop. Ctrl-C stops the experiment and sends
the damping command (joints: kp 0, kd 1; rotors: stopped).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simreal.calibration.experiments import Experiment, ExperimentError, make_experiment
from simreal.calibration.logs import EVENT_TOPIC, interface_for
from simreal.deploy.interfaces import RobotInterface
from simreal.deploy.transport import QoS, TransportBase
from simreal.hil.mcap_log import LogMessage, write_mcap
from simreal.hil.messages import String
from simreal.robots import Robot

FIRST_STATE_TIMEOUT_S = 30.0
PRE_ROLL_S = 0.3  # state logged before the first command (the robot at rest)


class RecordError(RuntimeError):
    """The experiment could not be run (no state from the robot, a process died, ...)."""


def command_messages(iface: RobotInterface, cmd: Mapping[str, np.ndarray]
                     ) -> list[tuple[str, Any]]:
    """(topic key, message) carrying an experiment's command, through deploy's codecs."""
    try:
        return iface.raw_command(cmd)
    except NotImplementedError as exc:
        raise ExperimentError(str(exc)) from None


def damping_command(iface: RobotInterface, signals: Mapping[str, np.ndarray]
                    ) -> list[tuple[str, Any]]:
    """What the recorder sends when it stops: joints damped, rotors stopped."""
    try:
        return iface.raw_damping(signals)
    except NotImplementedError as exc:
        raise ExperimentError(str(exc)) from None


def _check_interface(exp: Experiment, interface: str) -> None:
    if interface not in exp.interfaces:
        raise ExperimentError(f"experiment {exp.name!r} runs on the {' or '.join(exp.interfaces)}"
                              f" interface, not {interface!r}")


class _Log:
    """Messages of a run, as hil/mcap_log.py writes them."""

    def __init__(self) -> None:
        self.messages: list[LogMessage] = []
        self._lock = threading.Lock()

    def add(self, topic: str, msg: Any, qos: QoS | str, t_ns: int,
            data: bytes | None = None) -> bytes:
        data = msg.serialize() if data is None else data
        with self._lock:
            self.messages.append(LogMessage(topic, type(msg), str(QoS(qos)), t_ns, t_ns, data))
        return data

    def event(self, meta: dict[str, Any], t_ns: int) -> None:
        self.add(EVENT_TOPIC, String(json.dumps(meta)), QoS.COMMAND, t_ns)


def _topic_names(iface: RobotInterface, topics: Mapping[str, str] | None) -> dict[str, str]:
    names = {s.key: s.default for s in iface.state_topics + iface.command_topics}
    names.update({k: v for k, v in (topics or {}).items() if k in names})
    return names


# --- in simulated time ---------------------------------------------------------------------
def record_in_process(exp: Experiment, robot: Robot, interface: str | None = None,
                      faults: Any = None, sim: Mapping[str, Any] | None = None,
                      progress: Callable[[float], None] | None = None,
                      command_delay_s: float = 0.0) -> list[LogMessage]:
    """Run `exp` against the HIL robot stepped in simulated time; returns the log's messages.

    `robot` is the simulated robot's description (perturbed, for a validation: its hidden
    parameters); `faults` a hil.config.FaultPlan whose sensor faults (noise, bias) edit the
    published signals; `sim` overrides hil/robot.RobotSimConfig fields; `command_delay_s`
    holds every command (targets and gains alike, as a link or driver does) that long before
    the robot gets it, rounded to physics steps. (An MJCF actuator delay would delay the
    targets only, not the gains the command carries.)"""
    from simreal.hil.config import FaultPlan
    from simreal.hil.faults import SensorFaults
    from simreal.hil.robot import RobotSimConfig, SimRobot

    interface = interface or exp.interfaces[0]
    _check_interface(exp, interface)
    cfg = RobotSimConfig.model_validate({**exp.sim_config(), **(sim or {})})
    robot_sim = SimRobot(robot, interface, cfg)
    node = interface_for(robot, interface)
    names = _topic_names(node, None)
    plan = faults if faults is not None else FaultPlan()
    sensors = SensorFaults(plan, 0)
    dt = robot_sim.dt
    rate = cfg.state_rate_hz or 2 * exp.rate_hz
    publish_every = max(1, round(1.0 / (rate * dt)))
    control_every = round(1.0 / (exp.rate_hz * dt))
    if abs(control_every * dt * exp.rate_hz - 1.0) > 1e-9:
        raise ExperimentError(f"control period {1 / exp.rate_hz} s is not a whole number of "
                              f"physics steps of {dt} s")
    if not command_delay_s >= 0:
        raise ExperimentError(f"command_delay_s must be >= 0, got {command_delay_s}")
    delay = round(command_delay_s / dt)
    queue: list[tuple[int, str, Any]] = []  # (physics step it is due, key, message)
    pre = round(PRE_ROLL_S / dt)
    steps = pre + round(exp.duration_s / dt)
    epoch_ns = time.time_ns()
    log = _Log()
    meta = {"event": "experiment", **exp.meta(), "interface": interface, "topics": names,
            "t0_ns": epoch_ns, "source": "in-process HIL robot (simulated time)"}
    log.event(meta, epoch_ns)
    latest: dict[str, np.ndarray] = {}

    def ns(t: float) -> int:
        return epoch_ns + round(t * 1e9)

    for k in range(steps):
        t = (k - pre) * dt
        if k >= pre and (k - pre) % control_every == 0:
            for key, msg in command_messages(node, exp.command(t, latest)):
                data = log.add(names[key], msg, QoS.COMMAND, ns(t))
                queue.append((k + delay, key, type(msg).deserialize(data)))
        while queue and queue[0][0] <= k:
            _, key, cmd = queue.pop(0)
            robot_sim.apply(key, cmd)
        robot_sim.step()
        if k % publish_every == 0:
            signals = sensors(robot_sim.signals(), max(t, 0.0))
            for key, msg in robot_sim.interface.state_messages(signals, (ns(t + dt)) * 1e-9):
                data = log.add(names[key], msg, QoS.SENSOR, ns(t + dt))
                latest.update(node.decode(key, type(msg).deserialize(data)))
        if progress is not None and k % 500 == 0:
            progress(max(t, 0.0))
    return log.messages


# --- in real time, over a transport ----------------------------------------------------------
def record_transport(exp: Experiment, robot: Robot, bus: TransportBase, interface: str,
                     topics: Mapping[str, str] | None = None,
                     first_state_timeout_s: float = FIRST_STATE_TIMEOUT_S,
                     stop: threading.Event | None = None,
                     progress: Callable[[float], None] | None = None) -> list[LogMessage]:
    """Run `exp` against the robot on `bus` (real time); returns the log's messages."""
    from simreal.deploy.loop import run_loop

    _check_interface(exp, interface)
    node = interface_for(robot, interface)
    names = _topic_names(node, topics)
    stop = stop or threading.Event()
    log = _Log()
    latest: dict[str, np.ndarray] = {}
    have: set[str] = set()
    got_state = threading.Event()
    done = threading.Event()
    subs = {s.key: bus.subscription(names[s.key], s.type, s.qos) for s in node.state_topics}
    pubs = {s.key: bus.publisher(names[s.key], s.type, s.qos) for s in node.command_topics}

    def take(key: str) -> None:
        sub = subs[key]
        while not done.is_set():
            if not sub.wait(0.05):
                continue
            for msg in sub.take():
                log.add(names[key], msg, QoS.SENSOR, time.time_ns())
                try:
                    latest.update(node.decode(key, msg))
                except ValueError:
                    continue
                have.add(key)
                if len(have) == len(subs):
                    got_state.set()

    threads = [threading.Thread(target=take, args=(k,), daemon=True) for k in subs]
    for th in threads:
        th.start()
    try:
        if not got_state.wait(first_state_timeout_s):
            raise RecordError(f"no state from robot {robot.name!r} on "
                              f"{sorted(names[k] for k in subs)} within "
                              f"{first_state_timeout_s:g} s (is it running, on this DDS "
                              "domain, and --network given for a robot on the network?)")
        time.sleep(PRE_ROLL_S)
        t0_ns = time.time_ns()
        meta = {"event": "experiment", **exp.meta(), "interface": interface, "topics": names,
                "t0_ns": t0_ns, "source": f"{bus.name} transport (real time)"}
        log.event(meta, t0_ns)
        cycles = math.ceil(exp.duration_s * exp.rate_hz)
        start = time.monotonic()

        def cycle(k: int) -> bool:
            t = time.monotonic() - start
            for key, msg in command_messages(node, exp.command(k / exp.rate_hz, dict(latest))):
                data = log.add(names[key], msg, QoS.COMMAND, time.time_ns())
                msg.serialize = lambda *a, _d=data, **kw: _d  # sent as logged
                pubs[key].write(msg)
            if progress is not None and k % round(exp.rate_hz) == 0:
                progress(t)
            return not stop.is_set()

        run_loop(cycle, exp.rate_hz, cycles)
        time.sleep(0.05)  # the last states
    finally:
        for key, msg in damping_command(node, dict(latest)):
            log.add(names[key], msg, QoS.COMMAND, time.time_ns())
            pubs[key].write(msg)
        done.set()
        for th in threads:
            th.join(timeout=1.0)
    return log.messages


# --- the command ---------------------------------------------------------------------------
def write_log(path: str | Path, messages: list[LogMessage]) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_mcap(path, messages)


def _sim_robot_process(robot_dir: Path, exp: Experiment, interface: str, domain_id: int,
                       faults: Any, work: Path, env: dict[str, str],
                       sim: dict[str, Any]) -> Any:
    """Start the HIL robot process (hil/robot_proc.py) for `exp`; returns its Proc."""
    from simreal.hil.harness import STARTUP_TIMEOUT_S, Proc

    spec = {"robot_dir": str(robot_dir), "interface": interface,
            "sim": {**exp.sim_config(), **sim},
            "topics": None, "domain_id": domain_id, "network": False,
            "record": str(work / "robot.rec"), "instance": 0,
            "faults": faults.model_dump() if faults is not None else {}, "t0": None,
            "pushes": [], "resume": None, "fifo_priority": None, "snapshot": None,
            "max_s": exp.duration_s + 2 * STARTUP_TIMEOUT_S}
    path = work / "robot.json"
    path.write_text(json.dumps(spec))
    proc = Proc("robot", [sys.executable, "-m", "simreal.hil.robot_proc", str(path)], env,
                work / "robot.log")
    proc.wait_for("ready", STARTUP_TIMEOUT_S)
    return proc


def record(experiment: str, robot: Robot, out: str | Path, interface: str | None = None,
           domain_id: int = 0, network: bool = False, sim: bool = False,
           hidden: str | Path | None = None, faults: str | Path | None = None,
           scale: float = 1.0, in_process: bool = False, progress: bool = True
           ) -> dict[str, Any]:
    """Run EXPERIMENT on ROBOT and write OUT (MCAP); returns a summary.

    Without `sim`, against the robot on DDS domain `domain_id` (loopback only unless
    `network`). With `sim`, against a simulated robot: the HIL robot process on loopback (or,
    `in_process`, stepped here in simulated time), with `hidden` (a calibration YAML applied to
    it: parameters the fit should find) and `faults` (a HIL fault plan: sensor noise, bias)."""
    from simreal.calibration.schema import load_calibration
    from simreal.hil.config import load_faults

    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out}: already exists; give a new --out")
    exp = make_experiment(experiment, robot, scale)
    interface = interface or exp.interfaces[0]
    _check_interface(exp, interface)
    if (hidden or faults or in_process) and not sim:
        raise ValueError("--hidden, --faults and --in-process need --sim (a simulated robot)")
    plan = load_faults(faults) if faults else None
    calib = load_calibration(hidden) if hidden else None

    def say(text: str) -> None:
        if progress:
            print(f"simreal record: {text}", file=sys.stderr, flush=True)

    def tick(t: float) -> None:
        say(f"{exp.name}: t = {t:.1f} / {exp.duration_s:.1f} s")

    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="simreal-record-") as tmp:
        work = Path(tmp)
        sim_robot, overrides, delay = robot, {}, 0.0
        if calib is not None:  # the simulated robot's hidden parameters
            from simreal.calibration.apply import (
                calibrated_robot_dir,
                hidden_sim_config,
                split_latency,
            )

            calib, delay = split_latency(calib)
            sim_robot = calibrated_robot_dir(robot, calib, work / "robot", str(hidden))
            overrides = hidden_sim_config(robot, calib)
            if delay > 0 and not in_process:  # the link holds every command (hil/faults.py)
                from simreal.hil.config import FaultPlan

                base = plan.model_dump() if plan is not None else {"seed": 0, "faults": []}
                base["faults"] = [*base["faults"], {"kind": "delay", "delay_s": delay,
                                                    "direction": "command"}]
                plan = FaultPlan.model_validate(base)
        if sim and in_process:
            messages = record_in_process(exp, sim_robot, interface, plan, overrides,
                                         progress=tick, command_delay_s=delay)
        else:
            messages = _record_dds(exp, robot, sim_robot, interface, domain_id, network, sim,
                                   plan, work, say, tick, overrides)
    n = write_log(out, messages)
    say(f"wrote {n} messages to {out}")
    return {"experiment": exp.name, "robot": robot.name, "interface": interface,
            "out": str(out), "messages": n, "duration_s": exp.duration_s,
            "wall_s": round(time.monotonic() - t_start, 2), "simulated": sim,
            "hidden": str(hidden) if hidden else None}


def _record_dds(exp: Experiment, robot: Robot, sim_robot: Robot, interface: str,
                domain_id: int, network: bool, sim: bool, plan: Any, work: Path,
                say: Callable[[str], None], tick: Callable[[float], None],
                overrides: dict[str, Any]) -> list[LogMessage]:
    import signal

    from simreal.deploy import dds

    if network and sim:
        raise ValueError("--network reaches a real robot; --sim starts a simulated one on "
                         "loopback: give one of them")
    env = dict(os.environ)
    if not network:
        dds.use_loopback()
        dds.use_loopback(env)
    proc = None
    stop = threading.Event()
    old = None
    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        if sim:
            say(f"starting the simulated robot ({sim_robot.name}, {interface}, DDS domain "
                f"{domain_id}, loopback only)")
            proc = _sim_robot_process(sim_robot.directory, exp, interface, domain_id, plan,
                                      work, env, overrides)
        bus = dds.Transport(domain_id=domain_id, network=network)
        try:
            say(f"{exp.name} on {robot.name}: {exp.duration_s:.1f} s "
                f"({'network' if network else 'loopback only'}, domain {domain_id})")
            return record_transport(exp, robot, bus, interface, stop=stop, progress=tick)
        finally:
            bus.close()
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
        if proc is not None:
            proc.stop()
            proc.close()
