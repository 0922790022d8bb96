"""PPO, SAC, TD3 and rsl_rl's PPO side by side: wall time and env steps to a success threshold.

For every task, algorithm and seed, one training run with the task's default settings for that
algorithm (rsl_rl's PPO gets our PPO's settings for the task, through its own config). Every
--every-s seconds of training time the current policy is exported to ONNX and evaluated
through the deploy runtime (as `simreal eval` does): a quick check on --quick episodes, and
when that reaches --target minus 0.05, a full evaluation on --episodes episodes. The clock
stops at the first full evaluation at or above --target; evaluation time is excluded (and
reported). A run that does not get there stops at --max-steps or --max-wall-s of training.

Writes bench/results/compare_algos_<task>.json (every run, every evaluation, and per algorithm
the median time and steps to the target) and a PNG of success against training wall time.
With --append, runs are added to that file's (replacing the same algorithm and seed), so the
comparison can be built up over several invocations. --set ALGO.KEY=VALUE overrides one field
of an algorithm's config (a JSON value), e.g. --set sac.amp=true; --task-config FILE merges a
YAML mapping onto the task settings every run trains with (the task's training defaults for the
algorithm, as `simreal train` uses them); --name SUFFIX writes compare_algos_<task>_<SUFFIX>.

    python bench/compare_algos.py [--tasks quadrotor-hover] [--algos ppo sac td3 rsl_rl_ppo]
                                  [--seeds 0 1 2] [--target 0.95] [--episodes 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _common

ALGOS = ("ppo", "sac", "td3", "rsl_rl_ppo")


class Evaluator:
    """The evaluation schedule of one run; `__call__` returns True once the target is met."""

    def __init__(self, args: argparse.Namespace, contract, tmp: Path):
        self.args, self.contract, self.tmp = args, contract, tmp
        self.evals: list[dict[str, Any]] = []
        self.eval_s = 0.0
        self.next_at = args.every_s
        self.reached: dict[str, Any] | None = None

    def due(self, wall_s: float) -> bool:
        return wall_s >= self.next_at

    def __call__(self, actor, env_steps: int, wall_s: float, force: bool = False) -> bool:
        from simreal.api import evaluate
        from simreal.train.export import export_onnx

        if not (force or self.due(wall_s)):
            return False
        self.next_at = wall_s + self.args.every_s
        start = time.perf_counter()
        path = export_onnx(actor, self.contract, self.tmp / "policy.onnx")
        seed = 10_000 + len(self.evals)
        quick = evaluate(path, episodes=self.args.quick, seed=seed)["success_rate"]
        row = {"env_steps": env_steps, "wall_s": round(wall_s, 2), "episodes": self.args.quick,
               "success_rate": quick}
        if force or quick >= self.args.target - 0.05:
            full = evaluate(path, episodes=self.args.episodes, seed=seed + 5000)
            row.update(episodes=self.args.episodes, success_rate=full["success_rate"],
                       quick_success_rate=quick)
        self.eval_s += time.perf_counter() - start
        self.evals.append(row)
        print(json.dumps(row), flush=True)
        if row["episodes"] == self.args.episodes and row["success_rate"] >= self.args.target:
            self.reached = self.reached or row
            return True
        return False


def _overrides(args, algo: str) -> dict[str, Any]:
    out = {}
    for item in args.set:
        target, _, value = item.partition("=")
        name, _, key = target.partition(".")
        if not key or not value:
            raise SystemExit(f"--set {item!r}: expected ALGO.KEY=VALUE")
        if name == algo:
            out[key] = json.loads(value)
    return out


def _task_config(args, defaults: dict[str, Any]) -> dict[str, Any]:
    """The task settings a run trains with: the algorithm's training defaults, then
    --task-config on top."""
    from simreal.api import _merged, load_task_config

    extra = load_task_config(args.task_config) if args.task_config else {}
    return _merged(defaults.get("task_config", {}), extra)


def _ours(task: str, algo: str, seed: int, args, ev: Evaluator) -> dict[str, Any]:
    from simreal.api import _runner, make_env
    from simreal.sim.registry import get_task
    from simreal.train.algos import get_algo

    cls = get_task(task)
    defaults = getattr(cls, "train_defaults", {}).get(algo, {})
    cfg = get_algo(algo).config().model_validate({**defaults.get("config", {}),
                                                   **_overrides(args, algo)})
    envs = defaults.get("envs", 1024)
    task_config = _task_config(args, defaults)
    config = {"task": task, "algo": algo, "seed": seed, "envs": envs,
              "algo_config": cfg.model_dump(mode="json"), "task_config": task_config}
    env = make_env(task, envs, seed, config=task_config)
    runner = _runner(config, env, None)

    def callback(r, stats) -> bool:
        return (r.env_steps >= args.max_steps or r.wall_s >= args.max_wall_s
                or ev(r.exportable_actor(), r.env_steps, r.wall_s))

    runner.learn(args.max_steps, callback=callback, progress=False)
    if ev.reached is None:
        ev(runner.exportable_actor(), runner.env_steps, runner.wall_s, force=True)
    return {"envs": envs, "env_steps": runner.env_steps, "wall_s": round(runner.wall_s, 2),
            "algo_config": config["algo_config"], "task_config": task_config}


def _rsl_rl(task: str, seed: int, args, ev: Evaluator) -> dict[str, Any]:
    """rsl_rl's own OnPolicyRunner on our VecEnv, with our PPO's settings for the task."""
    import torch
    from rsl_rl.runners import OnPolicyRunner

    class Actor(torch.nn.Module):
        """rsl_rl's deterministic actor (normalizer, MLP, mean) under our export's names."""

        def __init__(self, runner):
            super().__init__()
            self.inner = runner.alg.get_policy().as_jit()

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.inner(obs)

    from simreal.api import make_env
    from simreal.sim.registry import get_task
    from simreal.train.ppo import PPOConfig

    cls = get_task(task)
    defaults = getattr(cls, "train_defaults", {}).get("ppo", {})
    ours = PPOConfig.model_validate(defaults.get("config", {}))
    envs = defaults.get("envs", 1024)
    torch.manual_seed(seed)
    env = make_env(task, envs, seed, config=_task_config(args, defaults))

    def mlp(hidden: list[int]) -> dict[str, Any]:
        return {"class_name": "rsl_rl.models.MLPModel", "hidden_dims": hidden,
                "activation": "elu", "obs_normalization": True}

    cfg = {
        "num_steps_per_env": ours.steps_per_env, "save_interval": 10**9,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "algorithm": {"class_name": "rsl_rl.algorithms.PPO",
                      "num_learning_epochs": ours.epochs, "num_mini_batches": ours.minibatches,
                      "clip_param": ours.clip, "gamma": ours.gamma, "lam": ours.lam,
                      "value_loss_coef": ours.value_coef, "entropy_coef": ours.entropy_coef,
                      "learning_rate": ours.learning_rate, "max_grad_norm": ours.max_grad_norm,
                      "desired_kl": ours.desired_kl,
                      # rsl_rl clips the value change to clip_param; our value_clip is its own
                      # (20 on hover, where returns are in the hundreds): unclipped is closest
                      "use_clipped_value_loss": ours.value_clip <= ours.clip},
        "actor": {**mlp(ours.actor_hidden), "distribution_cfg": {
            "class_name": "rsl_rl.modules.distribution.GaussianDistribution",
            "init_std": ours.init_std}},
        "critic": mlp(ours.critic_hidden),
        "logger": "tensorboard",
    }
    quiet = contextlib.redirect_stdout(io.StringIO())  # rsl_rl prints its models and logs
    with quiet:
        runner = OnPolicyRunner(env, cfg, log_dir=None, device="cpu")
    per_iteration = ours.steps_per_env * envs
    env_steps, wall_s = 0, 0.0
    while env_steps < args.max_steps and wall_s < args.max_wall_s:
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            runner.learn(1)
        wall_s += time.perf_counter() - start
        env_steps += per_iteration
        if ev(Actor(runner), env_steps, wall_s):
            break
    if ev.reached is None:
        ev(Actor(runner), env_steps, wall_s, force=True)
    return {"envs": envs, "env_steps": env_steps, "wall_s": round(wall_s, 2),
            "algo_config": cfg}


def run_one(task: str, algo: str, seed: int, args) -> dict[str, Any]:
    from simreal.api import make_env

    contract = make_env(task, 1, 0).contract()
    tmp = Path(tempfile.mkdtemp())
    ev = Evaluator(args, contract, tmp)
    print(f"--- {task} {algo} seed {seed}", flush=True)
    if algo == "rsl_rl_ppo":
        info = _rsl_rl(task, seed, args, ev)
    else:
        info = _ours(task, algo, seed, args, ev)
    full = [e for e in ev.evals if e["episodes"] == args.episodes]
    return {
        "task": task, "algo": algo, "seed": seed, "reached": ev.reached is not None,
        "wall_s_to_target": ev.reached["wall_s"] if ev.reached else None,
        "env_steps_to_target": ev.reached["env_steps"] if ev.reached else None,
        "final_success_rate": full[-1]["success_rate"] if full else None,
        "eval_wall_s": round(ev.eval_s, 1), **info, "evaluations": ev.evals,
    }


def summarize(runs: list[dict[str, Any]], algos: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for algo in algos:
        mine = [r for r in runs if r["algo"] == algo]
        hit = [r for r in mine if r["reached"]]
        out[algo] = {
            "runs": len(mine), "reached": len(hit),
            "median_wall_s_to_target": (statistics.median(r["wall_s_to_target"] for r in hit)
                                        if hit else None),
            "median_env_steps_to_target": (statistics.median(r["env_steps_to_target"]
                                                             for r in hit) if hit else None),
            "mean_final_success_rate": (statistics.fmean(r["final_success_rate"] for r in mine
                                                         if r["final_success_rate"] is not None)
                                        if mine else None),
        }
    return out


def plot(runs: list[dict[str, Any]], task: str, target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"ppo": "tab:blue", "sac": "tab:red", "td3": "tab:green",
              "rsl_rl_ppo": "tab:gray"}
    fig, ax = plt.subplots(figsize=(8, 5))
    labelled = set()
    for run in runs:
        pts = [(0.0, 0.0)] + [(e["wall_s"], e["success_rate"]) for e in run["evaluations"]]
        label = run["algo"] if run["algo"] not in labelled else None
        labelled.add(run["algo"])
        ax.plot(*zip(*pts, strict=True), color=colors.get(run["algo"]), alpha=0.8,
                marker=".", label=label)
    ax.axhline(target, color="k", linestyle="--", linewidth=0.8)
    ax.set_xlabel("training wall time [s] (evaluation excluded)")
    ax.set_ylabel("success rate (ONNX policy, deploy runtime)")
    ax.set_title(f"{task}: success against wall time, {len(runs)} runs")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=["quadrotor-hover"])
    p.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--episodes", type=int, default=1000, help="episodes of a full evaluation")
    p.add_argument("--quick", type=int, default=200, help="episodes of a quick check")
    p.add_argument("--every-s", type=float, default=5.0, help="training seconds between checks")
    p.add_argument("--max-steps", type=int, default=10_000_000)
    p.add_argument("--max-wall-s", type=float, default=900.0)
    p.add_argument("--set", action="append", default=[], metavar="ALGO.KEY=VALUE")
    p.add_argument("--task-config", help="YAML merged onto the task's training settings")
    p.add_argument("--name", help="suffix of the result file (compare_algos_<task>_<name>)")
    p.add_argument("--append", action="store_true", help="add to the task's existing results")
    args = p.parse_args()

    for task in args.tasks:
        name = f"compare_algos_{task}" + (f"_{args.name}" if args.name else "")
        runs = []
        if args.append and (_common.RESULTS / f"{name}.json").is_file():
            runs = json.loads((_common.RESULTS / f"{name}.json").read_text())["runs"]
        for algo in args.algos:
            for seed in args.seeds:
                run = run_one(task, algo, seed, args)
                run["overrides"] = _overrides(args, algo)
                runs = [r for r in runs if (r["algo"], r["seed"]) != (algo, seed)] + [run]
                present = [a for a in ALGOS if any(r["algo"] == a for r in runs)]
                result = {"task": task, "target": args.target, "episodes": args.episodes,
                          "every_s": args.every_s, "summary": summarize(runs, present),
                          "runs": runs}
                path = _common.write_result(name, result)
        plot(runs, task, args.target, _common.RESULTS / f"{name}.png")
        print(f"wrote {path} and its .png")
        print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
