"""Learning test: SAC solves quadrotor-hover within a fixed step budget and seed.

The budget is the task's default, 1.5M steps, with its default settings (since the link's
latency, age and loss are randomized in training, seed 0 is at 4.4% at 800k steps and 100% at
1.5M); success is judged on the exported ONNX policy through the deploy runtime, as `simreal
eval` does. About 3.5 minutes of training on 2 cores: in the slow set.
"""

import pytest

from simreal.api import train

BUDGET = 1_500_000


@pytest.mark.slow
def test_sac_hover_reaches_90_percent_success(tmp_path):
    summary = train("quadrotor-hover", algo="sac", steps=BUDGET, seed=0, out=tmp_path / "run",
                    eval_episodes=300, progress=False)
    assert summary["algo"] == "sac"
    assert summary["env_steps"] <= BUDGET + 50_000
    assert summary["success_rate"] >= 0.90, summary
    assert summary["metrics"]["position_error_mean"] < 0.1
