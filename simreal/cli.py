"""The `simreal` command line: train, export, eval, play, sim2sim, tasks, robots, deploy, hil,
record, calibrate."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import simreal  # noqa: F401  (sets the threading environment before torch loads)
from simreal.core.jsonout import json_text
from simreal.robots.registry import UnknownNameError, get_robot, robot_dirs
from simreal.sim.registry import task_entries
from simreal.train.algos import ALGOS


def _known_errors() -> tuple[type[BaseException], ...]:
    from pydantic import ValidationError

    from simreal.deploy.contract import ContractError
    from simreal.play import PlayError
    from simreal.robots import RobotError
    from simreal.sim.backend import BackendError
    from simreal.train.checkpoint import CheckpointError

    return (UnknownNameError, RobotError, ContractError, CheckpointError, BackendError, PlayError,
            ValidationError, FileNotFoundError, FileExistsError, ValueError)


def _positive(text: str) -> int:
    """A positive whole number, also written as 3e5 or 300_000."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}"
                                         ) from None
    if not (value > 0 and value == int(value)):
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return int(value)


def _device(text: str) -> str:
    """cpu, cuda or cuda:N (what torch calls the devices simreal trains on)."""
    kind, _, index = text.partition(":")
    if kind == "cpu" and not index or kind == "cuda" and (not index or index.isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"must be cpu, cuda or cuda:N, got {text!r}")


class _GivenEpisodes(argparse.Action):
    """--episodes, remembering that it was given (eval --tracking's default is 10)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.episodes_given = True


def _domain_id(text: str) -> int:
    """A DDS domain: 0-232 (DDS maps each to UDP ports; ROS 2 documents the same range)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 232:
        raise argparse.ArgumentTypeError(f"must be a DDS domain id from 0 to 232, got {text!r}")
    return value


