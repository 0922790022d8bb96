"""Shared by the transfer benches (transfer_hover.py, transfer_arm.py): a policy evaluated
through the deploy runtime on rows of task-config changes, each row's success against the
nominal row's."""

from __future__ import annotations

import sys
import time
from typing import Any

RELATIVE_TARGET = 0.9


def run_rows(task: str, policy_path: str, rows: dict[str, dict[str, Any]], episodes: int,
             seed: int, wanted: set[str]) -> dict[str, Any]:
    """Evaluate `policy_path` on `task` changed by each wanted row (`nominal` always): the
    result per row with `relative_success` (its success over nominal's) and `ok` (at least
    RELATIVE_TARGET), and `all_ok`."""
    from simreal.api import check_task_contract, contract_task_config, make_env
    from simreal.deploy.policy import OnnxPolicy
    from simreal.evaluate import run_episodes

    policy = OnnxPolicy(policy_path)
    results: dict[str, dict[str, Any]] = {}
    for name, change in rows.items():
        if name != "nominal" and name not in wanted:
            continue
        t0 = time.perf_counter()
        # (make_env, not api.evaluate: evaluation drops training-only settings such as the
        # quadrotor's link)
        # over the settings the contract pins (history lengths), as `simreal eval` builds it
        env = make_env(task, min(episodes, 2048), seed,
                       contract_task_config(policy.contract, change))
        check_task_contract(policy.contract, env.contract(), policy_path)
        result = run_episodes(env, policy, episodes)
        result["change"] = change
        result["wall_s"] = round(time.perf_counter() - t0, 1)
        results[name] = result
        crash = result.get("crash_rate")
        print(f"{name}: success {result['success_rate']:.3f}"
              + (f", crash {crash:.3f}" if crash is not None else ""), file=sys.stderr,
              flush=True)
    nominal = results["nominal"]["success_rate"]
    for result in results.values():
        result["relative_success"] = (result["success_rate"] / nominal) if nominal > 0 else None
        result["ok"] = (result["relative_success"] is not None
                        and result["relative_success"] >= RELATIVE_TARGET)
    return {"policy": policy_path, "task": task, "episodes": episodes, "seed": seed,
            "relative_target": RELATIVE_TARGET, "rows": results,
            "all_ok": all(r["ok"] for r in results.values())}


def brief(out: dict[str, Any]) -> dict[str, tuple]:
    """Per row: (success, relative success), rounded, for stdout."""
    return {k: (round(r["success_rate"], 3), r["relative_success"] and round(
        r["relative_success"], 3)) for k, r in out["rows"].items()}


def check_rows(parser: Any, rows: dict[str, Any], only: list[str] | None) -> set[str]:
    """The rows asked for (all by default); an unknown name is the parser's error."""
    wanted = {"nominal", *(only or rows)}
    unknown = wanted - set(rows)
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; known: {sorted(rows)}")
    return wanted
