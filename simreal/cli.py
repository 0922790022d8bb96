"""The `simreal` command line: train, export, eval, tasks, robots."""

from __future__ import annotations

import argparse
import json
import sys

import simreal  # noqa: F401  (sets the threading environment before torch loads)
from simreal.registry import UnknownNameError, get_robot, get_task, robot_dirs, task_names
from train.algos import ALGOS


def _known_errors() -> tuple[type[BaseException], ...]:
    from pydantic import ValidationError

    from deploy.contract import ContractError
    from robots import RobotError
    from sim.backend import BackendError
    from train.checkpoint import CheckpointError

    return (UnknownNameError, RobotError, ContractError, CheckpointError, BackendError,
            ValidationError, FileNotFoundError, FileExistsError, ValueError)


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simreal", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a policy, export it and evaluate it")
    t.add_argument("task")
    t.add_argument("--algo", choices=list(ALGOS), help="algorithm (task default)")
    t.add_argument("--envs", type=_positive, help="parallel environments (task default)")
    t.add_argument("--steps", type=_positive, help="total environment steps (task default)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", help="run directory (default runs/<task>_<algo>_s<seed>_<time>)")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR")
    t.add_argument("--eval-episodes", type=_positive, default=1000)
    t.add_argument("--no-progress", action="store_true")

    e = sub.add_parser("export", help="export a checkpoint to ONNX with its policy contract")
    e.add_argument("checkpoint")
    e.add_argument("--out", required=True)

    v = sub.add_parser("eval", help="evaluate an ONNX policy through the deploy runtime")
    v.add_argument("policy")
    v.add_argument("--task", help="refuse the policy unless it was trained for this task")
    v.add_argument("--episodes", type=_positive, default=100)
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--json", action="store_true", help="print one JSON object")

    sub.add_parser("tasks", help="list the registered tasks")
    sub.add_parser("robots", help="list the registered robots")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except _known_errors() as exc:
        print(f"simreal: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("simreal: interrupted; the last checkpoint is intact", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    from simreal import api

    if args.command == "tasks":
        for name, target in sorted(task_names().items()):
            cls = get_task(name)
            print(f"{name:24s} robot={cls.robot_name:12s} {target}")
    elif args.command == "robots":
        for name in sorted(robot_dirs()):
            robot = get_robot(name)
            print(f"{name:12s} {robot.spec.kind:10s} actuators={len(robot.actuator_names)} "
                  f"{robot.spec.control.rate_hz:g} Hz  {robot.directory}")
    elif args.command == "train":
        summary = api.train(args.task, args.algo, args.envs, args.steps, args.seed, args.out,
                            args.resume, args.eval_episodes, progress=not args.no_progress)
        print(json.dumps(summary))
    elif args.command == "export":
        print(api.export(args.checkpoint, args.out))
    elif args.command == "eval":
        result = api.evaluate(args.policy, args.task, args.episodes, args.seed)
        if args.json:
            print(json.dumps(result))
        else:
            for key, value in result.items():
                print(f"{key:24s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
