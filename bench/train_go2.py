"""Wall time and environment steps to a walking go2-flat policy, for each algorithm.

Walking: over `--episodes` 20 s episodes with velocity commands in [-1, 1] m/s (the task's
command ranges, domain randomization, noise and pushes on), the exported ONNX policy, run
through deploy's runtime as `simreal eval` runs it, tracks the commanded horizontal velocity
with lin_vel_error < 0.15 m/s and falls in under 5% of episodes.

Each algorithm trains with the task's defaults for it (`Go2Flat.train_defaults[algo]`, or the
algorithm's own defaults where the task has none) up to `--max-minutes` of training time.
Once the training statistics pass a gate (falls < 20%, tracking error < 0.3 m/s), the policy
is exported and evaluated every `--every-s` seconds of training; the clock stops at the first
evaluation that walks. Evaluation time is excluded from the wall time and reported beside it.
Where the time goes is measured too: environment steps (physics, observations, rewards,
resets), the algorithm's updates, and the rest (policy inference, storage, logging).

    python bench/train_go2.py [--algos ppo sac td3] [--seed 0] [--max-minutes 30]
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (threading environment before torch loads)

TASK = "go2-flat"
LIN_VEL_ERROR = 0.15  # m/s
FALL_RATE = 0.05
CURVE = ("episode/return", "episode/fall_rate", "episode/lin_vel_error", "episode/length_s",
         "reward/tracking_lin_vel", "reward/tracking_ang_vel")


class Timer:
    """Accumulated seconds inside a wrapped function."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, owner: type, name: str) -> None:
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        setattr(owner, name, timed)
        self._restore = (owner, name, inner)

    def unwrap(self) -> None:
        owner, name, inner = self._restore
        setattr(owner, name, inner)


def run(algo: str, args: argparse.Namespace, tmp: Path) -> dict:
    from simreal import api
    from simreal.sim.registry import get_task
    from simreal.sim.vec_env import VecEnv
    from simreal.train.algos import get_algo
    from simreal.train.export import export_onnx

    spec = get_algo(algo)
    runner_cls = spec.runner()
    agent_cls = getattr(runner_cls, "agent_class", None)
    update_owner = agent_cls if agent_cls not in (None, object) else __import__(
        "simreal.train.ppo", fromlist=["PPO"]).PPO
    env_timer, update_timer = Timer(), Timer()
    env_timer.wrap(VecEnv, "step")
    update_timer.wrap(update_owner, "update")
    defaults = getattr(get_task(TASK), "train_defaults", {}).get(algo, {})
    evals: list[dict] = []
    eval_s = 0.0
    last_eval = -1e9
    budget_s = args.max_minutes * 60
    split = {"env_step": 0.0, "update": 0.0}  # training only, as of the last callback

    last_print = [0.0]

    def callback(runner, stats) -> bool:
        nonlocal eval_s, last_eval
        split["env_step"], split["update"] = env_timer.seconds, update_timer.seconds
        if runner.wall_s - last_print[0] >= args.print_s:  # the training curve, on stdout
            last_print[0] = runner.wall_s
            print(json.dumps({"algo": algo, "env_steps": runner.env_steps,
                              "wall_s": round(runner.wall_s, 1),
                              **{k: round(float(stats[k]), 4) for k in CURVE if k in stats}}),
                  flush=True)
        if runner.wall_s >= budget_s:
            return True
        gate = (stats.get("episode/fall_rate", 1.0) < 0.2
                and stats.get("episode/lin_vel_error", 9.0) < 0.3)
        if not gate or runner.wall_s - last_eval < args.every_s:
            return False
        last_eval = runner.wall_s
        start = time.perf_counter()
        path = export_onnx(runner.exportable_actor(), runner.env.contract(),
                           tmp / f"{algo}.onnx")
        result = api.evaluate(path, episodes=args.episodes, seed=10_000 + runner.iteration)
        # evaluation steps its own env: keep that out of the training breakdown
        env_timer.seconds, update_timer.seconds = split["env_step"], split["update"]
        eval_s += time.perf_counter() - start
        row = {"iteration": runner.iteration, "env_steps": runner.env_steps,
               "wall_s": round(runner.wall_s, 1),
               **{k: round(result[k], 4) for k in ("lin_vel_error", "ang_vel_error",
                                                   "fall_rate", "distance", "torque",
                                                   "success_rate")}}
        evals.append(row)
        print(json.dumps({"algo": algo, **row}), flush=True)
        walks = result["lin_vel_error"] < LIN_VEL_ERROR and result["fall_rate"] < FALL_RATE
        return walks and not args.keep_training

    steps = args.max_steps or defaults.get("steps", 50_000_000) * 4
    envs = args.envs or defaults.get("envs")
    config = {**defaults.get("config", {}), **args.algo_config}
    try:
        summary = api.train(TASK, algo=algo, seed=args.seed, steps=steps, out=tmp / algo,
                            envs=envs, algo_config=args.algo_config,
                            eval_episodes=args.episodes, progress=False, callback=callback)
    finally:
        env_timer.unwrap()
        update_timer.unwrap()
    wall = summary["wall_s"]
    final = summary["metrics"]  # the run's own evaluation at the end of its budget
    evals.append({"iteration": summary["iterations"], "env_steps": summary["env_steps"],
                  "wall_s": round(wall, 1), "final": True,
                  **{k: round(final[k], 4) for k in ("lin_vel_error", "fall_rate")}})
    reached = [e for e in evals
               if e["lin_vel_error"] < LIN_VEL_ERROR and e["fall_rate"] < FALL_RATE]
    return {
        "algo": algo, "seed": args.seed, "envs": envs,
        "config": config, "reached": bool(reached),
        "wall_s_to_walking": reached[0]["wall_s"] if reached else None,
        "env_steps_to_walking": reached[0]["env_steps"] if reached else None,
        "train_wall_s": wall, "train_env_steps": summary["env_steps"],
        "env_steps_per_s": round(summary["env_steps"] / wall) if wall else None,
        "time_split_s": {"env_step": round(split["env_step"], 1),
                         "update": round(split["update"], 1),
                         "inference_and_rest": round(wall - split["env_step"]
                                                     - split["update"], 1)},
        "final_eval": summary["metrics"], "eval_wall_s": round(eval_s, 1),
        "evaluations": evals,
    }


