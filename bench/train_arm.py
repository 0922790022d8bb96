"""Wall time and environment steps for an algorithm to reach a success rate on an arm task.

Trains with the task's default settings for the algorithm (overridable). Once the training
success rate passes --gate, every --every iterations the current policy is exported to ONNX
and evaluated through the deploy runtime (as `simreal eval` does) on --episodes episodes; the
clock stops at the first evaluation at or above --target. Evaluation time is excluded from the
wall time (reported beside it). Without reaching it, training runs to --max-steps and the final
policy is evaluated.

    python bench/train_arm.py --task arm-reach [--algo ppo] [--seed 0] [--target 0.9]
        [--envs N] [--max-steps N] [--algo-config JSON] [--task-config JSON]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (threading environment before torch loads)

from simreal.api import evaluate
from simreal.train.export import export_onnx

METRICS = {"arm-reach": ("position_error_mean", "orientation_error_deg_mean"),
           "arm-lift": ("lift_height_mean", "height_error_mean", "grasp_rate")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", default="arm-reach", choices=sorted(METRICS))
    p.add_argument("--algo", default=None, help="default: the task's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--episodes", type=int, default=500)
    p.add_argument("--gate", type=float, default=0.05, help="training success before evals")
    p.add_argument("--every", type=int, default=20, help="iterations between evaluations")
    p.add_argument("--envs", type=int, default=None)
    p.add_argument("--max-steps", type=int, default=None, help="default: the task's budget")
    p.add_argument("--algo-config", type=json.loads, default=None)
    p.add_argument("--task-config", type=json.loads, default=None)
    p.add_argument("--name", default=None, help="result file name (bench/results/NAME.json)")
    args = p.parse_args()

    from simreal import api

    evals: list[dict] = []
    eval_s = 0.0
    tmp = Path(tempfile.mkdtemp())
    keys = METRICS[args.task]
    t_start = time.perf_counter()

    last_success = [0.0]  # episodes end together (fixed length): not every iteration logs it

    def callback(runner, stats) -> bool:
        nonlocal eval_s
        last_success[0] = stats.get("episode/success_rate", last_success[0])
        print(json.dumps({"it": runner.iteration, "steps": runner.env_steps,
                          "wall_s": round(runner.wall_s, 1),
                          **{k: round(v, 4) for k, v in stats.items()
                             if k.startswith(("episode/", "reward/")) or k == "mean_reward"}}),
              flush=True)
        if last_success[0] < args.gate or runner.iteration % args.every:
            return False
        start = time.perf_counter()
        path = export_onnx(runner.exportable_actor(), runner.env.contract(), tmp / "policy.onnx")
        result = evaluate(path, episodes=args.episodes, seed=10_000 + runner.iteration,
                          task_config=runner.env.cfg.model_dump(mode="json"))
        eval_s += time.perf_counter() - start
        row = {"iteration": runner.iteration, "env_steps": runner.env_steps,
               "wall_s": round(runner.wall_s, 2), "success_rate": result["success_rate"],
               **{k: result[k] for k in keys}}
        evals.append(row)
        print("EVAL " + json.dumps(row), flush=True)
        return result["success_rate"] >= args.target

    summary = api.train(args.task, algo=args.algo, envs=args.envs, steps=args.max_steps,
                        seed=args.seed, out=tmp / "run", eval_episodes=args.episodes,
                        progress=False, callback=callback, algo_config=args.algo_config,
                        task_config=args.task_config)
    reached = [e for e in evals if e["success_rate"] >= args.target]
    result = {
        "task": args.task, "algo": summary["algo"], "seed": args.seed, "target": args.target,
        "episodes": args.episodes, "reached": bool(reached),
        "wall_s_to_target": reached[0]["wall_s"] if reached else None,
        "env_steps_to_target": reached[0]["env_steps"] if reached else None,
        "train_wall_s": summary["wall_s"], "env_steps": summary["env_steps"],
        "final_success_rate": summary["success_rate"],
        "final_metrics": summary["metrics"], "eval_wall_s": round(eval_s, 1),
        "total_wall_s": round(time.perf_counter() - t_start, 1),
        "algo_config": args.algo_config, "task_config": args.task_config, "envs": args.envs,
        "evaluations": evals, "run_dir": str(tmp / "run"),
    }
    name = args.name or f"train_{args.task.replace('-', '_')}_{summary['algo']}_s{args.seed}"
    print(f"wrote {_common.write_result(name, result)}")
    print(json.dumps({k: v for k, v in result.items() if k != "evaluations"}))


if __name__ == "__main__":
    main()
