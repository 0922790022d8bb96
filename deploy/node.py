"""The deploy node: transport + robot interface + policy runner + safety layer, one cycle at a time.

Each control period `cycle()`:
1. takes what arrived: state messages (decoded to signals by the robot interface), user
   commands (cmd_vel -> `velocity_command`, a PointStamped -> `target_position`, an Odometry
   on /reference -> `target_position` and `target_velocity`, each clamped to the range the
   policy was trained on; velocities fall back to zero when stale), the e-stop
   (std_msgs/Bool true engages; it latches until a true on the reset topic, which is refused
   while the e-stop input is still asserted);
2. builds the observation with the contract's terms, infers, maps to a command
   (PolicyRunner), and passes it through the safety layer: joint position, velocity (rate) and
   torque clamps, NaN guard, stale-input watchdog counted in control periods, tilt/fall
   damping, soft start from the measured pose;
3. publishes the safe command (or the damping command) through the interface's codecs.

Nothing is published before the first complete state (every state topic seen once). A state
with a non-finite value counts as not fresh and the last safe command is held. Mode changes
are logged with their reason (logger `simreal.safety`); `status_line()` summarises the node.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from simreal.core.config import StrictModel
from simreal.deploy import codecs, registry
from simreal.deploy.arm import orientation_command, pose_signals
from simreal.deploy.interfaces import (
    COMMAND_INPUTS,
    INPUT_TOPICS,
    InterfaceError,
    InterfaceSettings,
    RobotInterface,
    TopicSpec,
)
from simreal.deploy.limits import CommandLimits, command_limits, torque_bounds
from simreal.deploy.runner import PolicyRunner
from simreal.deploy.safety import Mode, SafetyConfig, SafetyLayer
from simreal.deploy.terms import contract_reads, term_reads
from simreal.deploy.transport import TransportBase

log = logging.getLogger("simreal.node")

RUNTIME_SIGNALS = {"last_action", "default_joint_pos"}


# trigger 'state': the state rate is judged over this many fresh cycles, and may exceed the
# policy's rate by this factor (a robot's clock and ours drift; messages bunch up)
RATE_WINDOW = 25
RATE_TOLERANCE = 1.3


class DeployError(ValueError):
    """A node that cannot start: the message names what disagrees."""


class SafetySettings(StrictModel):
    """Overrides of the safety layer's settings; unset ones take the robot kind's default."""

    watchdog_periods: int | None = Field(default=None, ge=1)
    soft_start_s: float | None = Field(default=None, ge=0)
    max_rate: float | None = Field(default=None, gt=0)
    max_tilt_rad: float | None = Field(default=None, gt=0)


# per robot kind: a quadrotor's hover policy was trained from tilts up to 45 degrees. A
# quadrotor's damping command stops its rotors, which in flight is a fall: its watchdog waits
# 25 periods (0.25 s at 100 Hz, inside the vehicle's own 0.5 s command timeout) while the
# vehicle holds its last command. At 5 periods, 30% loss each way (tests/assets/hil/drop30.yaml)
# stopped the rotors every few seconds and the hover and track policies fell; at 25 both held.
SAFETY_DEFAULTS = {
    "quadrotor": SafetyConfig(watchdog_periods=25, soft_start_s=0.4, max_tilt_rad=1.3),
    "legged": SafetyConfig(watchdog_periods=5, soft_start_s=1.0, max_tilt_rad=1.0),
    "arm": SafetyConfig(watchdog_periods=5, soft_start_s=2.0, max_tilt_rad=3.2),
}


class NodeConfig(StrictModel):
    """The node's settings (YAML, or ROS parameters in the ROS package); unknown keys and
    non-finite numbers are errors."""

    interface: str = Field(default="generic", description="the flavour of the robot's "
                           "interface: generic | native, or one registered in "
                           "deploy/registry.py")
    arm_command: Literal["forward_position", "joint_trajectory"] = Field(
        default="forward_position", description="an arm's command: ros2_control's forward "
        "position controller (Float64MultiArray) or a JointTrajectory (deploy/arm.py)")
    trigger: Literal["timer", "state"] = Field(
        default="timer", description="timer: a fixed-rate loop on an absolute schedule; "
        "state: a cycle on each state message (lock-step with the robot, which must then "
        "publish at the policy's rate, as the HIL simulator does), a stale cycle after one "
        "period without")
    topics: dict[str, str] = Field(default_factory=dict, description="topic name by key")
    safety: SafetySettings = SafetySettings()
    damping_kd: float = Field(default=1.0, ge=0, description="N m s/rad, Unitree damping")
    motor_index: dict[str, int] = Field(default_factory=dict,
                                        description="Unitree motor index by joint name")
    motor_map: list[int] | None = Field(default=None, description="PX4 motor slot per rotor")
    command_timeout_s: float = Field(default=0.5, gt=0,
                                     description="cmd_vel older than this reads as zero")
    status_period_s: float = Field(default=1.0, gt=0)
    spin_us: float = Field(default=50.0, ge=0, description="timer loop: poll the clock for "
                           "this long before each deadline instead of sleeping (less jitter on "
                           "an idle CPU; keep it under the loop's 100 us scheduler slice, "
                           "deploy/loop.py)")
    cpu: int | None = None
    fifo_priority: int | None = Field(default=None, ge=1, le=99)
    cpu_dma_latency_us: int | None = Field(
        default=None, ge=0, description="PM QoS: keep CPUs out of idle states slower than "
        "this to leave while the node runs (0: poll when idle); needs write access to "
        "/dev/cpu_dma_latency, else a warning (deploy/loop.py cpu_latency_request)")
    prewarm_us: float = Field(
        default=0.0, ge=0, description="trigger 'state': for this long before each expected "
        "state, wait actively, re-running the last cycle's work without side effects (decode, "
        "inference, encode) so that the cycle finds its code and data in the CPU's caches; "
        "costs that much CPU time per period (deploy/loop.py run_triggered)")

    @field_validator("interface")
    @classmethod
    def _registered_flavour(cls, value: str) -> str:
        # the pair with the robot's kind is checked when the node is built (make_interface)
        known = registry.flavours()
        if value not in known:
            raise ValueError(f"unknown interface {value!r} (known: {', '.join(known)})")
        return value

    @model_validator(mode="after")
    def _prewarm_needs_state_trigger(self) -> NodeConfig:
        if self.prewarm_us > 0 and self.trigger != "state":
            raise ValueError(f"prewarm_us: {self.prewarm_us:g} needs trigger: state (a timer "
                             "loop knows its deadline and spins for spin_us instead)")
        return self


class _InterfacesByKind(Mapping[str, tuple[type[RobotInterface], ...]]):
    """deploy/registry.py's classes by robot kind, read when asked (so a registration made
    later shows): the kind -> classes table the node kept before the registry."""

    def __getitem__(self, kind: str) -> tuple[type[RobotInterface], ...]:
        classes = tuple(cls for (k, _), cls in registry.registered().items() if k == kind)
        if not classes:
            raise KeyError(kind)
        return classes

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(k for k, _ in registry.registered()))

    def __len__(self) -> int:
        return len({k for k, _ in registry.registered()})


INTERFACES = _InterfacesByKind()


def make_interface(runner: PolicyRunner, cfg: NodeConfig,
                   limits: CommandLimits) -> RobotInterface:
    """The node's interface: the registry's class for the robot's kind and `cfg.interface`,
    with the contract's gains (limits) and the signals the policy reads."""
    robot = runner.robot
    kind = robot.spec.kind
    try:
        cls = registry.interface_class(kind, cfg.interface)
    except registry.UnknownInterfaceError as exc:
        raise DeployError(f"robot {robot.name!r} ({kind}) has no {cfg.interface} interface; "
                          f"use --interface {' or '.join(registry.flavours_of(kind))} ({exc})"
                          ) from None
    reads = contract_reads(runner.contract)
    settings = InterfaceSettings.of(cfg, kp=limits.kp, kd=limits.kd, reads=reads)
    try:
        return cls.from_settings(robot, settings)
    except InterfaceError as exc:
        raise DeployError(str(exc)) from None


