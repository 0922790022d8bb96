"""Does a go2-flat policy transfer? The per-command tracking table (docs/SIM2SIM.md) on the
training simulator, on another model and under each perturbation.

Tables (each: vx 0.3, 0.5, 1.0, -0.5; vy +-0.3; wz +-0.5, held 20 s from a standing start,
10 seeded episodes per command, errors after a 2 s settle, the task's sensor noise):

- `nominal`: `simreal eval --tracking` (the task's own simulator, randomization off);
- `sim2sim_nominal`: sim2sim on the robot's own MJCF, unedited (the baseline of the rows
  below: the same loop, robot.yaml's PD at the model's rate);
- `hard`: sim2sim `--variant hard` (the other public MJCF's damping, friction loss, timestep,
  cones, soft feet and knee limit);
- perturbations, sim2sim model edits of the robot's own MJCF (they work on any MJCF):
  friction 0.3 and 1.5, latency 40 ms, strength 0.8, mass x0.8 and x1.2 (every robot body),
  joint damping 0 and 2.5;
- one table per `--mjcf` file: sim2sim on another MJCF of the robot, named by its stem.

Each sim2sim table gets `relative_success`: its success rate (episodes that stood for the
whole episode and met their row's target: lin_vel_error < 0.1 m/s, ang_vel_error < 0.15 rad/s
for yaw rows) over `sim2sim_nominal`'s, against the target of at least 0.9 (null when the
nominal succeeds in no episode).

    python bench/transfer_go2.py POLICY.onnx [--robot go2] [--episodes 10] [--episode-s 20]
        [--only hard friction_0.3 ...] [--mjcf OTHER.xml ...] [--task-config RUN/config.yaml]
        [--jobs 2] [--out transfer_go2]

Writes bench/results/<out>.json (bench/_common.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from _common import write_result

PERTURBATIONS: dict[str, dict[str, float]] = {
    "friction_0.3": {"friction": 0.3},
    "friction_1.5": {"friction": 1.5},
    "latency_40ms": {"latency": 0.04},
    "strength_0.8": {"strength": 0.8},
    "mass_0.8": {"mass": 0.8},
    "mass_1.2": {"mass": 1.2},
    "damping_0": {"damping": 0.0},
    "damping_2.5": {"damping": 2.5},
}
RELATIVE_TARGET = 0.9


def _brief(table: dict) -> dict:
    keep = ("tracking", "tracking_ok", "success_rate", "model", "timestep", "perturbation",
            "torque_limits", "episodes_per_command", "episode_s", "settle_s")
    return {k: table[k] for k in keep if k in table}


def _table(fn: str, kwargs: dict) -> tuple[dict, float]:
    """One table (api.<fn>(**kwargs)), in a worker process, and the seconds it took."""
    from simreal import api

    t0 = time.perf_counter()
    table = _brief(getattr(api, fn)(**kwargs))
    return table, round(time.perf_counter() - t0, 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("policy", help="the go2-flat ONNX policy")
    p.add_argument("--robot", default="go2", help="robot name or folder (default go2)")
    p.add_argument("--episodes", type=int, default=10, help="episodes per command")
    p.add_argument("--episode-s", type=float, default=20.0, help="seconds per episode")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--only", nargs="*", help="tables to run (nominal, sim2sim_nominal, hard, "
                   "or perturbation names); default all")
    p.add_argument("--mjcf", nargs="*", default=[], metavar="FILE",
                   help="other MJCFs of the robot, a sim2sim table each (named by the file's "
                   "stem; tests/assets/go2_other.xml, say)")
    p.add_argument("--task-config", metavar="YAML",
                   help="the run's task settings (RUN_DIR/config.yaml) for the nominal table "
                        "(history options and leg odometry are read from the contract)")
    p.add_argument("--jobs", type=int, default=1, help="tables run at once (processes)")
    p.add_argument("--out", default="transfer_go2", help="result name under bench/results/")
    args = p.parse_args()

    from simreal.api import load_task_config
    from simreal.robots.registry import get_robot

    robot = get_robot(args.robot)
    wanted = set(args.only) if args.only else None
    common = {"episodes": args.episodes, "seed": args.seed, "episode_s": args.episode_s}
    s2s = {"policy": args.policy, "robot": args.robot, **common}
    jobs: dict[str, tuple[str, dict]] = {  # table -> (api function, its arguments)
        "nominal": ("evaluate_tracking", {"policy": args.policy, "task": "go2-flat",
                                          "robot": args.robot, **common,
                                          "task_config": load_task_config(args.task_config)
                                          if args.task_config else None}),
        "sim2sim_nominal": ("sim2sim", {"mjcf": robot.mjcf_path, **s2s}),
        "hard": ("sim2sim", {"variant": "hard", **s2s}),
    }
    for name, edits in PERTURBATIONS.items():
        jobs[name] = ("sim2sim", {"mjcf": robot.mjcf_path, "perturb": edits, **s2s})
    for other in args.mjcf:
        jobs[Path(other).stem] = ("sim2sim", {"mjcf": other, **s2s})
        if wanted is not None:
            wanted.add(Path(other).stem)  # asked for by --mjcf
    jobs = {k: v for k, v in jobs.items() if wanted is None or k in wanted}

    tables: dict[str, dict] = {}
    seconds: dict[str, float] = {}
    # tables are independent: one process each, `--jobs` at a time (each runs on one thread)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(_table, fn, kw): name for name, (fn, kw) in jobs.items()}
        for future in as_completed(futures):
            name = futures[future]
            tables[name], seconds[name] = future.result()
            print(f"{name}: success {tables[name]['success_rate']:.2f}, "
                  f"tracking_ok {tables[name]['tracking_ok']} ({seconds[name]} s)",
                  file=sys.stderr, flush=True)
    tables = {name: tables[name] for name in jobs}  # the docstring's order
    seconds = {name: seconds[name] for name in jobs}

    base = tables.get("sim2sim_nominal", {}).get("success_rate")
    relative = {}
    for name, table in tables.items():
        if name in ("nominal", "sim2sim_nominal"):
            continue
        ratio = table["success_rate"] / base if base else None
        relative[name] = {"relative_success": ratio,
                          "meets_target": ratio is not None and ratio >= RELATIVE_TARGET}
    result = {"policy": args.policy, "robot": robot.name,
              "robot_hash": robot.description_hash[:12], "relative_target": RELATIVE_TARGET,
              "relative_to": "sim2sim_nominal", "relative": relative, "seconds": seconds,
              "tables": tables}
    path = write_result(args.out, result)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
