"""Environment steps/s of a task beside the raw physics steps/s of its simulations, in one run.

Raw physics: the env's own simulations (its compiled model, a terrain task's hfield included,
with the per-env randomized parameters of its episodes, from the states its warm-up and timed
steps left: a quadruped standing on its feet) advanced by `mujoco.batch.Batch.rollout` in one
call, recording nothing, as many physics steps as the env run took: the same physics with no
Python between substeps. (`mujoco.rollout` on the nominal model, used before, records every
substep's full state: gigabytes at 4096 quadrupeds, and a nominal model steps faster than a
randomized one, so it measured something else.) The ratio says what the task's Python and torch
work (observations, rewards, resets, randomization) costs. Rates are given per second of wall
time and per CPU second of this process (all its threads): on a machine that other jobs share,
the CPU-time figures are the ones that compare.

    python bench/sim_throughput.py [--task quadrotor-hover] [--envs 256 1024 4096] [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import time

import _common
import torch

from simreal.api import make_env


def env_rate(task: str, n: int, steps: int):
    """(env steps per wall s, per CPU s, the env after its timed steps)."""
    env = make_env(task, num_envs=n, seed=0)
    env.reset()
    actions = torch.zeros(n, env.num_actions)
    for _ in range(5):
        env.step(actions)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        env.step(actions)
    return (n * steps / (time.perf_counter() - start), n * steps / (time.process_time() - cpu),
            env)


def raw_rate(env, physics_steps: int) -> tuple[float, float]:
    """(physics steps per wall s, per CPU s) of the env's own batch, stepped in one call."""
    batch, n = env.backend.batch, env.num_envs
    batch.rollout(2, record=())  # warm-up
    start, cpu = time.perf_counter(), time.process_time()
    batch.rollout(physics_steps, record=())
    return (n * physics_steps / (time.perf_counter() - start),
            n * physics_steps / (time.process_time() - cpu))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", default="quadrotor-hover")
    p.add_argument("--envs", type=int, nargs="+", default=[256, 1024, 4096])
    p.add_argument("--steps", type=int, default=200, help="control steps per measurement")
    args = p.parse_args()
    threads = min(__import__("os").cpu_count() or 1, 8)
    decimation = make_env(args.task, num_envs=1, seed=0).decimation
    rows = []
    print(f"{args.task}: {decimation} physics steps per control step, {threads} threads")
    print(f"{'envs':>6} {'env steps/s':>12} {'raw physics/s':>14} {'raw as env/s':>13} "
          f"{'ratio':>6} {'CPU-time ratio':>15}")
    for n in args.envs:
        env_sps, env_cpu, env = env_rate(args.task, n, args.steps)
        raw_pps, raw_cpu = raw_rate(env, args.steps * decimation)
        del env
        ratio = env_sps / (raw_pps / decimation)
        cpu_ratio = env_cpu / (raw_cpu / decimation)
        rows.append({"envs": n, "env_steps_per_s": round(env_sps),
                     "raw_physics_steps_per_s": round(raw_pps), "ratio": round(ratio, 3),
                     "env_steps_per_cpu_s": round(env_cpu),
                     "raw_physics_steps_per_cpu_s": round(raw_cpu),
                     "cpu_time_ratio": round(cpu_ratio, 3)})
        print(f"{n:>6} {env_sps:>12.0f} {raw_pps:>14.0f} {raw_pps / decimation:>13.0f} "
              f"{ratio:>6.2f} {cpu_ratio:>15.2f}")
    result = {"task": args.task, "threads": threads, "decimation": decimation,
              "raw": "the env's own batch (randomized parameters, its states), Batch.rollout",
              "rows": rows}
    path = _common.write_result(f"sim_throughput_{args.task}", result)
    print(f"wrote {path}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