# commands that fall back to zero (standing still, holding position) when they go stale
VELOCITY_COMMANDS = ("velocity_command", "target_velocity")


class _CommandInput:
    """A user command clamped to its trained range; velocities fall back to zero when stale."""

    def __init__(self, name: str, low: list[float], high: list[float], timeout_s: float | None):
        self.name = name
        self.low, self.high = np.array(low, dtype=np.float64), np.array(high, dtype=np.float64)
        zero = np.clip(np.zeros_like(self.low), self.low, self.high)
        self.default = zero if name in VELOCITY_COMMANDS else (self.low + self.high) / 2
        self.value = self.default.copy()
        self.timeout_s = timeout_s
        self.received_at = -np.inf
        self.clamped = 0

    def set(self, value: np.ndarray, now: float) -> None:
        value = np.where(np.isfinite(value), value, self.default)
        clipped = np.clip(value, self.low, self.high)
        if not np.array_equal(clipped, value):
            self.clamped += 1
            if self.clamped == 1 or self.clamped % 100 == 0:
                log.warning("%s %s clamped to the trained range [%s, %s] (%d times)",
                            self.name, np.round(value, 3).tolist(), self.low.tolist(),
                            self.high.tolist(), self.clamped)
        self.value, self.received_at = clipped, now

    def current(self, now: float) -> np.ndarray:
        if self.timeout_s is not None and now - self.received_at > self.timeout_s:
            return self.default
        return self.value


