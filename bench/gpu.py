"""The GPU benchmark, prepared for one lent H200 (8 minutes at most): MuJoCo Warp throughput, the
off-policy update rate, and time to a walking go2-flat policy with PPO and with SAC.

Phases, in order, each with its own share of the time budget (a phase that runs out stops and
the next starts; the JSON is rewritten after every measurement, and a watchdog writes it and
exits at the overall deadline, so the script always finishes with what it has):

0. the off-policy update rate on the GPU: bench/offpolicy_update.py's rows (SAC updates of
   the hover, go2 and arm shapes at batches 1024, 4096 and 16384, the batched path beside the
   looped reference) in 8% of the budget;
1. throughput on `mjwarp` (CUDA graphs on): env steps/s of go2-flat and quadrotor-hover at
   16k, 64k, 4k and 1k environments, in that order (random actions in [-0.5, 0.5], resets
   included), and the raw physics steps/s of the same backend (backend.step alone); the
   first build of each task also measures the kernel compile (Warp caches kernels in
   $WARP_CACHE_PATH, else ~/.cache/warp: a fresh machine compiles once);
2. the `mujoco` (C, CPU) backend's env steps/s on the same machine, all its cores, 4096 envs;
3. time to a walking go2-flat policy with PPO on mjwarp: the criterion of bench/train_go2.py
   (the exported ONNX policy, run through deploy's runtime on the CPU as `simreal eval` does,
   tracks commands in [-1, 1] m/s with lin_vel_error < 0.15 m/s and falls in < 5% of 100
   episodes of 20 s); the clock is training time, evaluations excluded and reported beside it;
4. the same with SAC (the task's SAC defaults, 4096 envs) in what is left.
`--keep DIR` copies each run's last exported policy there (go2_ppo.onnx, go2_sac.onnx) for
`simreal eval --tracking` and `simreal sim2sim` afterwards.

    python bench/gpu.py                  # on the GPU machine: bench/results/gpu.json
    python bench/gpu.py --smoke          # tiny sizes on Warp's CPU device: the script works

Needs a CUDA build of torch and `pip install -e '.[gpu]'` (mujoco-warp, warp-lang).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import _common

TASKS = ("go2-flat", "quadrotor-hover")
# the target's size first (a slow first compile must not starve it), then the others
SIZES = (16384, 65536, 4096, 1024)
# PPO for go2-flat at GPU scale (legged_gym's flat-terrain settings: 4096 envs, 24 steps,
# 5 epochs, 4 minibatches, KL-adaptive lr 1e-3, entropy 0.01); the task defaults otherwise
GPU_PPO = {"steps_per_env": 24, "epochs": 5, "minibatches": 4, "learning_rate": 1e-3,
           "entropy_coef": 0.01, "actor_hidden": [512, 256, 128],
           "critic_hidden": [512, 256, 128], "init_std": 1.0}


class Report:
    """The result dict, written atomically after every change."""

    def __init__(self, path: Path, data: dict[str, Any]):
        self.path, self.data = path, data
        self.lock = threading.Lock()

    def write(self) -> None:
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
            os.replace(tmp, self.path)


class Budget:
    def __init__(self, total_s: float):
        self.start = time.perf_counter()
        self.total_s = total_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.total_s - self.elapsed()


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _free(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def env_throughput(task: str, n: int, backend: str, device: str, seconds: float,
                   deadline: float, nthread: int | None = None) -> dict[str, Any]:
    """Env steps/s (and raw physics steps/s) of `n` envs of `task`, measured for `seconds`."""
    import torch

    from simreal.api import make_env
    from simreal.robots.registry import get_robot
    from simreal.sim.registry import get_task

    row: dict[str, Any] = {"task": task, "envs": n, "backend": backend, "device": device}
    t0 = time.perf_counter()
    if nthread is not None:  # the mujoco backend with every core of the machine
        cls = get_task(task)
        env = cls(get_robot(cls.robot_name), cls.config_class(), n, 0, nthread=nthread)
        row["threads"] = nthread
    else:
        env = make_env(task, n, 0, backend=backend, device=device)
    env.reset()
    gen = torch.Generator(device=env.device).manual_seed(0)
    actions = torch.rand(n, env.num_actions, generator=gen, device=env.device) - 0.5
    env.step(actions)  # CUDA graph capture (and, on a fresh machine, kernel compiles)
    _sync(device)
    row["build_and_first_step_s"] = round(time.perf_counter() - t0, 2)
    for _ in range(2):
        env.step(actions)
    _sync(device)
    steps, start = 0, time.perf_counter()
    while steps < 3 or (time.perf_counter() - start < seconds
                        and time.perf_counter() < deadline):
        env.step(actions)
        steps += 1
    _sync(device)
    elapsed = time.perf_counter() - start
    row.update(env_steps=steps * n, seconds=round(elapsed, 3),
               env_steps_per_s=round(steps * n / elapsed))
    b = env.backend
    steps, start = 0, time.perf_counter()
    while steps < 3 or (time.perf_counter() - start < seconds / 2
                        and time.perf_counter() < deadline):
        b.step(env.decimation)
        steps += 1
    _sync(device)
    elapsed = time.perf_counter() - start
    row["physics_steps_per_s"] = round(steps * n * env.decimation / elapsed)
    row["physics_only_env_steps_per_s"] = round(steps * n / elapsed)
    if hasattr(b, "overflow"):
        row["worlds_overflowed"] = int(b.overflow().sum())
    del env, b
    _free(device)
    return row


def train_to_walk(out: dict[str, Any], device: str, envs: int, budget_s: float,
                  deadline: float, every_s: float, episodes: int, smoke: bool,
                  report: Report, algo: str = "ppo", keep: Path | None = None) -> None:
    """`algo` on mjwarp until the exported policy walks (bench/train_go2.py's criterion);
    fills `out` (part of the report) as it goes; the last exported policy is copied to
    `keep`/go2_<algo>.onnx."""
    import shutil

    from train_go2 import FALL_RATE, LIN_VEL_ERROR

    from simreal import api
    from simreal.train.export import export_onnx

    algo_config = GPU_PPO if algo == "ppo" else None
    out.update({"envs": envs, "algo": algo, "config": algo_config, "criterion": {
        "lin_vel_error_below": LIN_VEL_ERROR, "fall_rate_below": FALL_RATE,
        "episodes": episodes, "episode_s": 20.0}, "evaluations": [], "reached": False})
    tmp = Path(tempfile.mkdtemp(prefix="gpu_go2_"))
    state = {"last_eval": -1e9, "eval_s": 0.0}
    t_start = time.perf_counter()

    def callback(runner, stats) -> bool:
        out["iterations"], out["train_wall_s"] = runner.iteration, round(runner.wall_s, 1)
        out["env_steps"] = runner.env_steps
        out["last_stats"] = {k: round(v, 4) for k, v in stats.items()
                             if k.startswith(("episode/", "steps_per_s", "mean_reward"))}
        report.write()
        if runner.wall_s >= budget_s or time.perf_counter() > deadline - 30:
            return True
        gate = smoke or (stats.get("episode/fall_rate", 1.0) < 0.2
                         and stats.get("episode/lin_vel_error", 9.0) < 0.3)
        if not gate or runner.wall_s - state["last_eval"] < every_s:
            return False
        state["last_eval"] = runner.wall_s
        start = time.perf_counter()
        path = export_onnx(runner.exportable_actor(), runner.env.contract(), tmp / "go2.onnx")
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, keep / f"go2_{algo}.onnx")
        result = api.evaluate(path, episodes=episodes, seed=10_000 + runner.iteration)
        state["eval_s"] += time.perf_counter() - start
        row = {"iteration": runner.iteration, "env_steps": runner.env_steps,
               "train_wall_s": round(runner.wall_s, 1),
               **{k: round(result[k], 4) for k in ("lin_vel_error", "fall_rate",
                                                   "success_rate")}}
        out["evaluations"].append(row)
        out["eval_wall_s"] = round(state["eval_s"], 1)
        print(json.dumps({"go2_eval": row}), flush=True)
        walks = result["lin_vel_error"] < LIN_VEL_ERROR and result["fall_rate"] < FALL_RATE
        if walks:
            out.update(reached=True, train_wall_s_to_walking=row["train_wall_s"],
                       env_steps_to_walking=row["env_steps"])
        report.write()
        return walks or smoke

    summary = api.train("go2-flat", algo=algo, envs=envs, steps=10**12, seed=0, out=tmp / "run",
                        eval_episodes=2 if smoke else 20, progress=False, callback=callback,
                        algo_config=algo_config, backend="mjwarp", device=device)
    if keep is not None and Path(summary.get("policy", "")).is_file():
        shutil.copyfile(summary["policy"], keep / f"go2_{algo}.onnx")
    out["total_wall_s_incl_build_and_evals"] = round(time.perf_counter() - t_start, 1)
    out["final_env_steps_per_s"] = round(summary["env_steps"] / max(summary["wall_s"], 1e-9))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes on Warp's CPU device: checks the script, measures nothing")
    p.add_argument("--device", help="default cuda (cpu with --smoke)")
    p.add_argument("--budget-s", type=float, help="whole run (default 480; smoke 600)")
    p.add_argument("--sizes", type=int, nargs="+", help=f"env counts (default {SIZES})")
    p.add_argument("--train-envs", type=int, help="go2-flat PPO envs (default 4096)")
    p.add_argument("--out", help="JSON path (default bench/results/gpu.json, gpu_smoke.json)")
    p.add_argument("--keep", type=Path, help="folder for the trained go2 policies")
    p.add_argument("--ppo-share", type=float, default=0.5,
                   help="share of the training time PPO gets before SAC (default 0.5)")
    args = p.parse_args()
    smoke = args.smoke
    device = args.device or ("cpu" if smoke else "cuda")
    sizes = args.sizes or ([4, 8] if smoke else list(SIZES))
    budget = Budget(args.budget_s or (600.0 if smoke else 480.0))
    out_path = Path(args.out) if args.out else _common.RESULTS / (
        "gpu_smoke.json" if smoke else "gpu.json")

    import torch

    info: dict[str, Any] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                            "torch": torch.__version__, "device": device, "smoke": smoke}
    try:
        import mujoco_warp
        import warp

        info.update(warp=warp.config.version, mujoco_warp=getattr(mujoco_warp, "__version__",
                                                                  "?"))
    except ImportError as exc:
        info["import_error"] = str(exc)
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    report = Report(out_path, {"machine": info, "budget_s": budget.total_s,
                               "offpolicy_update": [], "throughput": [], "cpu_backend": [],
                               "errors": []})
    report.write()

    def watchdog() -> None:  # the overall deadline holds even inside a stuck compile
        time.sleep(max(1.0, budget.left()))
        report.data["timed_out"] = True
        report.data["elapsed_s"] = round(budget.elapsed(), 1)
        report.write()
        print(f"bench/gpu.py: budget of {budget.total_s:.0f} s spent; wrote {out_path}",
              flush=True)
        os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()

    def phase_error(name: str, exc: BaseException) -> None:
        report.data["errors"].append({"phase": name, "error": repr(exc),
                                      "trace": traceback.format_exc()[-2000:]})
        report.write()
        print(f"{name}: {exc!r}", flush=True)

    # 0. the off-policy update rate: 8% of the budget
    import offpolicy_update

    phase_end = budget.start + 0.08 * budget.total_s
    for task in offpolicy_update.TASKS:
        if time.perf_counter() > phase_end:
            break
        try:
            offpolicy_update.run([task], [64] if smoke else [1024, 4096, 16384],
                                 3 if smoke else 20, device, False,
                                 emit=lambda row: (print(row, flush=True),
                                                   report.data["offpolicy_update"].append(
                                                       json.loads(row)), report.write()))
        except Exception as exc:  # noqa: BLE001  (recorded; the next phase runs)
            phase_error(f"offpolicy_update {task}", exc)
        _free(device)

    # 1. mjwarp throughput: 25% of the budget (go2-flat first: it carries the target)
    phase_end = time.perf_counter() + 0.25 * budget.total_s
    seconds = 0.5 if smoke else 2.0
    for task in TASKS:
        for n in sizes:
            if time.perf_counter() > phase_end:
                break
            try:
                row = env_throughput(task, n, "mjwarp", device, seconds, phase_end)
            except Exception as exc:  # noqa: BLE001  (recorded; the next phase runs)
                phase_error(f"throughput {task} {n}", exc)
                _free(device)
                continue
            report.data["throughput"].append(row)
            report.write()
            print(json.dumps(row), flush=True)

    # 2. the CPU backend on the same machine: 4% of the budget
    phase_end = time.perf_counter() + 0.04 * budget.total_s
    for task in TASKS:
        if time.perf_counter() > phase_end:
            break
        try:
            row = env_throughput(task, 8 if smoke else 4096, "mujoco", "cpu",
                                 0.5 if smoke else 2.0, phase_end,
                                 nthread=os.cpu_count() or 1)
        except Exception as exc:  # noqa: BLE001
            phase_error(f"cpu backend {task}", exc)
            continue
        report.data["cpu_backend"].append(row)
        report.write()
        print(json.dumps(row), flush=True)

    # 3. and 4. time to walking, PPO then SAC: what is left, each less a margin for its final
    # export and evaluation
    for algo, share in (("ppo", args.ppo_share), ("sac", 1.0)):
        margin = 45.0  # build, the final export and evaluation
        run_end = time.perf_counter() + share * max(0.0, budget.left() - margin) + margin
        train_budget = max(0.0, run_end - time.perf_counter() - margin)
        key = "walk" if algo == "ppo" else f"walk_{algo}"
        report.data[key] = {"budget_s": round(train_budget, 1)}
        try:
            train_to_walk(report.data[key], device, args.train_envs or (8 if smoke else 4096),
                          train_budget, min(run_end, budget.start + budget.total_s),
                          every_s=0.0 if smoke else 20.0, episodes=2 if smoke else 100,
                          smoke=smoke, report=report, algo=algo, keep=args.keep)
        except Exception as exc:  # noqa: BLE001
            phase_error(key, exc)
        _free(device)
    report.data["elapsed_s"] = round(budget.elapsed(), 1)
    report.write()
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
