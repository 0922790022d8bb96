"""The robot process of a HIL run: hil/robot's robot with the plan's faults, recorded.

    python -m hil.robot_proc SPEC.json

SPEC (written by hil/harness.py): robot folder, interface, the simulated robot's settings,
topic overrides, DDS domain and network flag, record file, instance number (0, then one more
per restart), fault plan, pushes, SCHED_FIFO priority, scenario time zero (monotonic; none:
the first command), `resume` (a snapshot to start from), `snapshot` (where to keep one),
`max_s`.

Standard output carries one JSON object per line for the harness: {"event": "ready"} once the
topics exist, {"event": "started", "t0": ...} at the first command, and a summary at the end.
SIGTERM and SIGINT end the run cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from simreal.deploy import dds  # noqa: E402
from simreal.deploy.loop import set_realtime  # noqa: E402
from simreal.deploy.transport import QoS  # noqa: E402
from simreal.hil.config import FaultPlan, Push  # noqa: E402
from simreal.hil.faults import FaultyLink, SensorFaults, clock_offset  # noqa: E402
from simreal.hil.record import RecordWriter  # noqa: E402
from simreal.hil.robot import RobotSimConfig, SimRobot  # noqa: E402
from simreal.hil.server import RobotServer  # noqa: E402
from simreal.robots import load_robot_dir  # noqa: E402

SNAPSHOT_PERIOD_S = 0.1


class RecordObserver:
    """hil/robot.Observer onto a record file."""

    def __init__(self, rec: RecordWriter, t0: list[float | None]):
        self.rec, self.t0 = rec, t0

    def sent(self, topic: str, msg: Any, data: bytes) -> None:
        self.rec.sent(topic, msg, data)

    def received(self, topic: str, msg: Any, t_ns: int) -> None:
        self.rec.received(topic, msg, t_ns)

    def event(self, kind: str, **fields: Any) -> None:
        self.rec.event(kind, source="robot", **fields)
        if kind == "started":
            self.t0[0] = fields["t0"]

    def truth(self, sim: SimRobot) -> None:
        tr = sim.truth()
        joints = sim.joint_truth()
        self.rec.truth(robot_time=sim.time, failsafe=sim.failsafe_active, **tr,
                       **{f"drive_{k}": v for k, v in joints.items()})


class SnapshotKeeper:
    """Keeps the robot's latest state in a file, for a restart that resumes from it. Creating
    and renaming files can block for hundreds of ms on a busy disk (measured here), so a
    thread of its own writes; the real-time loop only hands over the newest state."""

    def __init__(self, path: Path):
        self.path = path
        self._latest: dict[str, Any] | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._write_loop, daemon=True).start()

    def offer(self, snapshot: dict[str, Any]) -> None:
        self._latest = snapshot
        self._ready.set()

    def _write_loop(self) -> None:
        while True:
            self._ready.wait()
            self._ready.clear()
            snap, tmp = self._latest, self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(snap))
            os.replace(tmp, self.path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    if not spec.get("network"):
        dds.use_loopback()
    robot = load_robot_dir(spec["robot_dir"])
    sim = SimRobot(robot, spec["interface"], RobotSimConfig.model_validate(spec["sim"]))
    if spec.get("resume"):
        sim.restore(json.loads(Path(spec["resume"]).read_text()))
    plan = FaultPlan.model_validate(spec.get("faults") or {})
    instance = int(spec.get("instance", 0))
    rec = RecordWriter(spec["record"], f"robot-{instance}")
    t0: list[float | None] = [spec.get("t0")]

    def scenario_time() -> float:
        return time.monotonic() - t0[0] if t0[0] is not None else -1.0

    observer = RecordObserver(rec, t0)
    link = FaultyLink(plan, instance, lambda kind, **f: rec.event(kind, source="robot", **f),
                      scenario_time)
    sensors = SensorFaults(plan, instance)
    pushes = sorted((Push.model_validate(p) for p in spec.get("pushes", [])),
                    key=lambda p: p.at_s)
    keeper = SnapshotKeeper(Path(spec["snapshot"])) if spec.get("snapshot") else None
    last_snap = [0.0]

    def on_tick(t: float) -> None:
        while pushes and t >= pushes[0].at_s:
            p = pushes.pop(0)
            sim.push(p.velocity, p.force, p.duration_s)
            rec.event("push", source="robot", at_s=p.at_s, velocity=p.velocity, force=p.force)
        if keeper is not None and sim.started and sim.time - last_snap[0] >= SNAPSHOT_PERIOD_S:
            keeper.offer(sim.snapshot())
            last_snap[0] = sim.time

    if spec.get("fifo_priority"):  # before DDS starts: its threads inherit the policy
        for warning in set_realtime(None, int(spec["fifo_priority"])):
            rec.event("realtime_warning", source="robot", warning=warning)
    bus = dds.Transport(domain_id=int(spec["domain_id"]), network=bool(spec.get("network")))
    server = RobotServer(sim, bus, spec.get("topics"), link=link, observer=observer,
                         sensor_filter=sensors, clock=clock_offset(plan), on_tick=on_tick)
    for s in server.state_specs:
        rec.topic(server.topics[s.key], s.type, s.qos)
    for s in sim.interface.command_topics:
        rec.topic(server.topics[s.key], s.type, QoS.COMMAND)
    stop = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: stop.set())
    rec.event("robot_config", source="robot", instance=instance, physics_dt=sim.dt,
              state_rate_hz=1.0 / (server.publish_every * sim.dt),
              command_timeout_s=sim.timeout, interface=spec["interface"],
              topics=server.topics, resumed=bool(spec.get("resume")))
    print(json.dumps({"event": "ready", "instance": instance}), flush=True)
    try:
        summary = server.run(stop, spec.get("max_s"), t0=t0[0])
    finally:
        bus.close()
    summary["link"] = link.counts()
    summary["link"]["pending_at_stop"] = link.report_pending()
    summary["sensor_faults"] = sensors.applied
    rec.event("robot_summary", source="robot", **summary)
    rec.close()
    print(json.dumps({"event": "summary", **summary}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