def _override_value(text: str) -> Any:
    """A `key=value` override's value as YAML reads it (numbers, true/false, [lists],
    {mappings}), with 3e5-style numbers as numbers (YAML 1.1 reads them as text)."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"cannot read override value {text!r}: {exc}") from None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() and "." not in value else number
    return value


def parse_overrides(items: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(task settings, algorithm settings) from `task.a.b=v` and `algo.c=v` items."""
    out: dict[str, dict[str, Any]] = {"task": {}, "algo": {}}
    for item in items:
        key, sep, text = item.partition("=")
        scope, _, path = key.partition(".")
        if not sep or scope not in out or not path or "" in path.split("."):
            raise ValueError(f"override {item!r}: write task.<setting>=<value> or "
                             "algo.<setting>=<value> (e.g. task.episode_s=10 "
                             "algo.learning_rate=3e-4)")
        node = out[scope]
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {item!r}: {part} is set to a value already")
        node[leaf] = _override_value(text)
    return out["task"], out["algo"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simreal", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a policy, export it and evaluate it",
                       description="Train TASK, export policy.onnx and evaluate it. Settings: "
                       "the task's defaults, then --task-config, then key=value overrides "
                       "(task.episode_s=10 algo.batch_size=4096), all validated before "
                       "anything runs. --resume RUN_DIR continues a run with its own task "
                       "and settings; --steps is then the run's new total.")
    t.add_argument("task", nargs="?", help="registered task name or module:Class (taken "
                                           "from the run with --resume)")
    t.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="task.<setting>=<value> or algo.<setting>=<value> (YAML values)")
    t.add_argument("--algo", choices=list(ALGOS), help="algorithm (task default)")
    t.add_argument("--envs", type=_positive, help="parallel environments (task default)")
    t.add_argument("--steps", type=_positive,
                   help="total environment steps, e.g. 3e5 (task default; rounded up to "
                        "whole iterations; with --resume the run's new total)")
    t.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    t.add_argument("--out", help="run directory (default runs/<task>_<algo>_s<seed>_<time>)")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its "
                                                       "newest intact checkpoint")
    t.add_argument("--task-config", metavar="YAML",
                   help="task settings: a mapping of the task's fields (or a run's "
                        "config.yaml, whose task settings are taken)")
    t.add_argument("--eval-episodes", type=_positive, default=1000,
                   help="episodes of the final evaluation (default 1000)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--backend", choices=["mujoco", "mjwarp"],
                   help="training simulator: mujoco (C, CPU; default) or mjwarp (MuJoCo Warp)")
    t.add_argument("--device", type=_device,
                   help="where the simulator and training run: cpu (default), cuda, cuda:N "
                        "(mjwarp only); under torchrun cuda is each rank's GPU "
                        "(docs/SCALING.md)")
    t.add_argument("--calibration", metavar="CALIB.yaml",
                   help="train on the calibrated robot (written to RUN_DIR/robot; deploy the "
                        "policy with --robot RUN_DIR/robot) with the task's randomization "
                        "ranges from the fit (docs/CALIBRATION.md)")

    e = sub.add_parser("export", help="export a checkpoint to ONNX with its policy contract")
    e.add_argument("checkpoint", help="a run's checkpoint (.pt), or an exported policy (.onnx) "
                                      "whose command feedback is to change")
    e.add_argument("--out", required=True, help="the ONNX file to write")
    e.add_argument("--command-feedback", metavar="AXES",
                   help="the deploy runtime's integral trim of the velocity command on these "
                        "axes, comma-separated: wz (yaw rate, by the gyro), vx, vy (speed, by "
                        "leg odometry); 'auto' (all three where leg odometry models the legs, "
                        "else wz); 'none' for none (docs/SIM2SIM.md); default: the task's")
    e.add_argument("--feedback-gain", type=float, metavar="PER_S",
                   help="its integral gain, 1/s (default 1.0)")
    e.add_argument("--feedback-limit", type=float, metavar="M_S",
                   help="the largest forward or lateral trim, m/s (default 0.25)")
    e.add_argument("--feedback-yaw-limit", type=float, metavar="RAD_S",
                   help="the largest yaw-rate trim, rad/s (default 0.5)")

    v = sub.add_parser("eval", help="evaluate an ONNX policy through the deploy runtime")
    v.add_argument("policy", help="the ONNX policy")
    v.add_argument("--task", help="refuse the policy unless it was trained for this task")
    v.add_argument("--episodes", type=_positive, default=1000, action=_GivenEpisodes,
                   help="episodes (default 1000, as training's final evaluation; with "
                        "--tracking: per command, default 10)")
    v.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    v.add_argument("--json", action="store_true", help="print one JSON object")
    v.add_argument("--robot", help="robot name or folder (a calibrated run's RUN_DIR/robot); "
                                   "default: the task's")
    v.add_argument("--task-config", metavar="YAML",
                   help="the task's settings the policy was trained with: a run's config.yaml "
                        "or a mapping (default: the task's defaults; training-only settings "
                        "are dropped)")
    v.add_argument("--tracking", action="store_true",
                   help="per-command tracking table: each command held 20 s from a standing "
                        "start, nominal dynamics plus sensor noise, errors after a 2 s settle; "
                        "JSON `tracking` rows and `tracking_ok` (docs/SIM2SIM.md)")
    v.add_argument("--commands", metavar="FILE",
                   help="with --tracking: the command table, YAML/JSON list of [vx, vy, wz] "
                        "(default: vx 0.3, 0.5, 1.0, -0.5; vy +-0.3; wz +-0.5)")

    s = sub.add_parser("sim2sim", help="the tracking table of an ONNX policy against another "
                                       "MJCF of its robot (docs/SIM2SIM.md)",
                       description="Run the policy through the deploy runtime against another "
                       "MJCF of the robot: joints matched by robot.yaml's names, the model's "
                       "own actuators on them replaced by robot.yaml's PD at the model's "
                       "physics rate and torque limits. Exit 2 names what the model lacks "
                       "(a joint, the floor, a free joint).")
    s.add_argument("policy", help="the ONNX policy")
    s.add_argument("--robot", required=True, help="registered robot name or robot folder")
    other = s.add_mutually_exclusive_group(required=True)
    other.add_argument("--mjcf", metavar="OTHER.xml", help="the other model of the robot")
    other.add_argument("--variant", choices=["hard"],
                       help="the robot's own MJCF rebuilt: hard = damping 2.0, frictionloss "
                            "0.2, dt 0.002, elliptic cones (impratio 100), soft feet, 45.43 "
                            "N m knees")
    s.add_argument("--tracking", action="store_true",
                   help="the full command table (default: one command, --command)")
    s.add_argument("--commands", metavar="FILE",
                   help="the command table from a YAML/JSON list of [vx, vy, wz]")
    s.add_argument("--command", nargs=3, type=float, metavar=("VX", "VY", "WZ"),
                   default=[0.5, 0.0, 0.0], dest="one_command",
                   help="without --tracking or --commands: the one command (default 0.5 0 0)")
    s.add_argument("--episodes", type=_positive, default=10,
                   help="episodes per command (default 10)")
    s.add_argument("--episode-s", type=float, default=20.0,
                   help="seconds each command is held (default 20)")
    s.add_argument("--imu-site", help="read orientation and gyro at this site (default: the "
                                      "free joint's body)")
    s.add_argument("--perturb", action="append", default=[], metavar="KEY=VALUE",
                   help="a model edit, repeatable: friction=0.3, latency=0.04 (s), "
                        "strength=0.8, mass=1.2 (scale), damping=2.5")
    s.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    s.add_argument("--json", action="store_true", help="print one JSON object")

    w = sub.add_parser("play", help="watch an ONNX policy: the viewer, or a video where "
                                     "there is no display")
    w.add_argument("policy", help="the ONNX policy")
    w.add_argument("--task", help="refuse the policy unless it was trained for this task")
    w.add_argument("--video", help="write this video (.mp4) instead of opening the viewer "
                                   "(default without a display: play_<task>.mp4)")
    w.add_argument("--episodes", type=_positive, default=1, help="episodes (default 1)")
    w.add_argument("--seed", type=int, default=0, help="random seed (default 0)")

    sub.add_parser("tasks", help="list the registered tasks")
    sub.add_parser("robots", help="list the registered robots")

    d = sub.add_parser("deploy", help="run an ONNX policy on a robot over ROS 2 (Cyclone DDS "
                                      "or rclpy) until Ctrl-C")
    d.add_argument("policy", help="the ONNX policy")
    d.add_argument("--robot", required=True, help="registered robot name or robot folder")
    d.add_argument("--transport", choices=["dds", "ros2"], default="dds",
                   help="dds: Cyclone DDS on the ROS 2 wire, no ROS install (default); "
                        "ros2: rclpy")
    d.add_argument("--domain-id", type=_domain_id, default=0,
                   help="DDS / ROS domain (default 0)")
    d.add_argument("--interface", choices=["generic", "native"],
                   help="generic ROS 2 messages or the robot's own (default: the config's)")
    d.add_argument("--config", help="node configuration YAML (topics, safety, trigger, ...)")
    d.add_argument("--network", action="store_true",
                   help="leave loopback: use CYCLONEDDS_URI / ROS discovery as configured")
    d.add_argument("--max-cycles", type=_positive, help="stop after this many control periods")

    h = sub.add_parser("hil", help="hardware-in-the-loop: the deploy node against a simulated "
                                   "robot behind the robot's topics; MCAP log and report")
    h.add_argument("--robot", required=True, help="registered robot name or robot folder")
    h.add_argument("--policy", required=True, help="the ONNX policy the node runs")
    h.add_argument("--scenario", help="scenario YAML (default: hover, or walk at 0.5 m/s)")
    h.add_argument("--faults", help="fault plan YAML (default: none)")
    h.add_argument("--out", help="run directory (default runs/hil_<robot>_<scenario>_<time>)")
    h.add_argument("--interface", choices=["generic", "native"],
                   help="override the scenario's interface")
    h.add_argument("--domain-id", type=_domain_id,
                   help="DDS domain (default: one of the run's own)")
    h.add_argument("--network", action="store_true",
                   help="leave loopback: DDS as CYCLONEDDS_URI / Cyclone's default say")
    h.add_argument("--real-robot", action="store_true",
                   help="start no simulated robot: run against the robot on the DDS domain")
    h.add_argument("--no-plots", action="store_true",
                   help="write the report and the MCAP log without the PNG figures")

    r = sub.add_parser("record", help="run a calibration experiment on a robot over DDS and "
                                      "write its log (MCAP)")
    r.add_argument("experiment", help="go2-air, go2-ground or quad-hover (docs/CALIBRATION.md)")
    r.add_argument("--robot", required=True, help="registered robot name or robot folder")
    r.add_argument("--out", help="log file (default runs/record_<experiment>_<time>.mcap)")
    r.add_argument("--interface", choices=["generic", "native"],
                   help="the robot's interface (default: the experiment's first)")
    r.add_argument("--domain-id", type=_domain_id, default=0, help="DDS domain (default 0)")
    r.add_argument("--network", action="store_true",
                   help="leave loopback: DDS as CYCLONEDDS_URI / Cyclone's default say")
    r.add_argument("--sim", action="store_true",
                   help="start a simulated robot (the HIL robot process, loopback) to record")
    r.add_argument("--hidden", metavar="CALIB.yaml",
                   help="with --sim: a calibration applied to the simulated robot (validation)")
    r.add_argument("--faults", metavar="FAULTS.yaml",
                   help="with --sim: a HIL fault plan (sensor noise and bias)")
    r.add_argument("--in-process", action="store_true",
                   help="with --sim: step the simulated robot here in simulated time (no DDS)")
    r.add_argument("--scale", type=float, default=1.0, help="shorten (<1) every phase")

    c = sub.add_parser("calibrate", help="fit simulator parameters to logs; write a "
                                         "calibration YAML and a report")
    c.add_argument("logs", nargs="+", help="MCAP logs of calibration experiments")
    c.add_argument("--robot", required=True, help="registered robot name or robot folder")
    c.add_argument("--out", required=True, help="calibration YAML (report: <stem>_report/)")
    c.add_argument("--sigmas", type=float, default=3.0,
                   help="randomization half-width in standard deviations of the fit")
    c.add_argument("--max-nfev", type=_positive, default=30,
                   help="least-squares function evaluations (first pass)")
    c.add_argument("--kinds", help="comma-separated parameter kinds to fit (default: all the "
                                   "experiments give; e.g. strength,torque_limit,latency)")
    return p


