"""Learning test: PPO brings the Panda's tool to 1-2 cm and a few degrees of random targets
within a fixed step budget and seed (arm-reach with narrowed target ranges, so that the budget
fits in a minute or two on 2 cores). Judged on the exported ONNX policy through the deploy
runtime, as `simreal eval` does; an untrained policy ends ~20 cm and ~25 degrees away."""


from simreal.api import train

# measured (2026-12-07) at this budget: 1.26 cm / 2.1 deg mean (seed 0), 1.54 cm / 2.4 deg
# (seed 1); the earlier 1M steps took this test 178 s of a 12-minute suite
STEPS = 600_000
EASY = {"target": {"x": [0.4, 0.5], "y": [-0.1, 0.1], "z": [0.3, 0.45], "yaw": 0.3,
                   "tilt": 0.1}}


def test_ppo_learns_to_reach_within_its_budget(tmp_path):
    summary = train("arm-reach", algo="ppo", envs=512, steps=STEPS, seed=0,
                    out=tmp_path / "run", eval_episodes=200, progress=False, task_config=EASY)
    assert summary["env_steps"] <= STEPS + 512 * 24
    metrics = summary["metrics"]
    assert metrics["position_error_mean"] < 0.025, summary
    assert metrics["orientation_error_deg_mean"] < 8.0, summary
