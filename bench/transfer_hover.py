"""Does a quadrotor policy transfer? Its success under each perturbation, against nominal.

For quadrotor-hover (default) or quadrotor-track (`--task`): both tasks share the physics,
link and randomization fields the rows change.

Every row evaluates the ONNX policy through the deploy runtime (as `simreal eval` does) on
--episodes episodes of the task, the task's own randomization and sensor noise included, with
one change (the other randomizations as the task draws them):

- `nominal`: none (the nominal link: no latency, no loss);
- `mass_0.8`, `mass_1.2`: the body's mass fixed at 0.8 and 1.2 times nominal;
- `thrust_0.8`: the thrust coefficient fixed at 0.8 times nominal;
- `motor_tau_2x`: the motor time constant fixed at twice nominal;
- `latency_20ms`: every command 20 ms late; `observation_age_20ms`: every state 20 ms old;
- `loss_30`: 30% of the commands lost (the motors hold the last one received).

Each row gets `relative_success` (its success rate over nominal's) against the target of at
least 0.9.

    python bench/transfer_hover.py POLICY.onnx [--task quadrotor-track] [--episodes 1000]
        [--only mass_1.2 ...] [--out NAME]   # default transfer_hover, transfer_track

Writes bench/results/<out>.json (bench/_common.py).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from _common import write_result
from _transfer import brief, check_rows, run_rows

TASKS = {"quadrotor-hover": "transfer_hover", "quadrotor-track": "transfer_track"}


def perturbations() -> dict[str, dict[str, Any]]:
    """Task-config changes per row: each perturbed quantity fixed at its perturbed value."""
    def fixed(value: float) -> list[float]:
        return [value, value]

    return {
        "nominal": {},
        "mass_0.8": {"randomization": {"mass": fixed(0.8)}},
        "mass_1.2": {"randomization": {"mass": fixed(1.2)}},
        "thrust_0.8": {"randomization": {"thrust_coefficient": fixed(0.8)}},
        "motor_tau_2x": {"randomization": {"motor_time_constant": fixed(2.0)}},
        "latency_20ms": {"link": {"latency": fixed(0.02)}},
        "observation_age_20ms": {"link": {"observation_age": fixed(0.02)}},
        "loss_30": {"link": {"command_loss": fixed(0.3)}},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("policy", help="the ONNX policy")
    p.add_argument("--task", choices=sorted(TASKS), default="quadrotor-hover")
    p.add_argument("--episodes", type=int, default=1000, help="episodes per row")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--only", nargs="*", help="rows to run besides nominal; default all")
    p.add_argument("--out", help="result name under bench/results/ (default by task)")
    args = p.parse_args()

    rows = perturbations()
    wanted = check_rows(p, rows, args.only)
    out = run_rows(args.task, args.policy, rows, args.episodes, args.seed, wanted)
    path = write_result(args.out or TASKS[args.task], out)
    print(f"wrote {path}", file=sys.stderr)
    print(brief(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