def _deploy(args: argparse.Namespace) -> int:
    """`simreal deploy`, kept apart from the rest: it must not load torch or mujoco."""
    import logging

    from pydantic import ValidationError

    from simreal.deploy.app import deploy
    from simreal.deploy.contract import ContractError
    from simreal.deploy.node import DeployError
    from simreal.robots import RobotError

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="simreal deploy: %(message)s")
    try:
        from simreal.deploy.dds import TransportError
        from simreal.deploy.ros2 import RclpyUnavailable

        summary = deploy(args.policy, get_robot(args.robot), args.transport, args.domain_id,
                         args.interface, args.network, args.config, args.max_cycles)
    except (UnknownNameError, RobotError, ContractError, DeployError, TransportError,
            RclpyUnavailable, ValidationError, FileNotFoundError, ValueError) as exc:
        print(f"simreal: error: {exc}", file=sys.stderr)
        return 2
    print(json_text(summary))
    return 0


def _hil(args: argparse.Namespace) -> int:
    """`simreal hil`: exit 0 when every check passed, 1 when one failed, 2 on bad input."""
    from simreal.deploy.contract import ContractError
    from simreal.hil.config import HilConfigError
    from simreal.hil.harness import HilError, run_hil
    from simreal.robots import RobotError

    try:
        report = run_hil(get_robot(args.robot), args.policy, args.scenario, args.faults,
                         args.out, args.domain_id, args.network, args.real_robot,
                         args.interface, plots=not args.no_plots)
    except (UnknownNameError, RobotError, ContractError, HilConfigError, FileNotFoundError,
            FileExistsError, ValueError) as exc:
        print(f"simreal: error: {exc}", file=sys.stderr)
        return 2
    except HilError as exc:
        print(f"simreal hil: failed: {exc}", file=sys.stderr)
        return 1
    print(json_text({"passed": report["passed"],
                      "checks": {c["name"]: c["passed"] for c in report["checks"]},
                      "out": str(report["out"])}))
    return 0 if report["passed"] else 1


