"""Learning test: SAC solves quadrotor-hover within a fixed step budget and seed.

The budget is 800k steps (the task's SAC settings otherwise; its default budget is larger, to
cover slower seeds); success is judged on the exported ONNX policy through the deploy runtime,
as `simreal eval` does.
"""


from simreal.api import train

BUDGET = 800_000


def test_sac_hover_reaches_90_percent_success(tmp_path):
    summary = train("quadrotor-hover", algo="sac", steps=BUDGET, seed=0, out=tmp_path / "run",
                    eval_episodes=300, progress=False)
    assert summary["algo"] == "sac"
    assert summary["env_steps"] <= BUDGET + 50_000
    assert summary["success_rate"] >= 0.90, summary
    assert summary["metrics"]["position_error_mean"] < 0.1