def rough(args: argparse.Namespace, tmp: Path, start: Path | None) -> dict:
    """PPO on go2-rough for `--rough-minutes`, from a go2-flat PPO checkpoint's weights when
    one is given (the two tasks' observations have the same layout): the curriculum's mean
    level over training, and an evaluation on the terrain at the end."""
    from simreal import api
    from simreal.sim.registry import get_task
    from simreal.train.checkpoint import load
    from simreal.train.export import export_onnx
    from simreal.train.ppo import PPOConfig
    from simreal.train.runner import OnPolicyRunner

    cls = get_task("go2-rough")
    defaults = cls.train_defaults["ppo"]
    cfg = PPOConfig.model_validate(defaults["config"])
    env = api.make_env("go2-rough", defaults["envs"], args.seed)
    config = {"task": "go2-rough", "algo": "ppo", "seed": args.seed, "envs": env.num_envs,
              "steps": defaults["steps"], "robot": cls.robot_name,
              "task_config": cls.config_class().model_dump(mode="json"),
              "algo_config": cfg.model_dump(mode="json")}
    runner = OnPolicyRunner(env, cfg, tmp / "rough", args.seed, config)
    if start is not None:
        runner.policy.load_state_dict(load(start)["model"])
    levels: list[dict] = []
    budget_s = args.rough_minutes * 60

    def callback(r, stats) -> bool:
        if "curriculum/mean_level" in stats:
            levels.append({"iteration": r.iteration, "env_steps": r.env_steps,
                           "wall_s": round(r.wall_s, 1),
                           "mean_level": round(stats["curriculum/mean_level"], 3)})
        return r.wall_s >= budget_s

    runner.learn(defaults["steps"] * 10, callback=callback, progress=False)
    path = export_onnx(runner.exportable_actor(), env.contract(), tmp / "rough.onnx")
    result = api.evaluate(path, episodes=args.episodes, seed=20_000)
    return {"from_flat_checkpoint": start is not None, "train_wall_s": round(runner.wall_s, 1),
            "train_env_steps": runner.env_steps, "rows": cls.config_class().terrain.rows,
            "mean_level_start": levels[0]["mean_level"] if levels else None,
            "mean_level_end": levels[-1]["mean_level"] if levels else None,
            "mean_level_max": max((row["mean_level"] for row in levels), default=None),
            "final_eval": {k: v for k, v in result.items() if k not in ("task", "policy")},
            "levels": levels[::max(1, len(levels) // 50)]}


def main() -> None:
    from simreal.train.algos import ALGOS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--algos", nargs="*", default=list(ALGOS), choices=list(ALGOS),
                   help="none: only the go2-rough stage (with --rough-from)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-minutes", type=float, default=30.0, help="training time per algo")
    p.add_argument("--max-steps", type=int, default=None, help="env steps cap per algo")
    p.add_argument("--episodes", type=int, default=100, help="20 s episodes per evaluation")
    p.add_argument("--every-s", type=float, default=120.0, help="training s between evals")
    p.add_argument("--envs", type=int, help="environments (default: the task's for the algo)")
    p.add_argument("--algo-config", type=json.loads, default={},
                   help="JSON overrides of the task's algorithm settings")
    p.add_argument("--name", help="result file suffix (default: the algorithms)")
    p.add_argument("--keep-training", action="store_true",
                   help="train on after the first walking evaluation (to the budget)")
    p.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    p.add_argument("--print-s", type=float, default=30.0, help="training s between curve lines")
    p.add_argument("--rough-minutes", type=float, default=0.0,
                   help="then PPO on go2-rough this long (0: skip), from the PPO flat run")
    p.add_argument("--rough-from", type=Path, help="go2-flat PPO checkpoint to start it from")
    args = p.parse_args()
    tmp = args.out or Path(tempfile.mkdtemp(prefix="train_go2_"))
    rows = []
    for algo in args.algos:
        row = run(algo, args, tmp)
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"task": TASK, "criterion": {"lin_vel_error_below": LIN_VEL_ERROR,
                                          "fall_rate_below": FALL_RATE,
                                          "episodes": args.episodes, "episode_s": 20.0},
              "max_minutes": args.max_minutes, "results": rows}
    name = f"train_go2_s{args.seed}" + (f"_{args.name}" if args.name else
                                        "" if args.algos == list(ALGOS)
                                        else "_" + "_".join(args.algos))
    if args.rough_minutes > 0:
        flat = tmp / "ppo" / "checkpoints" / "latest.pt"
        start = args.rough_from or (flat if flat.is_file() else None)
        result["rough"] = rough(args, tmp, start)
        print(json.dumps(result["rough"]), flush=True)
        name += "_rough"
    print(f"wrote {_common.write_result(name, result)}")


if __name__ == "__main__":
    main()
