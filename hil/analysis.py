"""From the records of a HIL run to its MCAP log, its checks and its report.

Message accounting. Every message has one SENT record at its sender (the robot for state, the
node for commands, the harness for user inputs) and RECEIVED records at the receiving
application. The link's drops, what the link still held when the robot stopped (delayed or held
messages, reported by the robot at its stop) and the receipts are matched to sends by topic and
identity (identical repeated messages by count, receipts going to the copies sent while a
receiver was connected). A send that nothing consumed was sent while no receiver was connected
(before a receiver's first receipt on that topic, or after the newest message it got from that
sender process: start-up, discovery, a crashed or restarting process, on its way when the
receiver stopped or the sender was killed), or
superseded (a take between its sending and the next message's emptied a full keep-last history:
best-effort sensor data, newest wins), or unrecorded (no receiver records: a real robot), or
else lost. The completeness check states, per topic: sent = received + dropped by injection +
in the link at the stop + unconnected + superseded + unrecorded (+ lost, which must be 0), and
logged (in the MCAP) = sent.

Standing checks, beside the scenario's own (hover, velocity, reach, track, lift):
- limits: every command the node sent is inside the robot's limits (joint position ranges,
  rotor speed 0..1, Unitree gains no higher than the contract's or the damping gain, finite or
  PX4's NaN "stop"); PD torque at command time is reported as a figure;
- watchdog: each run of K or more control periods without fresh state (stale, NaN, lost)
  puts the node in DAMP by its K-th period, and shorter runs do not;
- resume: after each dropout the policy runs again (RUN within the soft start of fresh state);
- robot failsafe: after a node crash the simulated robot's driver damps within its timeout;
- completeness, as above;
- left_soft_start, moved (the scenario's expect.activity): the robot did something: the node
  reached RUN, a quadrotor lifted off its pad, an arm's tool moved (a run in which nothing
  happened must not pass on checks it never exercised: a hover "held" on the pad);
- finite_commands, commands_received (expect.commands): the policy's outputs were finite (the
  node's count, less the periods whose state was non-finite), so were the commands on the
  wire, and enough commands reached the robot for the time a node and a robot were both up.
"""

from __future__ import annotations

import bisect
import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simreal.deploy import codecs, px4, unitree
from simreal.deploy import messages as m
from simreal.deploy.app import load_config
from simreal.deploy.interfaces import RobotInterface
from simreal.deploy.limits import CommandLimits, command_limits
from simreal.deploy.node import make_interface
from simreal.deploy.policy import OnnxPolicy
from simreal.deploy.runner import PolicyRunner
from simreal.deploy.transport import DEPTH, QoS
from simreal.hil.config import (
    Delay,
    FaultPlan,
    NodeCrash,
    Reorder,
    command_at,
    reference_at,
)
from simreal.hil.mcap_log import LogMessage, write_mcap
from simreal.hil.messages import String
from simreal.hil.record import CYCLE, EVENT, RECEIVED, SENT, TOPIC, TRUTH, Record, read_records

TYPES: dict[str, type] = {m.ros_type(c): c for c in (
    *m.ROS_TYPES, *unitree.MESSAGE_TYPES, *px4.MESSAGE_TYPES, String)}
RANGE_TOL = 1e-5  # rad: float32 rounding of Unitree targets
SAFETY_EVENTS = ("mode", "failsafe", "failsafe_cleared", "lift_off", "started", "process_kill",
                 "process_start", "process_exit", "push", "t0")


@dataclass
class Msg:
    topic: str
    type: str
    source: str
    t_sent: int
    key: int
    data: bytes
    t_recv: int | None = None
    receiver: str | None = None
    fate: str = ""  # received | dropped | unconnected | lost


