"""Which of the hard variant's differences does a go2 policy fail on? sim2sim against the
robot's MJCF with the hard variant's groups of edits (simreal/sim2sim.py HARD_PARTS: joint
damping and friction loss, timestep, elliptic cones, soft feet, foot friction and condim, knee
torque limit) applied one at a time, all but one at a time, and all together.

Each row is sim2sim's tracking of the given commands (default vx 0.5; --tracking for the full
table): lin_vel_error, ang_vel_error, falls. A group whose removal ends the falls is one the
policy needs to have seen in training.

    python bench/ablate_hard.py POLICY.onnx [--robot go2] [--episodes 4] [--episode-s 10]
        [--tracking] [--out ablate_hard]

Writes bench/results/<out>.json (bench/_common.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import write_result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("policy", help="the go2-flat ONNX policy")
    p.add_argument("--robot", default="go2", help="robot name or folder (default go2)")
    p.add_argument("--episodes", type=int, default=4, help="episodes per command")
    p.add_argument("--episode-s", type=float, default=10.0, help="seconds per episode")
    p.add_argument("--tracking", action="store_true", help="the full command table")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="ablate_hard", help="result name under bench/results/")
    args = p.parse_args()

    import mujoco

    from simreal import api
    from simreal.robots.registry import get_robot
    from simreal.sim2sim import HARD_PARTS, hard_variant

    robot = get_robot(args.robot)
    rows = {"none": set(), **{f"only {x}": {x} for x in HARD_PARTS},
            **{f"all but {x}": set(HARD_PARTS) - {x} for x in HARD_PARTS},
            "all (hard)": set(HARD_PARTS)}
    commands = None if args.tracking else [[0.5, 0.0, 0.0]]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, parts in rows.items():
            spec = mujoco.MjSpec.from_file(str(robot.mjcf_path))
            hard_variant(spec, robot, parts)
            path = Path(tmp) / "variant.xml"
            path.write_text(spec.to_xml())
            t0 = time.perf_counter()
            table = api.sim2sim(args.policy, args.robot, mjcf=path, commands=commands,
                                episodes=args.episodes, episode_s=args.episode_s,
                                seed=args.seed)
            rows_out = [{k: r[k] for k in ("command", "lin_vel_error", "ang_vel_error",
                                           "falls", "episodes")} for r in table["tracking"]]
            results[name] = {"parts": sorted(parts), "tracking": rows_out,
                             "falls": sum(r["falls"] for r in rows_out),
                             "lin_vel_error_mean": sum(r["lin_vel_error"] for r in rows_out)
                             / len(rows_out), "wall_s": round(time.perf_counter() - t0, 1)}
            print(f"{name:>22}: lin_vel_error {results[name]['lin_vel_error_mean']:.3f} m/s, "
                  f"falls {results[name]['falls']}", file=sys.stderr, flush=True)
    path = write_result(args.out, {"policy": args.policy, "robot": robot.name,
                                   "episodes": args.episodes, "episode_s": args.episode_s,
                                   "rows": results})
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
