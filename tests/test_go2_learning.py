"""Learning test: PPO on go2-flat, a fixed step budget and seed, learns to track commands.

Not a walking policy (that takes ~9M steps: bench/train_go2.py). Within this budget the
tracking reward of finished episodes (linear + yaw-rate tracking, per second of a 20 s
episode, weights 1.5 and 0.75) must rise from what a flailing initial policy earns (its
episodes end in falls within a second or two) to above TRACKING_LEVEL.
"""


from simreal.api import train

# 70 PPO iterations of 256 envs x 24 steps, with the task's training defaults. Measured
# (2026-12-07; one 80-iteration run per seed, the mean of ten iterations' tracking): with the
# defaults of that day (history, leg odometry, damping 0-2.5) seeds 0 / 1 start at 0.10 / 0.13
# and reach 0.53 / 0.46 around iteration 70, 0.58 / 0.46 at 80; with the defaults before them
# seeds 0 / 1 / 2 reached 0.48 / 0.57 / 0.44 around 70, and seed 1 0.28 around 50.
ENVS, STEPS = 256, 430_080
TRACKING_LEVEL = 0.3  # a policy that only stands, never falling, earns ~0.5 (measured)


def test_ppo_go2_flat_tracking_reward_rises(tmp_path):
    history: list[dict[str, float]] = []

    def record(runner, stats):
        if "reward/tracking_lin_vel" in stats:
            history.append(dict(stats))
        return False

    summary = train("go2-flat", envs=ENVS, steps=STEPS, seed=0, out=tmp_path / "run",
                    eval_episodes=16, progress=False, callback=record)
    assert summary["env_steps"] == STEPS

    def tracking(rows):
        return sum(r["reward/tracking_lin_vel"] + r["reward/tracking_ang_vel"]
                   for r in rows) / len(rows)

    first, last = tracking(history[:10]), tracking(history[-10:])
    assert first < 0.2 and last > TRACKING_LEVEL, (first, last)
