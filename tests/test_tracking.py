"""Per-command tracking (`simreal eval --tracking`): the table's shape and JSON keys, on a
reduced table (two commands, two short episodes each; the full 8 x 10 x 20 s table is the
CLI's and bench/transfer_go2.py's). No target is asserted: tests/assets/go2_walk.onnx meets them
on 7 of the 8 rows (docs/SIM2SIM.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from simreal import api
from simreal.cli import main
from simreal.deploy.policy import OnnxPolicy
from simreal.evaluate import check_commands, command_targets, load_commands, tracking_row
from simreal.robots.registry import get_robot

ASSETS = Path(__file__).resolve().parent / "assets"
ROW_KEYS = {"command", "lin_vel_error", "ang_vel_error", "falls", "episodes"}


@pytest.fixture(scope="module")
def go2_policy(tmp_path_factory) -> Path:
    return walk_or_stand(tmp_path_factory.mktemp("go2"))


def walk_or_stand(folder: Path) -> Path:
    """tests/assets/go2_walk.onnx while it fits robots/go2; else (the model changed, the asset
    awaits retraining) a zero-action policy with the current go2 contract."""
    walk = ASSETS / "go2_walk.onnx"
    if OnnxPolicy(walk).contract.robot_hash == get_robot("go2").description_hash:
        return walk
    from simreal import make_env
    from simreal.train.export import export_onnx

    contract = make_env("go2-flat", num_envs=1, seed=0).contract()

    class Zero(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.out = torch.nn.Linear(contract.obs_dim, contract.action_dim)
            with torch.no_grad():
                self.out.weight.zero_()
                self.out.bias.zero_()

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.out(obs)

    return export_onnx(Zero(), contract, folder / "stand.onnx")


def _check_table(result: dict, commands: list, episodes: int) -> None:
    assert isinstance(result["tracking_ok"], bool)
    rows = result["tracking"]
    assert [r["command"] for r in rows] == [list(map(float, c)) for c in commands]
    for row in rows:
        assert ROW_KEYS <= set(row)
        assert row["episodes"] == episodes
        assert 0 <= row["falls"] <= episodes
        for key in ("lin_vel_error", "ang_vel_error"):
            assert row[key] is None or row[key] >= 0
        if row["lin_vel_error"] is not None and not math.isnan(row["lin_vel_error"]):
            # the mean velocity's miss is at most the mean miss (triangle inequality)
            (vx, vy, wz), (cx, cy, cz) = row["velocity"], row["command"]
            assert math.hypot(cx - vx, cy - vy) <= row["lin_vel_error"] + 1e-6, row
            assert abs(cz - wz) <= row["ang_vel_error"] + 1e-6, row
    assert result["tracking_ok"] == all(r["ok"] for r in rows)


def test_tracking_table_through_the_cli(go2_policy, tmp_path, capsys):
    table = tmp_path / "commands.yaml"
    table.write_text("- [0.5, 0.0, 0.0]\n- [0.0, 0.0, -0.5]\n")
    code = main(["eval", str(go2_policy), "--task", "go2-flat", "--tracking", "--commands",
                 str(table), "--episodes", "2", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["episodes_per_command"] == 2 and result["episode_s"] == 20.0
    _check_table(result, [[0.5, 0, 0], [0, 0, -0.5]], 2)


def test_tracking_api_holds_each_command(go2_policy):
    result = api.evaluate_tracking(go2_policy, "go2-flat", [[0.3, 0.0, 0.0]], episodes=3,
                                   episode_s=3.0, settle_s=1.0)
    _check_table(result, [[0.3, 0, 0]], 3)
    row = result["tracking"][0]
    assert row["lin_vel_error"] is not None  # steps after the settle were measured


def test_default_table_is_the_issues():
    from simreal.evaluate import TRACKING_COMMANDS

    assert set(TRACKING_COMMANDS) == {(0.3, 0, 0), (0.5, 0, 0), (1.0, 0, 0), (-0.5, 0, 0),
                                      (0, 0.3, 0), (0, -0.3, 0), (0, 0, 0.5), (0, 0, -0.5)}


def test_row_targets_and_falls():
    import numpy as np

    t, n = 10, 2
    lin = np.full((t, n), 0.05)
    ang = np.full((t, n), 0.5)
    valid = np.ones((t, n), dtype=bool)
    vel = np.zeros((t, n, 3))
    vel[:2] = 9.0  # the settle's steps: left out of every mean
    vel[2:, :, 0] = 0.45
    vel[2:, 1, 1] = 0.1  # the second episode drifts sideways
    row = tracking_row((0.5, 0, 0), lin, ang, valid, np.zeros(n, dtype=bool), 2, vel)
    assert row["ok"] and row["success_rate"] == 1.0  # a linear row ignores the yaw error
    assert np.allclose(row["velocity"], [0.45, 0.05, 0.0])  # signed: slower than commanded
    row = tracking_row((0, 0, 0.5), lin, ang, valid, np.zeros(n, dtype=bool), 2, vel)
    assert not row["ok"] and row["success_rate"] == 0.0
    valid[5:, 1] = False
    row = tracking_row((0.5, 0, 0), lin, ang, valid, np.array([False, True]), 2, vel)
    assert row["falls"] == 1 and not row["ok"] and row["success_rate"] == 0.5
    assert np.allclose(row["velocity"], [0.45, 0.3 / 11, 0.0])  # the fallen steps left out
    assert command_targets((0, 0, 0)) == {"lin_vel_error": 0.1}


def test_bad_command_tables_are_refused(tmp_path, go2_policy, capsys):
    with pytest.raises(ValueError, match="command 1"):
        check_commands([[0.5, 0, 0], [0.5, 0]])
    bad = tmp_path / "bad.yaml"
    bad.write_text("- [0.5, 0.0, nan]\n")
    with pytest.raises(ValueError, match="command 0"):
        load_commands(bad)
    code = main(["eval", str(go2_policy), "--tracking", "--commands", str(bad), "--json"])
    assert code == 2 and "command 0" in capsys.readouterr().err
