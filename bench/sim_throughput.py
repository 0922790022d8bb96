"""Environment steps/s of a task beside the raw physics steps/s of its model, in one run.

Raw physics: mujoco.rollout with a zero policy on the env's own compiled model (a terrain
task's hfield included), from the states the env's simulations are in after its warm-up steps
(so the same contacts: a quadruped standing on its feet), the same number of environments and
threads, as many physics steps as the env run takes. The ratio says what the task's Python and
torch work (observations, rewards, resets, randomization) costs. Rates are given per second of
wall time and per CPU second of this process (all its threads): on a machine that other jobs
share, the CPU-time figures are the ones that compare.

    python bench/sim_throughput.py [--task quadrotor-hover] [--envs 256 1024 4096] [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import time

import _common
import mujoco
import numpy as np
import torch
from mujoco import rollout

from simreal.api import make_env


def env_rate(task: str, n: int, steps: int, threads: int
             ) -> tuple[float, float, np.ndarray, mujoco.MjModel]:
    """(env steps per wall s, per CPU s, the simulations' states after the warm-up, the
    env's compiled model)."""
    env = make_env(task, num_envs=n, seed=0)
    env.reset()
    actions = torch.zeros(n, env.num_actions)
    for _ in range(5):
        env.step(actions)
    initial = _states(env.backend)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        env.step(actions)
    return (n * steps / (time.perf_counter() - start), n * steps / (time.process_time() - cpu),
            initial, env.backend.model)


def _states(backend) -> np.ndarray:
    model, spec = backend.model, mujoco.mjtState.mjSTATE_FULLPHYSICS
    data = mujoco.MjData(model)
    out = np.zeros((backend.num_envs, mujoco.mj_stateSize(model, spec)))
    for i in range(backend.num_envs):
        backend.batch.get_data(i, data)
        mujoco.mj_getState(model, data, out[i], spec)
    return out


def raw_rate(model: mujoco.MjModel, initial: np.ndarray, physics_steps: int, threads: int
             ) -> tuple[float, float]:
    """(physics steps per wall s, per CPU s) of mujoco.rollout from `initial` states."""
    n = initial.shape[0]
    data = [mujoco.MjData(model) for _ in range(threads)]
    control = np.zeros((n, physics_steps, model.nu))
    with rollout.Rollout(nthread=threads) as r:
        r.rollout(model, data, initial, control[:, :2])  # warm-up
        start, cpu = time.perf_counter(), time.process_time()
        r.rollout(model, data, initial, control)
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
        env_sps, env_cpu, initial, model = env_rate(args.task, n, args.steps, threads)
        raw_pps, raw_cpu = raw_rate(model, initial, args.steps * decimation, threads)
        ratio = env_sps / (raw_pps / decimation)
        cpu_ratio = env_cpu / (raw_cpu / decimation)
        rows.append({"envs": n, "env_steps_per_s": round(env_sps),
                     "raw_physics_steps_per_s": round(raw_pps), "ratio": round(ratio, 3),
                     "env_steps_per_cpu_s": round(env_cpu),
                     "raw_physics_steps_per_cpu_s": round(raw_cpu),
                     "cpu_time_ratio": round(cpu_ratio, 3)})
        print(f"{n:>6} {env_sps:>12.0f} {raw_pps:>14.0f} {raw_pps / decimation:>13.0f} "
              f"{ratio:>6.2f} {cpu_ratio:>15.2f}")
    result = {"task": args.task, "threads": threads, "decimation": decimation, "rows": rows}
    path = _common.write_result(f"sim_throughput_{args.task}", result)
    print(f"wrote {path}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
