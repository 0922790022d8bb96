"""Wall time and environment steps to reach 95% success on quadrotor-hover.

Trains with the task's default settings for --algo (default: the task's default algorithm).
Once the training success rate passes --gate, every --every iterations the current policy is
exported to ONNX and evaluated through the deploy runtime on --episodes episodes; the
clock stops at the first evaluation at or above --target. Evaluation time is excluded from the
wall time (it is reported beside it).

    python bench/train_quadrotor.py [--algo ppo|sac|td3] [--seed 0] [--target 0.95]
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--algo", help="ppo, sac or td3 (default: the task's default)")
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--episodes", type=int, default=1000)
    p.add_argument("--gate", type=float, default=0.85, help="training success before evals")
    p.add_argument("--every", type=int, default=3, help="iterations between evaluations")
    p.add_argument("--max-steps", type=int, default=20_000_000)
    args = p.parse_args()

    from simreal import api

    evals: list[dict] = []
    eval_s = 0.0
    tmp = Path(tempfile.mkdtemp())

    def callback(runner, stats) -> bool:
        nonlocal eval_s
        if stats.get("episode/success_rate", 0.0) < args.gate or runner.iteration % args.every:
            return False
        start = time.perf_counter()
        path = export_onnx(runner.exportable_actor(), runner.env.contract(), tmp / "policy.onnx")
        result = evaluate(path, episodes=args.episodes, seed=10_000 + runner.iteration)
        eval_s += time.perf_counter() - start
        row = {"iteration": runner.iteration, "env_steps": runner.env_steps,
               "wall_s": round(runner.wall_s, 2), "success_rate": result["success_rate"],
               "position_error_mean": result["position_error_mean"]}
        evals.append(row)
        print(json.dumps(row), flush=True)
        return result["success_rate"] >= args.target

    summary = api.train("quadrotor-hover", algo=args.algo, seed=args.seed, steps=args.max_steps,
                        out=tmp / "run", eval_episodes=args.episodes, progress=False,
                        callback=callback)
    reached = [e for e in evals if e["success_rate"] >= args.target]
    result = {
        "task": "quadrotor-hover", "algo": summary["algo"], "seed": args.seed,
        "target": args.target,
        "episodes": args.episodes, "reached": bool(reached),
        "wall_s_to_target": reached[0]["wall_s"] if reached else None,
        "env_steps_to_target": reached[0]["env_steps"] if reached else None,
        "final_success_rate": summary["success_rate"], "eval_wall_s": round(eval_s, 1),
        "evaluations": evals,
    }
    name = f"train_quadrotor_{summary['algo']}_s{args.seed}"
    print(f"wrote {_common.write_result(name, result)}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
