"""Learning test: PPO solves quadrotor-hover within a fixed step budget and seed.

The budget is the task's default (`TRAIN_DEFAULTS["ppo"]["steps"]`); success is judged on the
exported ONNX policy through the deploy runtime, as `simreal eval` does.
"""

import pytest

from simreal.api import train
from simreal.sim.tasks.quadrotor_hover import TRAIN_DEFAULTS


@pytest.mark.slow
def test_ppo_hover_reaches_90_percent_success(tmp_path):
    summary = train("quadrotor-hover", algo="ppo", seed=0, out=tmp_path / "run",
                    eval_episodes=300, progress=False)
    assert summary["algo"] == "ppo"
    assert summary["env_steps"] <= TRAIN_DEFAULTS["ppo"]["steps"] + 100_000
    assert summary["success_rate"] >= 0.90, summary
    assert summary["metrics"]["position_error_mean"] < 0.1