def _calibration(args: argparse.Namespace) -> int:
    """`simreal record` and `simreal calibrate`: exit 0 done, 1 failed, 2 bad input."""
    import time
    from pathlib import Path

    from simreal.calibration.experiments import ExperimentError
    from simreal.calibration.logs import LogError
    from simreal.calibration.record import RecordError
    from simreal.calibration.schema import CalibrationError
    from simreal.hil.config import HilConfigError
    from simreal.robots import RobotError

    try:
        robot = get_robot(args.robot)
        if args.command == "record":
            from simreal.calibration.record import record

            out = args.out or Path("runs") / (
                f"record_{args.experiment}_{time.strftime('%Y%m%d-%H%M%S')}.mcap")
            result = record(args.experiment, robot, out, args.interface, args.domain_id,
                            args.network, args.sim, args.hidden, args.faults, args.scale,
                            args.in_process)
        else:
            from simreal.calibration.run import calibrate

            kinds = tuple(k.strip() for k in args.kinds.split(",")) if args.kinds else None
            calib = calibrate(args.logs, robot, args.out, args.sigmas, args.max_nfev,
                              kinds=kinds)
            result = {"out": args.out, "parameters": len(calib.parameters),
                      "rms_before": calib.fit.get("rms_before"),
                      "rms_after": calib.fit.get("rms_after"),
                      "report": str(Path(args.out).with_name(Path(args.out).stem + "_report"))}
    except (UnknownNameError, RobotError, ExperimentError, LogError, CalibrationError,
            HilConfigError, FileNotFoundError, FileExistsError, ValueError) as exc:
        print(f"simreal: error: {exc}", file=sys.stderr)
        return 2
    except RecordError as exc:
        print(f"simreal record: failed: {exc}", file=sys.stderr)
        return 1
    print(json_text(result))
    return 0


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[TextIO]:
    """Yield the real stdout for the command's result while everything else written to
    stdout (third-party logs: Warp's, exporters', C libraries') goes to stderr."""
    out = sys.stdout
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):  # captured (pytest) or replaced: Python only
        fd = None
    if fd is None:
        with contextlib.redirect_stdout(sys.stderr):
            yield out
        return
    out.flush()
    saved = os.dup(fd)
    try:
        os.dup2(sys.stderr.fileno(), fd)
        with open(saved, "w", closefd=False) as real, contextlib.redirect_stdout(sys.stderr):
            yield real
            real.flush()
    finally:
        sys.stderr.flush()
        os.dup2(saved, fd)
        os.close(saved)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # train's KEY=VALUE overrides may stand anywhere, also after options
    args, extra = parser.parse_known_args(argv)
    if args.command == "train":
        args.overrides += [x for x in extra if "=" in x and not x.startswith("-")]
        extra = [x for x in extra if x not in args.overrides]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "deploy":
        return _deploy(args)
    if args.command == "hil":
        return _hil(args)
    if args.command in ("record", "calibrate"):
        return _calibration(args)
    if args.command in ("tasks", "robots"):  # no torch, no mujoco: answers at once
        return _list(args)
    from simreal.train.run_dir import Interrupted, RunDirError

    with _stdout_to_stderr() as out:
        try:
            return _run(args, out)
        except Interrupted as exc:
            print(f"simreal: {exc}", file=sys.stderr)
            return exc.exit_code
        except RunDirError as exc:
            print(f"simreal: error: {exc}", file=sys.stderr)
            return exc.exit_code
        except _failures() as exc:
            print(f"simreal: failed: {exc}", file=sys.stderr)
            return 1
        except _known_errors() as exc:
            print(f"simreal: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("simreal: interrupted; the last checkpoint is intact", file=sys.stderr)
            return 130


def _failures() -> tuple[type[BaseException], ...]:
    """Errors of the work itself, not of its input: exit 1."""
    from simreal.train.export import ExportError
    from simreal.train.progress import TrainingDiverged

    return (TrainingDiverged, ExportError)


def _list(args: argparse.Namespace) -> int:
    if args.command == "tasks":
        for name, entry in sorted(task_entries().items()):
            print(f"{name:24s} robot={entry.robot:12s} {entry.target}")
    else:
        for name in sorted(robot_dirs()):
            try:
                robot = get_robot(name)
            except ValueError as exc:  # one broken robot folder does not hide the others
                print(f"{name:12s} (unusable: {exc})")
                continue
            print(f"{name:12s} {robot.spec.kind:10s} actuators={len(robot.actuator_names)} "
                  f"{robot.spec.control.rate_hz:g} Hz  {robot.directory}")
    return 0


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from simreal import api

    if args.command == "train":
        task, overrides = args.task, list(args.overrides)
        if task is not None and "=" in task:  # `simreal train --resume R task.x=1`
            task, overrides = None, [task, *overrides]
        task_config, algo_config = parse_overrides(overrides)
        if args.task_config:
            from_file = api.load_task_config(args.task_config)
            if task is not None:  # a bad value names the file it came from
                api.check_task_config(task, from_file, args.task_config)
            task_config = api._merged(from_file, task_config)
        summary = api.train(task, args.algo, args.envs, args.steps, args.seed, args.out,
                            args.resume, args.eval_episodes, progress=not args.no_progress,
                            task_config=task_config or None,
                            algo_config=algo_config or None, backend=args.backend,
                            device=args.device, calibration=args.calibration)
        print(json_text(summary), file=out)
    elif args.command == "export":
        print(api.export(args.checkpoint, args.out,
                         _feedback(args)), file=out)
    elif args.command == "play":
        from simreal.play import play

        result = play(args.policy, args.task, args.video, args.episodes, args.seed)
        print(json_text(result), file=out)
    elif args.command == "eval":
        task_config = api.load_task_config(args.task_config) if args.task_config else None
        if args.commands and not args.tracking:
            raise ValueError("--commands is the table of --tracking: add --tracking")
        if args.tracking:
            commands = _commands(args.commands)
            episodes = args.episodes if getattr(args, "episodes_given", False) else None
            result = api.evaluate_tracking(args.policy, args.task, commands, episodes,
                                           args.seed, args.robot, task_config)
        else:
            result = api.evaluate(args.policy, args.task, args.episodes, args.seed,
                                  args.robot, task_config)
        _print_result(result, args.json, out)
    elif args.command == "sim2sim":
        commands = (_commands(args.commands) if args.commands or args.tracking
                    else [args.one_command])
        if args.episode_s <= 0:
            raise ValueError(f"--episode-s must be positive, got {args.episode_s:g}")
        result = api.sim2sim(args.policy, args.robot, args.mjcf, args.variant, commands,
                             args.episodes, args.seed, args.imu_site,
                             _perturbations(args.perturb), args.episode_s)
        _print_result(result, args.json, out)
    return 0


def _feedback(args: argparse.Namespace) -> Any:
    """export's --command-feedback: "keep" (not given), None ('none') or its settings."""
    axes = args.command_feedback
    given = {k: v for k, v in (("gain", args.feedback_gain), ("limit", args.feedback_limit),
                               ("yaw_limit", args.feedback_yaw_limit)) if v is not None}
    if axes is None:
        if given:
            raise ValueError("--feedback-gain and the limits set --command-feedback's loop: "
                             "give --command-feedback AXES")
        return "keep"
    if axes.strip().lower() == "none":
        return None
    if axes.strip().lower() == "auto":
        return {"axes": "auto", **given}
    names = [a.strip() for a in axes.split(",") if a.strip()]
    from simreal.deploy.contract import AXES

    bad = [a for a in names if a not in AXES]
    if bad or not names:
        raise ValueError(f"--command-feedback {axes!r}: comma-separated axes of vx, vy, wz "
                         "(or 'auto', 'none')")
    return {"axes": names, **given}


def _commands(path: str | None) -> list[Any] | None:
    """A command table from --commands FILE (None: the default table)."""
    from simreal.evaluate import load_commands

    return load_commands(path) if path else None


def _perturbations(items: list[str]) -> dict[str, float]:
    """sim2sim's --perturb KEY=VALUE items as a mapping of numbers."""
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        try:
            out[key] = float(text)
        except ValueError:
            sep = ""
        if not sep or not key:
            raise ValueError(f"--perturb {item!r}: write KEY=NUMBER (friction, latency, "
                             "strength, mass, damping)")
    return out


def _print_result(result: dict[str, Any], as_json: bool, out: TextIO) -> None:
    if as_json:
        print(json_text(result), file=out)
        return
    for key, value in result.items():
        if key == "tracking":
            for row in value:
                print(f"  {row}", file=out)
        else:
            print(f"{key:24s} {value}", file=out)


if __name__ == "__main__":
    sys.exit(main())
