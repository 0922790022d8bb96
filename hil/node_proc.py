"""The deploy node of a HIL run, as its own process, with a recording tap on its transport.

    python -m hil.node_proc SPEC.json

It is deploy's node as `simreal deploy` runs it (deploy.app: the contract checked first,
`make_transport`, `run` with its loop, damping on SIGTERM), except that the transport is wrapped
in hil.record.TapTransport (every message taken and written is recorded) and each control
period leaves a CYCLE record (fresh state or not, stale periods, mode), each mode change an
EVENT. Like deploy/, it imports neither torch nor mujoco.

SPEC: policy, robot folder, DDS domain, network flag, node configuration (NodeConfig fields),
record file, summary file, instance, max_cycles, record_received (keep the bytes of
received messages: against a real robot, whose own records there are none).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from simreal.deploy.app import load_config, make_transport, run
from simreal.deploy.loop import set_realtime
from simreal.deploy.node import DeployNode
from simreal.deploy.policy import OnnxPolicy
from simreal.deploy.runner import PolicyRunner
from simreal.hil.record import RecordWriter, TapTransport
from simreal.robots import load_robot_dir


class RecordedNode(DeployNode):
    """DeployNode that records each control period and each mode change."""

    def __init__(self, *args: Any, rec: RecordWriter, **kwargs: Any):
        self.rec = rec
        self._fresh = False
        super().__init__(*args, **kwargs)
        self._changes = 0

    def poll(self) -> bool:
        self._fresh = super().poll()
        return self._fresh

    def cycle(self, k: int = 0) -> bool:
        out = super().cycle(k)
        s = self.safety
        for c in s.changes[self._changes:]:
            self.rec.event("mode", source="node", cycle=c.cycle, node_cycle=self.cycles,
                           old=c.old.value, new=c.new.value, reason=c.reason)
        self._changes = len(s.changes)
        self.rec.cycle(cycle=self.cycles, ready=self.ready, fresh=self._fresh,
                       stale=self.stale_periods, mode=s.mode.value, published=self.published,
                       nonfinite_state=self.nonfinite_state,
                       # the count so far: a node killed by a crash fault writes no summary
                       nonfinite_commands=s.nonfinite_events)
        return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"simreal hil node-{spec.get('instance', 0)}: %(message)s")
    cfg = load_config(spec.get("config") or {})
    policy = OnnxPolicy(spec["policy"])
    robot = load_robot_dir(spec["robot_dir"])
    runner = PolicyRunner(policy, robot)  # refuses a mismatched contract before any network
    rec = RecordWriter(spec["record"], f"node-{spec.get('instance', 0)}")
    if cfg.cpu is not None or cfg.fifo_priority is not None:
        # before DDS starts, so that its receive threads inherit the policy (run() applies it
        # again to the loop's thread)
        set_realtime(cfg.cpu, cfg.fifo_priority)
    bus = make_transport("dds", int(spec["domain_id"]), bool(spec.get("network")))
    stop = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: stop.set())
    try:
        tap = TapTransport(bus, rec, received_bytes=bool(spec.get("record_received")))
        node = RecordedNode(runner, tap, cfg, rec=rec)
        sc = node.safety.cfg
        rec.event("node_config", source="node", instance=spec.get("instance", 0),
                  rate_hz=node.rate_hz, watchdog_periods=sc.watchdog_periods,
                  soft_start_s=sc.soft_start_s, max_tilt_rad=sc.max_tilt_rad,
                  interface=cfg.interface, trigger=cfg.trigger, topics=node.topics,
                  low=node.limits.low, high=node.limits.high,
                  kp=node.limits.kp, kd=node.limits.kd, torque=node.limits.torque)
        print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)
        summary = run(node, spec.get("max_cycles"), stop)
    finally:
        bus.close()
    rec.event("node_summary", source="node", **summary)
    rec.close()
    tmp = Path(spec["summary"] + ".tmp")
    tmp.write_text(json.dumps(summary))
    os.replace(tmp, spec["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