def tilt_of(q: np.ndarray) -> float:
    """Angle between the body's z axis and the world's, for a (w, x, y, z) quaternion."""
    w, x, y, z = q.tolist()
    n = w * w + x * x + y * y + z * z
    cos = 1.0 - 2.0 * (x * x + y * y) / (n if n > 0 else 1.0)
    return math.acos(min(1.0, max(-1.0, cos)))


class DeployNode:
    def __init__(self, runner: PolicyRunner, transport: TransportBase,
                 cfg: NodeConfig | None = None, clock: Callable[[], float] = time.monotonic):
        self.cfg = cfg = cfg or NodeConfig()
        self.runner, self.transport, self.clock = runner, transport, clock
        robot, contract = runner.robot, runner.contract
        self.rate_hz = contract.control_rate_hz
        try:
            self.limits = command_limits(robot, contract)
        except ValueError as exc:
            raise DeployError(str(exc)) from None
        self.interface = make_interface(runner, cfg, self.limits)
        self._check_signals()
        self.topics = self._topic_names()

        # command inputs the policy was trained with
        self.inputs = {name: _CommandInput(name, r.low, r.high,
                                           cfg.command_timeout_s
                                           if name in VELOCITY_COMMANDS else None)
                       for name, r in contract.commands.items()}
        self.static_signals: dict[str, np.ndarray] = {}
        if robot.spec.joints:
            self.static_signals["default_joint_pos"] = np.array(
                [[j.default for j in robot.spec.joints]])

        kind_defaults = SAFETY_DEFAULTS[robot.spec.kind]
        overrides = {k: v for k, v in cfg.safety.model_dump().items() if v is not None}
        safety_cfg = kind_defaults.model_copy(update=overrides)
        n = contract.action_dim
        self.safety = SafetyLayer(low=self.limits.low, high=self.limits.high,
                                  damping=np.zeros(n), rate_hz=self.rate_hz, cfg=safety_cfg,
                                  rate_limit=self.limits.rate,
                                  # rotor speeds: hold the collective, not an old torque
                                  hold=("collective" if contract.action.kind == "rotor_speed"
                                        else "last"))

        specs = self.interface.state_topics + self._input_specs()
        self.subs = {s.key: transport.subscription(self.topics[s.key], s.type, s.qos)
                     for s in specs}
        self.pubs = {s.key: transport.publisher(self.topics[s.key], s.type, s.qos)
                     for s in self.interface.command_topics}
        self.state_keys = [s.key for s in self.interface.state_topics]

        self.signals: dict[str, np.ndarray] = {}
        self._seen: set[str] = set()
        self.estop_input = False
        self.cycles = 0
        self.published = 0
        self.decode_errors = 0
        self.nonfinite_state = 0
        self.stale_periods = 0
        self.last_command: np.ndarray | None = None
        self.cycle_us: list[float] = []  # compute time per cycle (bounded)
        self._status_every = max(1, round(cfg.status_period_s * self.rate_hz))
        self._last_error = ""
        self._fresh_times: deque[float] = deque(maxlen=RATE_WINDOW)
        self._last_msgs: dict[str, Any] = {}  # the newest state message per topic (warm)
        log.info("node up: robot %s, %s interface over %s, %g Hz, topics %s", robot.name,
                 cfg.interface, transport.name, self.rate_hz,
                 {k: v for k, v in self.topics.items()})

    # --- set-up checks ---------------------------------------------------------------------
    def _check_signals(self) -> None:
        contract = self.runner.contract
        available = set(self.interface.provides) | set(contract.commands) | RUNTIME_SIGNALS
        problems = []
        for term in contract.observations:
            missing = [s for s in term_reads(term) if s not in available]
            if missing:
                problems.append(f"observation term {term.name!r} reads {missing}, which the "
                                f"{self.cfg.interface} interface of a "
                                f"{self.runner.robot.spec.kind} robot does not provide")
        fb = contract.command_feedback
        missing = [s for s in (fb.reads() if fb is not None else ()) if s not in available]
        if missing:
            problems.append(f"command_feedback ({', '.join(fb.axes)}) reads {missing}, which "
                            f"the {self.cfg.interface} interface does not provide")
        unknown = set(contract.commands) - set(COMMAND_INPUTS)
        if unknown:
            problems.append(f"commands {sorted(unknown)} have no input topic (known: "
                            f"{sorted(COMMAND_INPUTS)})")
        if (contract.action.kind == "rotor_speed") != (self.runner.robot.spec.kind ==
                                                       "quadrotor"):
            problems.append(f"action.kind {contract.action.kind!r} does not drive a "
                            f"{self.runner.robot.spec.kind} robot")
        if problems:
            raise DeployError("the policy cannot run on this interface:\n  " +
                              "\n  ".join(problems))

    def _input_specs(self) -> tuple[TopicSpec, ...]:
        wanted = {COMMAND_INPUTS[c] for c in self.runner.contract.commands} | {"estop",
                                                                                "estop_reset"}
        return tuple(s for s in INPUT_TOPICS if s.key in wanted)

    def _topic_names(self) -> dict[str, str]:
        specs = self.interface.state_topics + self.interface.command_topics + INPUT_TOPICS
        known = {s.key: s.default for s in specs}
        # a configuration may name the topics of every interface of this kind of robot
        kind = self.runner.robot.spec.kind
        siblings = {s.key for (k, _), cls in registry.registered().items() if k == kind
                    for s in cls.state_topics + cls.command_topics}
        unknown = set(self.cfg.topics) - set(known) - siblings
        if unknown:
            raise DeployError(f"topics: unknown keys {sorted(unknown)} for a "
                              f"{self.runner.robot.spec.kind} robot (known: "
                              f"{sorted(set(known) | siblings)})")
        return {**known, **{k: v for k, v in self.cfg.topics.items() if k in known}}

    # --- one control period ---------------------------------------------------------------
    def poll(self) -> bool:
        """Take what arrived; True when every state topic delivered this period."""
        now = self.clock()
        fresh = set()
        for key, sub in self.subs.items():
            msgs = sub.take()
            if not msgs:
                continue
            if key in self.state_keys:
                try:
                    self.signals.update(self.interface.decode(key, msgs[-1]))
                except ValueError as exc:
                    self._decode_error(key, exc)
                    continue
                fresh.add(key)
                self._seen.add(key)
                self._last_msgs[key] = msgs[-1]
            elif key == "estop":
                self._estop([bool(msg.data) for msg in msgs])
            elif key == "estop_reset":
                if any(msg.data for msg in msgs):
                    self._estop_reset()
            elif key == "cmd_vel":
                self.inputs["velocity_command"].set(codecs.twist_command(msgs[-1]), now)
            elif key == "target_position":
                self.inputs["target_position"].set(codecs.point_command(msgs[-1]), now)
            elif key == "reference":
                pos, vel = codecs.reference_command(msgs[-1])
                self.inputs["target_position"].set(pos, now)
                self.inputs["target_velocity"].set(vel, now)
            elif key == "target_pose":
                self._target_pose(msgs[-1], now)
            elif key == "lift_height":
                self.inputs["lift_height"].set(np.array([msgs[-1].data]), now)
        return len(fresh) == len(self.state_keys)

    def _target_pose(self, msg: Any, now: float) -> None:
        try:
            pos, quat = pose_signals(msg)
        except ValueError as exc:
            self._decode_error("target_pose", exc)
            return
        if "target_position" in self.inputs:
            self.inputs["target_position"].set(pos, now)
        if "target_orientation" in self.inputs:
            inp = self.inputs["target_orientation"]
            inp.set(orientation_command(quat, inp.low, inp.high), now)

    def _decode_error(self, key: str, exc: Exception) -> None:
        self.decode_errors += 1
        text = f"{self.topics[key]}: {exc}"
        if text != self._last_error:
            log.error("unusable state message on %s", text)
            self._last_error = text

    def _estop(self, values: list[bool]) -> None:
        if any(values):
            self.safety.estop("e-stop input")
        self.estop_input = values[-1]

    def _estop_reset(self) -> None:
        if self.safety.mode is not Mode.ESTOP:
            return
        if self.estop_input:
            log.warning("e-stop reset refused: the e-stop input is still asserted")
            return
        self.safety.reset_estop()
        self.runner.reset()

    @property
    def ready(self) -> bool:
        return len(self._seen) == len(self.state_keys)

    def compute(self, fresh: bool) -> np.ndarray:
        """Observation, inference and safety for the current signals: the safe command."""
        sig = self.signals
        values = np.concatenate(list(sig.values()))  # count_nonzero: cheaper than .all()
        finite = np.count_nonzero(np.isfinite(values)) == values.size
        if not finite:
            self.nonfinite_state += 1
            fresh = False
        damping = self._damping(sig) if finite else self.safety.damping
        self.safety.damping = damping
        now = self.clock()
        if finite:
            signals = {k: v[None] for k, v in sig.items()}
            signals.update(self.static_signals)
            for name, inp in self.inputs.items():
                signals[name] = inp.current(now)[None]
            _, command = self.runner.act(signals)
            command = command[0]
            measured = self.interface.measured(sig)
            tilt = tilt_of(sig["orientation"]) if "orientation" in sig else 0.0
            bounds = None
            if measured is not None and "joint_vel" in sig:
                bounds = torque_bounds(self.limits, measured, sig["joint_vel"])
        else:
            command = np.full(self.runner.contract.action_dim, np.nan)
            measured, tilt, bounds = None, 0.0, None
        before = self.safety.mode
        out = self.safety.step(command, fresh, tilt, measured=measured, bounds=bounds)
        if before in (Mode.DAMP, Mode.ESTOP) and self.safety.mode is Mode.SOFT_START:
            self.runner.reset()  # the state jumped: no stale history into the new start
        self.stale_periods = 0 if fresh else self.stale_periods + 1
        return out

    def cycle(self, k: int = 0) -> bool:
        fresh = self.poll()
        self.cycles += 1
        if fresh and self.cfg.trigger == "state":
            self._check_state_rate()
        if self.ready:
            t0 = time.perf_counter()
            command = self.compute(fresh)
            if len(self.cycle_us) < 100_000:
                self.cycle_us.append((time.perf_counter() - t0) * 1e6)
            self.publish(command, self.safety.mode)
        if self.cycles % self._status_every == 0:
            log.info(self.status_line())
        return True

    def warm_steps(self) -> list[Callable[[], None]]:
        """The last cycle's decode, inference and encode (to CDR bytes) again, as separate
        steps, results dropped and the interface's counters kept: on a CPU that other work
        shares, caches go cold while the node waits for state, and a cold cycle costs several
        times a warm one (bench/deploy_latency.py). The loop runs them while it waits for an
        expected state, polling for it between steps (deploy/loop.py run_triggered)."""
        return [self._warm_decode, self.runner.warm, self._warm_encode]

    @contextmanager
    def _interface_kept(self) -> Iterator[None]:
        """Decode and encode rebind the interface's counters and held pose: restore them."""
        kept = dict(vars(self.interface))
        try:
            yield
        finally:
            vars(self.interface).update(kept)

    def _warm_decode(self) -> None:
        with self._interface_kept(), suppress(ValueError):  # poll() already reported it
            for key, msg in self._last_msgs.items():
                self.interface.decode(key, msg)

    def _warm_encode(self) -> None:
        if self.last_command is None:
            return
        with self._interface_kept():
            for _, msg in self.interface.encode(self.last_command, self.safety.mode,
                                                self.signals):
                msg.serialize()

    def _check_state_rate(self) -> None:
        """trigger 'state' runs one cycle per state message: a robot publishing faster than
        the policy's rate (go2's lowstate comes at 500 Hz) would run the policy too fast, a
        silent sim-to-real mismatch. Hold damping, with the reason, instead."""
        times = self._fresh_times
        times.append(self.clock())
        if len(times) < RATE_WINDOW or self.safety.mode is Mode.DAMP:
            return
        hz = (len(times) - 1) / max(times[-1] - times[0], 1e-9)
        if hz > RATE_TOLERANCE * self.rate_hz:
            reason = (f"state messages arrive at {hz:.0f} Hz but the policy runs at "
                      f"{self.rate_hz:g} Hz: trigger 'state' would run it {hz / self.rate_hz:.1f}x "
                      "too fast; use trigger: timer, or publish state at the policy's rate")
            log.error(reason)
            self.safety.hold_damping(reason)

    def publish(self, command: np.ndarray, mode: Mode) -> None:
        for key, msg in self.interface.encode(command, mode, self.signals):
            self.pubs[key].write(msg)
        self.last_command = command
        self.published += 1

    def _damping(self, signals: dict[str, np.ndarray]) -> np.ndarray:
        """The interface's damping command inside the command limits: a hold-where-it-is pose
        is the measured one, which a finger pressed open by an object (or any joint a little
        past its range) puts outside them, and a position controller refuses that."""
        return np.minimum(np.maximum(self.interface.damping(signals), self.limits.low),
                          self.limits.high)

    def shutdown(self, repeats: int = 3) -> None:
        """Send the damping command (a few times, in case one is lost) before exiting."""
        if not self.ready:
            log.info("shutdown before any state arrived: nothing to damp")
            return
        damping = self._damping(self.signals)
        self.safety.hold_damping("shutdown")  # (an ESTOP stays ESTOP: it damps already)
        log.info("shutdown: sending the damping command")
        for _ in range(repeats):
            self.publish(damping, Mode.DAMP)

    # --- reporting ----------------------------------------------------------------------------
    def status_line(self) -> str:
        s = self.safety
        if not self.ready:
            missing = [self.topics[k] for k in self.state_keys if k not in self._seen]
            return f"status: waiting for state on {', '.join(missing)} (cycle {self.cycles})"
        lat = np.percentile(self.cycle_us[-1000:], 99) if self.cycle_us else float("nan")
        clamps = " ".join(f"{k}:{v}" for k, v in s.clamp_events.items())
        inputs = " ".join(f"{n}:{inp.clamped}" for n, inp in self.inputs.items())
        extra = "".join(f" {k}={v}" for k, v in self.interface.status().items())
        return (f"status: mode={s.mode.value} cycle={self.cycles} sent={self.published} "
                f"stale_periods={self.stale_periods} "
                f"estop_input={'on' if self.estop_input else 'off'} "
                f"nonfinite(cmd/state)={s.nonfinite_events}/{self.nonfinite_state} "
                f"decode_errors={self.decode_errors} clamps[{clamps}] "
                f"commands_clamped[{inputs}] compute_p99={lat:.0f}us{extra}")

    def summary(self) -> dict[str, Any]:
        us = np.array(self.cycle_us) if self.cycle_us else np.array([np.nan])
        return {"cycles": self.cycles, "published": self.published,
                "mode": self.safety.mode.value,
                "mode_changes": [{"cycle": c.cycle, "from": c.old.value, "to": c.new.value,
                                  "reason": c.reason} for c in self.safety.changes],
                "nonfinite_commands": self.safety.nonfinite_events,
                "nonfinite_states": self.nonfinite_state, "decode_errors": self.decode_errors,
                "clamps": dict(self.safety.clamp_events),
                "compute_p50_us": float(np.percentile(us, 50)),
                "compute_p99_us": float(np.percentile(us, 99))}