@dataclass
class RunData:
    records: dict[str, list[Record]]
    t0_ns: int
    msgs: list[Msg] = field(default_factory=list)
    received_only: list[tuple[str, Record]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def t(self, t_ns: int) -> float:
        """Scenario time of a wall time."""
        return (t_ns - self.t0_ns) / 1e9


def load(work: Path, t0_ns: int | None) -> RunData:
    records = {p.stem: list(read_records(p)) for p in sorted(work.glob("*.rec"))}
    if t0_ns is None:  # the run never started: scenario time from the first record
        t0_ns = min((r[0].t_ns for r in records.values() if r), default=0)
    data = RunData(records, t0_ns)
    for src, recs in records.items():
        for r in recs:
            if r.kind == SENT:
                data.msgs.append(Msg(r.topic, r.type, src, r.t_ns, r.key, r.payload))
            elif r.kind == EVENT:
                data.events.append({"t": data.t(r.t_ns), "process": src, **r.json()})
    data.msgs.sort(key=lambda x: x.t_sent)
    data.events.sort(key=lambda e: e["t"])
    return data


# --- message accounting -------------------------------------------------------------------------
FATES = ("received", "dropped", "in_link", "unconnected", "superseded", "lost", "unrecorded")


def account(data: RunData, in_flight_s: float = 0.0) -> dict[str, dict[str, Any]]:
    """Match receipts, drops and what the link still held at the robot's stop to sends;
    per-topic counts.

    The faulty link and DDS keep a topic's order per writer, except for messages the link
    reordered on purpose. So a message a receiver never got was sent while it was connected
    only if it was sent after the receiver's first receipt and before the newest message the
    receiver did get from the same sender process (anything later was still on its way when
    the receiver stopped or the sender was killed, or while the receiver was down); a reordered
    one (or any, where identical messages make "the newest" unknown), before the receiver's
    last receipt from that sender less `in_flight_s` (the link's longest hold). Such a
    message is superseded if the take of the next message the receiver got (sent after it)
    emptied a full keep-last history, else lost."""
    sends: dict[tuple[str, int], list[Msg]] = defaultdict(list)
    for msg in data.msgs:
        sends[(msg.topic, msg.key)].append(msg)
    receipts: dict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
    marks: dict[str, dict[tuple[str, int], list[int]]] = {
        "link_drop": defaultdict(list), "link_pending": defaultdict(list),
        "link_reorder": defaultdict(list)}
    windows: dict[str, dict[str, list[int]]] = defaultdict(dict)  # topic -> source -> [a, b]
    dup_receipts: dict[str, int] = defaultdict(int)
    sent_topics = {x.topic for x in data.msgs}
    for src, recs in data.records.items():
        for r in recs:
            if r.kind == RECEIVED:
                receipts[(r.topic, r.key)].append((r.t_ns, src))
                w = windows[r.topic].setdefault(src, [r.t_ns, r.t_ns])
                w[1] = r.t_ns
                if r.payload and r.topic not in sent_topics:
                    data.received_only.append((src, r))  # a real robot's: no sender record
            elif r.kind == EVENT:
                ev = r.json()
                if ev.get("event") in marks:
                    marks[ev["event"]][(ev["topic"], int(ev["key"]))].append(r.t_ns)
    batches = _take_batches(data)

    def inside(msg: Msg) -> bool:
        return any(a <= msg.t_sent <= b for a, b in windows[msg.topic].values())

    # 1. the link's drops, receipts, what the link still held at the stop, by identity
    for (topic, key), group in sends.items():
        # a group holds one message, or several identical ones (a repeated cmd_vel, a
        # motors-off command): which copy a receipt belongs to cannot be told, so receipts go
        # to the copies sent while a receiver was connected, in order
        group.sort(key=lambda x: x.t_sent)
        _mark(group, marks["link_drop"].get((topic, key), []), "dropped", latest=True)
        rest = [x for x in group if not x.fate]
        got = sorted(receipts.get((topic, key), []))
        n = min(len(got), len(rest))
        dup_receipts[topic] += len(got) - n  # injected duplicates
        chosen = sorted(sorted(rest, key=lambda x: (not inside(x), x.t_sent))[:n],
                        key=lambda x: x.t_sent)
        for msg, (t_ns, src) in zip(chosen, got, strict=False):
            msg.fate, msg.t_recv, msg.receiver = "received", t_ns, src
        # after the receipts: a duplicate's second copy may be the one left in the link
        _mark(group, marks["link_pending"].get((topic, key), []), "in_link", latest=True)
    # 2. per receiver, what it got in send order: (send time, receipt time), and the end of its
    # window: the newest message it got; which copy of identical messages a receipt belongs to
    # is not known, so with those, at least its last receipt less the link's longest hold.
    # Order holds per writer only (a sender process killed mid-run takes what it had not yet
    # delivered with it, while its successor's messages still arrive), so windows end per
    # (topic, receiver, sender process).
    got_by: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    slack = int(in_flight_s * 1e9)
    ends: dict[tuple[str, str, str], int] = {}
    last_rx: dict[tuple[str, str, str], int] = {}
    received = [x for x in data.msgs if x.fate == "received" and x.receiver is not None
                and x.t_recv is not None]
    for msg in received:
        got_by[(msg.topic, msg.receiver)].append((msg.t_sent, msg.t_recv))
        rx = (msg.topic, msg.receiver, msg.source)
        last_rx[rx] = max(last_rx.get(rx, msg.t_recv), msg.t_recv)
    for msg in received:
        rx = (msg.topic, msg.receiver, msg.source)
        end = last_rx[rx] - slack if len(sends[(msg.topic, msg.key)]) > 1 else msg.t_sent
        ends[rx] = max(ends.get(rx, end), end)
    for rows in got_by.values():
        rows.sort()
    depths: dict[str, int] = {}

    def connected(msg: Msg, src: str, a: int) -> bool:
        rx = (msg.topic, src, msg.source)
        if msg.t_sent < a or rx not in ends:
            return False
        if (msg.topic, msg.key) in marks["link_reorder"]:
            return msg.t_sent <= last_rx[rx] - slack
        return msg.t_sent < ends[rx]

    def evicted(msg: Msg, src: str) -> bool:
        """Readers take in order, so a message sent after this one was taken in the first take
        that could have held it: that take (or, for a reordered one, any take up to it) found a
        full keep-last history."""
        rows = got_by[(msg.topic, src)]
        reordered = (msg.topic, msg.key) in marks["link_reorder"]
        i = bisect.bisect_right(rows, (msg.t_sent + (slack if reordered else 0), 2**63))
        if i == len(rows):
            return False
        bound = rows[i][1]
        takes = batches[(msg.topic, src)]
        if msg.topic not in depths:
            depths[msg.topic] = depth_of(data, msg.topic)
        j = bisect.bisect_left(takes, (bound if not reordered else msg.t_sent + 1, 0))
        while j < len(takes) and takes[j][0] <= bound:
            if takes[j][1] >= depths[msg.topic]:
                return True
            j += 1
        return False

    # 3. the rest: unrecorded, unconnected, superseded or lost
    for msg in data.msgs:
        if msg.fate:
            continue
        where = [src for src, (a, _b) in windows[msg.topic].items()
                 if connected(msg, src, a)]
        if not windows[msg.topic]:
            msg.fate = "unrecorded"  # no receiver records: a real robot's side
        elif not where:
            msg.fate = "unconnected"
        elif any(evicted(msg, src) for src in where):
            msg.fate = "superseded"  # the reader's keep-last history was full: newest won
        else:
            msg.fate = "lost"
    counts: dict[str, dict[str, Any]] = {}
    for msg in data.msgs:
        c = counts.setdefault(msg.topic, {"type": msg.type, "sender": set(), "sent": 0,
                                          **dict.fromkeys(FATES, 0)})
        c["sent"] += 1
        c[msg.fate] += 1
        c["sender"].add(msg.source.split("-")[0])
    for topic, c in counts.items():
        c["sender"] = "/".join(sorted(c["sender"]))
        c["duplicate_receipts"] = dup_receipts.get(topic, 0)
        c["logged"] = c["sent"]
    for _src, r in data.received_only:  # a real robot's messages: only their receipts exist
        c = counts.setdefault(r.topic, {"type": r.type, "sender": "(not recorded)", "sent": 0,
                                        **dict.fromkeys(FATES, 0), "duplicate_receipts": 0,
                                        "logged": 0})
        c["received"] += 1
        c["logged"] += 1
    return counts


def _mark(group: list[Msg], times: list[int], fate: str, latest: bool = False) -> None:
    """Each mark (made at `times`) to the earliest (or latest) copy sent before it with no fate
    yet; `group` in send order."""
    for t_mark in sorted(times):
        copies = [x for x in group if not x.fate and x.t_sent <= t_mark]
        victim = (copies[-1] if latest else copies[0]) if copies else None
        if victim is not None:
            victim.fate = fate


def depth_of(data: RunData, topic: str) -> int:
    """The reader history depth of a topic (deploy's QoS: sensor 5, command 10)."""
    for recs in data.records.values():
        for r in recs:
            if r.kind == TOPIC and r.topic == topic:
                return DEPTH[QoS(r.json()["qos"])]
    return DEPTH[QoS.SENSOR]


def _take_batches(data: RunData) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """Per (topic, receiver): each take as (time, messages taken); one take's receipts share
    their time stamp."""
    out: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for src, recs in data.records.items():
        for r in recs:
            if r.kind == RECEIVED:
                b = out[(r.topic, src)]
                if b and b[-1][0] == r.t_ns:
                    b[-1] = (r.t_ns, b[-1][1] + 1)
                else:
                    b.append((r.t_ns, 1))
    return out


def in_flight_s(plan: FaultPlan) -> float:
    """The longest a message can spend in the faulty link (delay, jitter, reorder hold)."""
    delay = sum(f.delay_s + f.jitter_s for f in plan.of(Delay))
    hold = max((f.hold_s for f in plan.of(Reorder)), default=0.0)
    return delay + hold + (0.01 if delay or hold else 0.0)


# --- node cycles, watchdog, resume ----------------------------------------------------------------
def node_runs(data: RunData) -> dict[str, dict[str, Any]]:
    out = {}
    for src, recs in data.records.items():
        if not src.startswith("node-"):
            continue
        cycles = [r.json() | {"t": data.t(r.t_ns)} for r in recs if r.kind == CYCLE]
        events = [r.json() | {"t": data.t(r.t_ns)} for r in recs if r.kind == EVENT]
        cfg = next((e for e in events if e["event"] == "node_config"), None)
        modes = [e for e in events if e["event"] == "mode"]
        summary = next((e for e in events if e["event"] == "node_summary"), None)
        out[src] = {"cycles": cycles, "modes": modes, "config": cfg, "summary": summary}
    return out


def watchdog_and_resume(runs: dict[str, dict[str, Any]]) -> tuple[dict, dict, list]:
    dropouts = []
    for src, run in runs.items():
        cfg, cycles, modes = run["config"], run["cycles"], run["modes"]
        if cfg is None or not cycles:
            continue
        k = int(cfg["watchdog_periods"])
        soft = max(1, round(cfg["soft_start_s"] * cfg["rate_hz"]))
        mode_at = {c["cycle"]: c["mode"] for c in cycles}
        i = 0
        while i < len(cycles):
            if cycles[i]["stale"] != 1:
                i += 1
                continue
            j = i
            while j + 1 < len(cycles) and cycles[j + 1]["stale"] == cycles[j]["stale"] + 1:
                j += 1
            first, last = cycles[i]["cycle"], cycles[j]["cycle"]
            before = mode_at.get(first - 1, cycles[i]["mode"])
            length = last - first + 1
            damp = next((e for e in modes if e["new"] == "damp" and
                         e["reason"].startswith("no fresh state") and
                         first <= e["node_cycle"] <= last), None)
            d = {"node": src, "t": cycles[i]["t"], "start_cycle": first,
                 "stale_periods": length, "mode_before": before, "watchdog_periods": k,
                 "damped_after_periods": None if damp is None else
                 damp["node_cycle"] - first + 1, "resumed_after_periods": None,
                 "node_ran_after_periods": cycles[-1]["cycle"] - last}
            if damp is not None:
                back = next((e for e in modes if e["new"] == "run" and
                             e["node_cycle"] > last), None)
                if back is not None:
                    d["resumed_after_periods"] = back["node_cycle"] - last
            elif not any(e["new"] in ("damp", "estop") and first <= e["node_cycle"] <= last
                         for e in modes):
                d["resumed_after_periods"] = 0  # the policy never stopped
            d["soft_start_periods"] = soft
            dropouts.append(d)
            i = j + 1
    exercised = [d for d in dropouts if d["mode_before"] in ("run", "soft_start")]
    long_ = [d for d in exercised if d["stale_periods"] >= d["watchdog_periods"]]
    short = [d for d in exercised if d["stale_periods"] < d["watchdog_periods"]]
    late = [d for d in long_ if d["damped_after_periods"] is None or
            d["damped_after_periods"] > d["watchdog_periods"]]
    spurious = [d for d in short if d["damped_after_periods"] is not None]
    watchdog = {
        "name": "watchdog",
        "passed": (not late and not spurious) if exercised else None,
        "statement": (
            f"{len(long_)} stale runs of >= K periods: DAMP by the K-th period in "
            f"{len(long_) - len(late)}; {len(short)} shorter runs: no DAMP in "
            f"{len(short) - len(spurious)}" if exercised else
            "not exercised: no control period without fresh state while the policy ran"),
        "engaged_after_periods": [d["damped_after_periods"] for d in long_],
        "watchdog_periods": sorted({d["watchdog_periods"] for d in dropouts}) or None,
    }
    unresumed = [d for d in exercised if d["resumed_after_periods"] is None and
                 d["node_ran_after_periods"] >= d["soft_start_periods"] + 5]
    slow = [d for d in exercised if d["resumed_after_periods"] is not None and
            d["resumed_after_periods"] > d["soft_start_periods"] + 2]
    # a restarted node (every node process after the first) must reach RUN again
    restarts = []
    for src, run in runs.items():
        if src.endswith("-0") or run["config"] is None or not run["cycles"]:
            continue
        soft = max(1, round(run["config"]["soft_start_s"] * run["config"]["rate_hz"]))
        back = next((e for e in run["modes"] if e["new"] == "run"), None)
        ran = run["cycles"][-1]["cycle"]
        restarts.append({"node": src, "ran_periods": ran,
                         "run_after_periods": None if back is None else back["node_cycle"],
                         "ok": back is not None or ran < soft + 5 + 50})
    failed_restarts = [r for r in restarts if not r["ok"]]
    tested = bool(exercised or restarts)
    statement = (f"{len(exercised)} dropouts; the policy ran again after "
                 f"{len(exercised) - len(unresumed) - len(slow)} (at once after the "
                 f"{len(short) - len(spurious)} shorter than K, within the soft start after "
                 "the others)")
    if restarts:
        statement += (f"; {len(restarts) - len(failed_restarts)} of {len(restarts)} restarted "
                      "nodes reached RUN")
    resume = {
        "name": "resume",
        "passed": (not unresumed and not slow and not failed_restarts) if tested else None,
        "statement": statement if tested else "not exercised: no dropout while the policy ran",
        "resumed_after_periods": [d["resumed_after_periods"] for d in exercised],
        "node_restarts": restarts,
    }
    return watchdog, resume, dropouts


# --- limits --------------------------------------------------------------------------------------
def limits_check(setup: Any, data: RunData, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    runner = PolicyRunner(OnnxPolicy(setup.policy), setup.robot)
    cfg = load_config(setup.scenario.node_config())
    limits = command_limits(setup.robot, runner.contract)
    iface = make_interface(runner, cfg, limits)
    names = next((r["config"]["topics"] for r in runs.values() if r["config"]), {})
    key_of = {v: k for k, v in names.items()}
    command_keys = {s.key for s in iface.command_topics}
    n = checked = 0
    problems: list[str] = []
    worst = 0.0
    for msg in data.msgs:
        key = key_of.get(msg.topic)
        if key not in command_keys or not msg.source.startswith("node"):
            continue
        cmd = iface.command_of(key, TYPES[msg.type].deserialize(msg.data))
        n += 1
        if "direct_actuator" in cmd:
            continue
        checked += 1
        bad = _outside(cmd, limits, iface)
        if "q" in cmd:
            span = limits.high - limits.low
            excess = np.maximum(limits.low - cmd["q"], cmd["q"] - limits.high) / span
            worst = max(worst, float(np.max(excess)))
        if bad and len(problems) < 10:
            problems.append(f"{msg.topic} at {data.t(msg.t_sent):.3f} s: {bad}")
        elif bad:
            problems.append("...")
    return {"name": "limits", "passed": not problems if checked else None,
            "statement": (f"{checked} commands checked against the robot's limits: "
                          f"{'none' if not problems else len(problems)} outside"
                          if checked else "no command was sent"),
            "commands": n, "problems": problems[:11],
            "max_range_excess_fraction": worst}


def _outside(cmd: dict[str, np.ndarray], limits: CommandLimits, iface: RobotInterface) -> str:
    if "rotor_speed" in cmd:
        s = cmd["rotor_speed"]
        if not iface.nonfinite_disarms and not np.isfinite(s).all():
            return f"non-finite rotor command {s.tolist()}"
        if (s < -1e-9).any() or (s > 1 + 1e-6).any():
            return f"rotor speed {np.round(s, 4).tolist()} outside [0, 1]"
        return ""
    q = cmd["q"]
    if not np.isfinite(q).all():
        return f"non-finite joint targets {q.tolist()}"
    if (q < limits.low - RANGE_TOL).any() or (q > limits.high + RANGE_TOL).any():
        idx = np.nonzero((q < limits.low - RANGE_TOL) | (q > limits.high + RANGE_TOL))[0]
        return "joint targets outside their range: " + ", ".join(
            f"#{i} {q[i]:.4f} not in [{limits.low[i]:.4f}, {limits.high[i]:.4f}]" for i in idx)
    return iface.command_problem(cmd, limits)  # what the interface adds (Unitree: CRC, gains)


# --- the robot did something; what the node sent ----------------------------------------------
RUNNING = ("soft_start", "run")  # the modes in which the node passes the policy's commands


def _intervals_length(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of (union of a) intersected with (union of b)."""

    def union(xs: list[tuple[float, float]]) -> list[tuple[float, float]]:
        out: list[tuple[float, float]] = []
        for lo, hi in sorted(x for x in xs if x[1] > x[0]):
            if out and lo <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], hi))
            else:
                out.append((lo, hi))
        return out

    total = 0.0
    for lo, hi in union(a):
        for lo2, hi2 in union(b):
            total += max(0.0, min(hi, hi2) - max(lo, lo2))
    return total


def _process_spans(data: RunData, prefix: str, ready_event: str, end_s: float
                   ) -> list[tuple[float, float]]:
    """Per process of a kind (node-, robot-): from its start (its `ready_event`, scenario time
    0 at the earliest) to its kill or own exit (or the end of the scenario)."""
    spans = []
    for src, recs in data.records.items():
        if not src.startswith(prefix):
            continue
        ready = next((data.t(r.t_ns) for r in recs if r.kind == EVENT
                      and r.json().get("event") == ready_event), None)
        if ready is None:
            continue
        end = end_s
        for e in data.events:
            if e.get("source") == "harness" and e.get("process") == src and \
                    e.get("event") in ("process_kill", "process_exit"):
                end = min(end, e["t"] if e["event"] == "process_kill" else e.get("at_s", e["t"]))
        spans.append((max(0.0, ready), min(end, end_s)))
    return spans


def activity_checks(setup: Any, data: RunData, runs: dict[str, dict[str, Any]],
                    truth: dict[str, np.ndarray], metrics: dict) -> list[dict[str, Any]]:
    """`left_soft_start`: a node process reached RUN (the policy's commands drove the robot
    after its soft start); `moved`: a quadrotor left its pad, an arm's tool (or any base, where
    the scenario asks) got `min_travel_m` from where it started. Not made (passed null) when the
    scenario's expect.activity is null: a robot meant to stay still."""
    act = setup.scenario.expect.activity
    kind = setup.robot.spec.kind
    if act is None:
        why = "not required: the scenario's expect.activity is null (the robot stays still)"
        return [{"name": "left_soft_start", "passed": None, "statement": why},
                {"name": "moved", "passed": None, "statement": why}]
    # --- left_soft_start: the node's mode events
    reached = sorted((e["t"], src) for src, run in runs.items() for e in run["modes"]
                     if e["new"] == "run")
    modes = {src: [e["new"] for e in run["modes"]] for src, run in runs.items()}
    first = reached[0] if reached else None
    if not act.left_soft_start:
        left = {"name": "left_soft_start", "passed": None,
                "statement": "not required (expect.activity.left_soft_start false); "
                             + (f"RUN at {first[0]:.2f} s" if first else "RUN never reached")}
    elif not runs or not any(run["cycles"] for run in runs.values()):
        left = {"name": "left_soft_start", "passed": False,
                "statement": "no control period of the node was recorded"}
    else:
        left = {"name": "left_soft_start", "passed": first is not None,
                "statement": (f"the node left its soft start: RUN at {first[0]:.2f} s "
                              f"({first[1]})" if first else
                              "the node never left its soft start: no RUN in any node process "
                              "(the policy's commands never drove the robot)")}
    left.update(run_at_s=None if first is None else first[0], modes=modes)
    # --- moved
    m_: dict[str, Any] = {}
    parts, ok = [], True
    if kind == "quadrotor" and act.lift_off:
        lifts = [e["t"] for e in data.events if e.get("event") == "lift_off"]
        if any(src.startswith("robot-") for src in data.records):
            lifted = bool(lifts)
            parts.append(f"lifted off its pad at {lifts[0]:.2f} s (rotor thrust above its "
                         "weight)" if lifted else "never lifted off its pad (rotor thrust "
                         "never above its weight)")
        else:  # a real robot: what the node commanded
            peak = _peak_thrust_ratio(setup, data, runs)
            lifted = peak is not None and peak > 1.0
            parts.append(f"the node commanded up to {_fmt(peak)} times the vehicle's weight "
                         "in thrust" + ("" if lifted else " (lift-off needs more than 1)"))
            m_["peak_commanded_thrust_over_weight"] = peak
        m_["lift_off_s"] = lifts
        ok &= lifted
    travel_min = act.min_travel_m if act.min_travel_m is not None else (
        0.01 if kind == "arm" else None)
    if truth and "position" in truth:
        pos = truth["position"]
        travel = float(np.linalg.norm(pos - pos[0], axis=1).max())
        m_["max_travel_m"] = travel
        m_["max_rise_m"] = float((pos[:, 2] - pos[0, 2]).max())
    else:
        travel = None
    if travel_min is not None:
        what = "its tool" if kind == "arm" else "its base"
        if travel is None:
            parts.append(f"{what}'s travel not known (no ground truth)")
        else:
            ok &= travel >= travel_min
            parts.append(f"{what} got {travel:.3f} m from where it started (at least "
                         f"{travel_min:g} m required)")
    metrics["activity"] = m_
    if not parts or (travel_min is not None and travel is None and len(parts) == 1):
        if parts:
            why = parts[0]
        elif kind == "legged":
            why = ("a legged robot's activity is its soft start (left_soft_start); "
                   "expect.activity.min_travel_m asks for the base to move")
        else:
            why = "expect.activity asks for no lift-off and no travel"
        moved = {"name": "moved", "passed": None, "statement": f"not checked: {why}"}
    else:
        moved = {"name": "moved", "passed": bool(ok), "statement": "; ".join(parts)}
    moved.update({k: v for k, v in m_.items()})
    return [left, moved]


def _peak_thrust_ratio(setup: Any, data: RunData, runs: dict[str, dict[str, Any]]
                       ) -> float | None:
    """The largest total thrust the node's rotor commands asked for, over the vehicle's
    weight (robot.yaml's thrust map)."""
    spec = setup.robot.spec
    iface, keys = _command_decoder(setup, runs)
    weight = spec.mass * 9.81
    peak = None
    for msg in data.msgs:
        if keys.get(msg.topic) is None or not msg.source.startswith("node"):
            continue
        cmd = iface.command_of(keys[msg.topic], TYPES[msg.type].deserialize(msg.data))
        if "rotor_speed" not in cmd:
            continue
        s = np.nan_to_num(np.clip(cmd["rotor_speed"], 0.0, 1.0), nan=0.0)
        ratio = float(spec.rotor_model.max_thrust * np.sum(s ** 2) / weight)
        peak = ratio if peak is None else max(peak, ratio)
    return peak


def _command_decoder(setup: Any, runs: dict[str, dict[str, Any]]
                     ) -> tuple[RobotInterface, dict[str, str]]:
    """The robot side's interface and its command topics (name -> key), heartbeats left out."""
    from simreal.hil.robot import robot_side_interface

    iface = robot_side_interface(setup.robot, setup.scenario.interface, setup.scenario.robot)
    names = next((r["config"]["topics"] for r in runs.values() if r["config"]), {})
    keys = {names.get(s.key, s.default): s.key for s in iface.command_topics
            if s.key not in iface.heartbeat_keys}
    return iface, keys


def _nonfinite(cmd: dict[str, np.ndarray], iface: RobotInterface) -> bool:
    for k in ("rotor_speed", "q", "dq", "kp", "kd", "tau"):
        v = cmd.get(k)
        if v is None or np.isfinite(v).all():
            continue
        if k == "rotor_speed" and iface.nonfinite_disarms and np.isnan(v).all():
            continue  # PX4's "stop": every motor NaN
        return True
    return False


def command_checks(setup: Any, data: RunData, runs: dict[str, dict[str, Any]],
                   metrics: dict) -> list[dict[str, Any]]:
    """`finite_commands`: the policy's outputs while the state was finite (the node's own count,
    less the periods whose state was non-finite: those are the watchdog's), and the command
    vectors the node sent and the robot received, non-finite in at most `max_nonfinite`.
    `commands_received`: per command topic, the commands the robot received (sent within the
    scenario) over those due, the control rate times the time a node and a robot were both up,
    at least `min_received_fraction`."""
    want = setup.scenario.expect.commands
    duration = setup.scenario.duration_s
    iface, keys = _command_decoder(setup, runs)
    # --- non-finite: the policy's outputs, per node process
    policy: dict[str, int | None] = {}
    for src, run in runs.items():
        cycles = run["cycles"]
        total = (run["summary"] or {}).get("nonfinite_commands")
        if total is None and cycles and "nonfinite_commands" in cycles[-1]:
            total = cycles[-1]["nonfinite_commands"]  # a node killed before its summary
        if total is None:
            policy[src] = None
            continue
        # periods with a non-finite state while the policy ran: the node counted them too
        from_state, prev = 0, 0
        for c in cycles:
            n = int(c.get("nonfinite_state", 0))
            if n > prev and c["mode"] in RUNNING:
                from_state += 1
            prev = n
        policy[src] = max(0, int(total) - from_state)
    sent_bad = received_bad = 0
    examples: list[str] = []
    per_topic: dict[str, dict[str, int]] = {}
    for msg in data.msgs:
        key = keys.get(msg.topic)
        if key is None or not msg.source.startswith("node"):
            continue
        t = data.t(msg.t_sent)
        if 0.0 <= t <= duration:
            c = per_topic.setdefault(msg.topic, {"sent": 0, "received": 0})
            c["sent"] += 1
            c["received"] += msg.fate == "received"
        cmd = iface.command_of(key, TYPES[msg.type].deserialize(msg.data))
        if "direct_actuator" in cmd or not _nonfinite(cmd, iface):
            continue
        sent_bad += 1
        received_bad += msg.fate == "received"
        if len(examples) < 5:
            examples.append(f"{msg.topic} at {t:.3f} s")
    known = [v for v in policy.values() if v is not None]
    unknown = sorted(src for src, v in policy.items() if v is None)
    finite_ok = sum(known) <= want.max_nonfinite and sent_bad <= want.max_nonfinite
    counted = ", ".join(f"{k}: {v}" for k, v in policy.items() if v is not None)
    missing = (f"not recorded for {', '.join(unknown)} (killed before its summary)"
               if unknown else "")
    stmt = (f"non-finite policy outputs with a finite state: "
            f"{sum(known)} ({'; '.join(x for x in (counted, missing) if x)})"
            if known else f"non-finite policy outputs: {missing or 'no node process'}")
    stmt += (f"; non-finite command vectors sent: {sent_bad}, received by the robot: "
             f"{received_bad} (at most {want.max_nonfinite} allowed)")
    finite = {"name": "finite_commands", "passed": bool(finite_ok), "statement": stmt,
              "policy_nonfinite": policy, "sent_nonfinite": sent_bad,
              "received_nonfinite": received_bad, "examples": examples,
              "max_nonfinite": want.max_nonfinite}
    # --- enough commands reached the robot
    rate = next((float(r["config"]["rate_hz"]) for r in runs.values() if r["config"]), None)
    nodes = _process_spans(data, "node-", "node_config", duration)
    robots = ([(0.0, duration)] if setup.real_robot else
              _process_spans(data, "robot-", "robot_config", duration))
    up_s = _intervals_length(nodes, robots)
    expected = rate * up_s if rate else 0.0
    fractions = {}
    for topic, c in per_topic.items():
        got = c["sent"] if setup.real_robot else c["received"]
        fractions[topic] = got / expected if expected > 0 else None
    metrics["commands"] = {"rate_hz": rate, "up_s": up_s, "expected_per_topic": expected,
                           "per_topic": per_topic, "fractions": fractions}
    if expected <= 0 or not fractions:
        received = {"name": "commands_received", "passed": False if nodes else None,
                    "statement": "no command was sent while a node and a robot were both up"
                    if nodes else "not exercised: no node process started"}
    else:
        low = min(v for v in fractions.values() if v is not None)
        what = "sent (a real robot's receipts are not recorded)" if setup.real_robot else \
            "received by the robot"
        received = {"name": "commands_received",
                    "passed": bool(low >= want.min_received_fraction),
                    "statement": (f"commands {what} over those due ({rate:g} Hz for the "
                                  f"{up_s:.2f} s a node and a robot were both up): "
                                  + ", ".join(f"{t} {f:.2f}" for t, f in fractions.items()
                                              if f is not None)
                                  + f" (at least {want.min_received_fraction:g} required)")}
    received.update(fractions=fractions, expected=expected,
                    min_received_fraction=want.min_received_fraction)
    return [finite, received]


# --- robot-side failsafe --------------------------------------------------------------------------
def failsafe_check(setup: Any, data: RunData) -> dict[str, Any]:
    crashes = setup.faults.of(NodeCrash)
    failsafes = [e for e in data.events if e.get("event") == "failsafe"]
    cfg = next((e for e in data.events if e.get("event") == "robot_config"), None)
    timeout = cfg["command_timeout_s"] if cfg else None
    dt = cfg["physics_dt"] if cfg else 0.0
    if not crashes:
        return {"name": "robot_failsafe", "passed": None,
                "statement": f"no node crash planned; the robot's driver failsafe engaged "
                             f"{len(failsafes)} times", "engaged": len(failsafes)}
    results, ok = [], True
    for f in crashes:
        after = [e for e in failsafes if e["t"] >= f.at_s - 0.05]
        e = after[0] if after else None
        # the driver checks once per physics step: within one step of its timeout
        within = e is not None and e["since_command_s"] <= timeout + dt + 1e-9
        ok &= within
        results.append({"crash_at_s": f.at_s, "failsafe_at_s": None if e is None else e["t"],
                         "since_last_command_s": None if e is None else e["since_command_s"],
                         "within_timeout": within})
    return {"name": "robot_failsafe", "passed": ok,
            "statement": (f"after each of {len(crashes)} node crashes the robot's driver "
                          f"damped within its timeout ({timeout} s robot time)" if ok else
                          "the robot's driver did not damp within its timeout after a node "
                          "crash"), "timeout_s": timeout, "crashes": results}


# --- scenario expectations ----------------------------------------------------------------------
def truth_series(data: RunData) -> dict[str, np.ndarray]:
    rows = [(data.t(r.t_ns), r.json()) for src, recs in data.records.items()
            if src.startswith("robot-") for r in recs if r.kind == TRUTH]
    rows.sort(key=lambda x: x[0])
    if not rows:
        return {}
    out: dict[str, np.ndarray] = {"t": np.array([t for t, _ in rows])}
    for k in rows[0][1]:
        try:
            out[k] = np.array([row[k] for _, row in rows], dtype=np.float64)
        except (ValueError, KeyError, TypeError):
            continue
    q = out["orientation"]
    out["body_velocity"] = _rotate_inverse(q, out["linear_velocity"])
    return out


def _track_check(setup: Any, truth: dict[str, np.ndarray], events: list[dict[str, Any]],
                 metrics: dict[str, Any]) -> dict[str, Any]:
    """The distance from the vehicle (ground truth) to the moving reference in force."""
    tr, t = setup.scenario.expect.track, truth["t"]
    ref, _ = reference_at(setup.scenario, t)
    sel = (t >= tr.from_s) & (t <= tr.to_s) & np.all(np.isfinite(ref), axis=1)
    err = np.linalg.norm(truth["position"] - ref, axis=1)[sel]
    mean = float(err.mean()) if err.size else None
    worst = float(err.max()) if err.size else None
    metrics["track"] = {"window_s": [tr.from_s, tr.to_s], "samples": int(sel.sum()),
                        "mean_error_m": mean, "max_error_m": worst}
    ok: bool | None = mean is not None and mean < tr.max_mean_error_m and (
        tr.max_error_m is None or worst < tr.max_error_m)
    statement = (f"distance to the reference over {tr.from_s:g}-{tr.to_s:g} s: mean "
                 f"{_fmt(mean)} m (limit {tr.max_mean_error_m:g} m), max {_fmt(worst)} m"
                 + (f" (limit {tr.max_error_m:g} m)" if tr.max_error_m is not None else ""))
    if setup.robot.spec.kind == "quadrotor" and not any(
            e.get("event") == "lift_off" for e in events):
        ok, statement = None, f"not exercised: the vehicle never left its pad ({statement})"
    return {"name": "track", "passed": ok, "statement": statement}


def _rotate_inverse(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    w, u = q[:, :1], q[:, 1:]
    t = 2.0 * np.cross(u, v)
    return v - w * t + np.cross(u, t)


def expectations(setup: Any, truth: dict[str, np.ndarray],
                 events: list[dict[str, Any]] | None = None) -> tuple[list[dict], dict]:
    checks, metrics = [], {}
    events = events or []
    ex = setup.scenario.expect
    if not truth:
        return checks, metrics
    t = truth["t"]
    if ex.hover is not None:
        h = ex.hover
        sel = (t >= h.from_s) & (t <= h.to_s)
        target = command_at(setup.scenario, "position", t)
        err = np.linalg.norm(truth["position"] - target, axis=1)[sel]
        ok: bool | None = bool(sel.any()) and bool(np.all(err < h.max_error_m))
        metrics["hover"] = {"window_s": [h.from_s, h.to_s], "samples": int(sel.sum()),
                            "max_error_m": float(err.max()) if err.size else None,
                            "mean_error_m": float(err.mean()) if err.size else None}
        statement = (f"position error over {h.from_s:g}-{h.to_s:g} s: max "
                     f"{_fmt(metrics['hover']['max_error_m'])} m (limit {h.max_error_m:g} m), "
                     f"mean {_fmt(metrics['hover']['mean_error_m'])} m")
        if setup.robot.spec.kind == "quadrotor" and not any(
                e.get("event") == "lift_off" for e in events):
            # resting on a pad at the target is not a hover (the moved check fails the run)
            ok, statement = None, f"not exercised: the vehicle never left its pad ({statement})"
        checks.append({"name": "hover", "passed": ok, "statement": statement})
    if ex.velocity is not None:
        v = ex.velocity
        sel = (t >= v.from_s) & (t <= v.to_s)
        cmd = command_at(setup.scenario, "velocity", t)
        err = np.linalg.norm(truth["body_velocity"][:, :2] - cmd[:, :2], axis=1)[sel]
        mean = float(err.mean()) if err.size else None
        ok = mean is not None and mean < v.max_mean_error
        metrics["velocity"] = {"window_s": [v.from_s, v.to_s], "samples": int(sel.sum()),
                               "mean_error_m_s": mean,
                               "mean_forward_m_s": float(truth["body_velocity"][sel, 0].mean())
                               if sel.any() else None}
        checks.append({"name": "velocity", "passed": ok,
                       "statement": f"mean |command - base velocity| (xy) over "
                                    f"{v.from_s:g}-{v.to_s:g} s: {_fmt(mean)} m/s (limit "
                                    f"{v.max_mean_error:g} m/s)"})
    if ex.track is not None:
        checks.append(_track_check(setup, truth, events, metrics))
    if ex.reach is not None:
        checks.append(_reach(ex.reach, setup, truth, metrics))
    if ex.lift is not None:
        checks.append(_lift(ex.lift, setup, truth, metrics))
    return checks, metrics


def _lift(r: Any, setup: Any, truth: dict[str, np.ndarray], metrics: dict) -> dict[str, Any]:
    """The object's centre (ground truth, world z: the table top is z = 0, as in the lift
    task) against the commanded height at every sample of the window."""
    if "object_position" not in truth:
        return {"name": "lift", "passed": False,
                "statement": "no ground truth of the object (a robot without object sensors)"}
    t = truth["t"]
    sel = (t >= r.from_s) & (t <= r.to_s)
    height = truth["object_position"][sel, 2]
    err = np.abs(height - command_at(setup.scenario, "lift_height", t)[sel, 0])
    ok = bool(sel.any()) and bool(np.all(err < r.max_height_error_m))  # NaN (no command) fails
    m_ = {"window_s": [r.from_s, r.to_s], "samples": int(sel.sum()),
          "max_height_error_m": float(err.max()) if err.size else None,
          "mean_height_error_m": float(err.mean()) if err.size else None,
          "mean_height_m": float(height.mean()) if height.size else None}
    metrics["lift"] = m_
    return {"name": "lift", "passed": ok,
            "statement": f"object height error over {r.from_s:g}-{r.to_s:g} s: max "
                         f"{_fmt(m_['max_height_error_m'])} m (limit {r.max_height_error_m:g} "
                         f"m), mean height {_fmt(m_['mean_height_m'])} m"}


def _reach(r: Any, setup: Any, truth: dict[str, np.ndarray], metrics: dict) -> dict[str, Any]:
    """An arm's tool (its ground truth) against the commanded pose over the window: the
    largest position error and rotation angle, each within its limit."""
    t = truth["t"]
    sel = (t >= r.from_s) & (t <= r.to_s)
    target = command_at(setup.scenario, "pose", t)[sel]
    err = np.linalg.norm(truth["position"][sel] - target[:, :3], axis=1)
    dot = np.abs((truth["orientation"][sel] * target[:, 3:]).sum(axis=1)).clip(max=1.0)
    angle = np.degrees(2 * np.arccos(dot))  # NaN where no pose was commanded yet: fails
    ok = bool(sel.any()) and bool(np.all(err < r.max_position_error_m)) and \
        bool(np.all(angle < r.max_angle_deg))
    m_ = {"window_s": [r.from_s, r.to_s], "samples": int(sel.sum()),
          "max_position_error_m": float(err.max()) if err.size else None,
          "mean_position_error_m": float(err.mean()) if err.size else None,
          "max_angle_deg": float(angle.max()) if angle.size else None,
          "mean_angle_deg": float(angle.mean()) if angle.size else None}
    metrics["reach"] = m_
    return {"name": "reach", "passed": ok,
            "statement": f"tool pose error over {r.from_s:g}-{r.to_s:g} s: max "
                         f"{_fmt(m_['max_position_error_m'])} m (limit "
                         f"{r.max_position_error_m:g} m), max {_fmt(m_['max_angle_deg'])} deg "
                         f"(limit {r.max_angle_deg:g} deg)"}


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


# --- latency -------------------------------------------------------------------------------------
def latencies(data: RunData, runs: dict[str, dict[str, Any]], state_topics: set[str],
              command_topics: set[str]) -> dict[str, np.ndarray]:
    """In ms, from a sender's write to the receiving application's take (so with the receiver's
    polling: a node on a timer takes once a period, the robot once a physics step): robot state
    to the node, node command to the robot, and state to command (the robot writes a state ->
    the robot takes the command the node computed from it)."""
    state_sent = {(x.topic, x.key): x for x in data.msgs if x.topic in state_topics}
    up = [(x.t_recv - x.t_sent) / 1e6 for x in data.msgs
          if x.topic in state_topics and x.t_recv is not None]
    down = [(x.t_recv - x.t_sent) / 1e6 for x in data.msgs
            if x.topic in command_topics and x.t_recv is not None]
    e2e = []
    by_sent = {(x.source, x.topic, x.t_sent): x for x in data.msgs}
    for src, recs in data.records.items():
        if not src.startswith("node-"):
            continue
        latest = None
        for r in recs:
            if r.kind == RECEIVED and r.topic in state_topics:
                latest = state_sent.get((r.topic, r.key), latest)
            elif r.kind == SENT and r.topic in command_topics and latest is not None:
                cmd = by_sent.get((src, r.topic, r.t_ns))
                if cmd is not None and cmd.t_recv is not None:
                    e2e.append((cmd.t_recv - latest.t_sent) / 1e6)
    return {"state_to_node_ms": np.array(up), "command_to_robot_ms": np.array(down),
            "state_to_command_ms": np.array(e2e)}


def _stats(x: np.ndarray) -> dict[str, float | int | None]:
    if x.size == 0:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {"n": int(x.size), "p50": float(np.percentile(x, 50)),
            "p99": float(np.percentile(x, 99)), "max": float(x.max())}


# --- the MCAP log ---------------------------------------------------------------------------------
def log_messages(data: RunData, truth_names: list[str]) -> list[LogMessage]:
    qos = {}
    for recs in data.records.values():
        for r in recs:
            if r.kind == TOPIC:
                qos[r.topic] = r.json()["qos"]
    out = [LogMessage(x.topic, TYPES[x.type], qos.get(x.topic, "sensor"),
                      x.t_recv if x.t_recv is not None else x.t_sent, x.t_sent, x.data)
           for x in data.msgs]
    out += [LogMessage(r.topic, TYPES[r.type], qos.get(r.topic, "sensor"), r.t_ns, r.t_ns,
                       r.payload) for _, r in data.received_only]
    for src, recs in data.records.items():
        for r in recs:
            if r.kind == EVENT:
                ev = {"process": src, **r.json()}
                out.append(LogMessage("/hil/events", String, "command", r.t_ns, r.t_ns,
                                      String(json.dumps(ev)).serialize()))
            elif r.kind == TRUTH:
                tr = r.json()
                stamp = r.t_ns / 1e9
                odo = codecs.odometry(np.array(tr["position"]), np.array(tr["orientation"]),
                                      np.array(tr["linear_velocity"]),
                                      np.array(tr["angular_velocity"]), stamp, "world", "base")
                out.append(LogMessage("/hil/ground_truth", m.Odometry, "sensor", r.t_ns,
                                      r.t_ns, odo.serialize()))
                effort = tr.get("drive_effort")
                js = codecs.joint_state(
                    [f"{n}_target" for n in truth_names] + list(truth_names),
                    np.array(tr["drive_target"] + tr["drive_measured"]),
                    np.zeros(2 * len(truth_names)),
                    None if effort is None else np.array(list(effort) * 2), stamp)
                out.append(LogMessage("/hil/actuators", m.JointState, "sensor", r.t_ns, r.t_ns,
                                      js.serialize()))
    return out


# --- all of it ---------------------------------------------------------------------------------
def analyze(setup: Any, times: dict[str, Any], plots: bool = True) -> dict[str, Any]:
    """The report (DIR/report.json), and the figures unless `plots` is False (matplotlib
    takes seconds a run: the tests draw them in one run only)."""

    data = load(setup.work, times.get("t0_wall_ns"))
    counts = account(data, in_flight_s(setup.faults))
    runs = node_runs(data)
    watchdog, resume, dropouts = watchdog_and_resume(runs)
    truth = truth_series(data)
    scenario_checks, metrics = expectations(setup, truth, data.events)
    cfg_topics = next((r["config"]["topics"] for r in runs.values() if r["config"]), {})
    robot = setup.robot
    from simreal.hil.robot import robot_side_interface

    iface = robot_side_interface(robot, setup.scenario.interface, setup.scenario.robot)
    state_topics = {cfg_topics.get(s.key, s.default) for s in iface.state_topics}
    # latency to the command itself, not to a heartbeat sent with it (PX4's offboard mode)
    command_topics = {cfg_topics.get(s.key, s.default) for s in iface.command_topics
                      if s.key not in iface.heartbeat_keys}
    lat = latencies(data, runs, state_topics, command_topics)

    lost = {t: c["lost"] for t, c in counts.items() if c["lost"]}
    unlogged = {t: c for t, c in counts.items() if c["logged"] != c["sent"] + (
        c["received"] if c["sender"] == "(not recorded)" else 0)}
    superseded = {t: c["superseded"] for t, c in counts.items() if c["superseded"]}
    completeness = {
        "name": "completeness",
        "passed": not lost and not unlogged,
        "statement": ("every topic: sent = received + dropped by injection + still in the "
                      "faulty link when the robot stopped + sent while no receiver was "
                      "connected + superseded in a full keep-last reader history (+ "
                      "unrecorded: no receiver records, a real robot's side); logged = sent"
                      if not lost and not unlogged else
                      f"messages lost in transport: {lost}; not logged: {sorted(unlogged)}"),
        "lost": lost,
        "superseded": superseded,
        "in_link_at_stop": {t: c["in_link"] for t, c in counts.items() if c["in_link"]},
    }
    checks = [limits_check(setup, data, runs), watchdog, resume, failsafe_check(setup, data),
              completeness, *activity_checks(setup, data, runs, truth, metrics),
              *command_checks(setup, data, runs, metrics), *scenario_checks]
    passed = all(c["passed"] is not False for c in checks)

    names = robot.actuator_names if robot.spec.rotors else [j.name for j in robot.spec.joints]
    mcap_path = setup.out / "run.mcap"
    n_logged = write_mcap(mcap_path, log_messages(data, names),
                          {"robot": robot.name, "policy": str(setup.policy),
                           "scenario": setup.scenario.name})
    node_summaries = {}
    for src in runs:
        p = setup.work / f"{src}-summary.json"
        if p.exists():
            node_summaries[src] = json.loads(p.read_text())
    robot_summaries = {e["process"]: {k: v for k, v in e.items()
                                      if k not in ("t", "process", "event", "source")}
                       for e in data.events if e.get("event") == "robot_summary"}
    keep = ("t", "process", "event", "old", "new", "reason", "node_cycle", "since_command_s",
            "status", "at_s")
    safety_events = [{k: e[k] for k in keep if k in e} for e in data.events
                     if e.get("event") in SAFETY_EVENTS]
    report = {
        "passed": passed,
        "robot": robot.name, "policy": str(setup.policy), "scenario": setup.scenario.name,
        "interface": setup.scenario.interface, "duration_s": setup.scenario.duration_s,
        "dds": {"domain_id": setup.domain_id,
                "network": "explicit" if setup.network else "loopback only"},
        "real_robot": setup.real_robot,
        "faults": setup.faults.model_dump()["faults"], "seed": setup.faults.seed,
        "checks": checks,
        "metrics": metrics,
        "messages": counts,
        "logged_messages": n_logged,
        "latency_ms": {k: _stats(v) for k, v in lat.items()},
        "timing": {"robot": robot_summaries, "node": {
            k: {kk: v.get(kk) for kk in ("cycles", "published", "compute_p50_us",
                                         "compute_p99_us", "loop")}
            for k, v in node_summaries.items()}},
        "dropouts": dropouts,
        "safety_events": safety_events,
        "files": {"mcap": "run.mcap"},
        "out": str(setup.out),
    }
    if plots:
        from simreal.hil.plots import write_all

        report["files"].update(write_all(setup, data, truth, runs, lat))
    report = _strict_json(report)
    tmp = setup.out / "report.json.tmp"
    tmp.write_text(json.dumps(report, indent=1, allow_nan=False))
    os.replace(tmp, setup.out / "report.json")
    return report


def _strict_json(x: Any) -> Any:
    """Plain JSON values: arrays as lists, sets sorted, NaN and infinities as null."""
    if isinstance(x, dict):
        return {str(k): _strict_json(v) for k, v in x.items()}
    if isinstance(x, list | tuple | set):
        return [_strict_json(v) for v in (sorted(x) if isinstance(x, set) else x)]
    if hasattr(x, "tolist"):
        return _strict_json(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
