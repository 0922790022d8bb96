"""Does an arm policy transfer? Its success under each perturbation, against nominal.

For arm-reach (default) or arm-lift (`--task`). Every row evaluates the ONNX policy through
the deploy runtime (as `simreal eval` does) on --episodes episodes of the task, its own
randomization (joint damping, gains 0.9-1.1, latency 0-20 ms) and encoder noise included,
with one change:

- `nominal`: none;
- `mass_0.8`, `mass_1.2`: every arm link's mass and inertia at 0.8 and 1.2 times nominal,
  the controllers' gravity compensation still the nominal model's (randomization.mass);
- `strength_0.8`: the joint servos' gains (kp and kd) at 0.8 times nominal;
- `latency_20ms`: every command 20 ms late at the joint controllers;
- `observation_age_20ms`: every joint state the policy acts on 20 ms old (a node on its own
  timer acts on a state up to a period old).

Each row gets `relative_success` (its success rate over nominal's) against the target of at
least 0.9.

    python bench/transfer_arm.py POLICY.onnx [--task arm-lift] [--episodes 1000]
        [--only mass_1.2 ...] [--out NAME]   # default transfer_reach, transfer_lift

Writes bench/results/<out>.json (bench/_common.py).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from _common import write_result
from _transfer import brief, check_rows, run_rows

TASKS = {"arm-reach": "transfer_reach", "arm-lift": "transfer_lift"}


def perturbations() -> dict[str, dict[str, Any]]:
    """Task-config changes per row: each perturbed quantity fixed at its perturbed value."""
    def fixed(**values: float) -> dict[str, Any]:
        return {"randomization": {k: [v, v] for k, v in values.items()}}

    return {
        "nominal": {},
        "mass_0.8": fixed(mass=0.8),
        "mass_1.2": fixed(mass=1.2),
        "strength_0.8": fixed(kp_scale=0.8, kd_scale=0.8),
        "latency_20ms": fixed(latency=0.02),
        "observation_age_20ms": fixed(observation_age=0.02),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("policy", help="the ONNX policy")
    p.add_argument("--task", choices=sorted(TASKS), default="arm-reach")
    p.add_argument("--episodes", type=int, default=1000, help="episodes per row")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--only", nargs="*", help="rows to run besides nominal; default all")
    p.add_argument("--out", help="result name under bench/results/ (default by task)")
    args = p.parse_args()

    rows = perturbations()
    out = run_rows(args.task, args.policy, rows, args.episodes, args.seed,
                   check_rows(p, rows, args.only))
    path = write_result(args.out or TASKS[args.task], out)
    print(f"wrote {path}", file=sys.stderr)
    print(brief(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
